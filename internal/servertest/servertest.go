// Package servertest runs cooldownd in-process for tests: internal/server
// over an internal/store on a miniredis (or a Redis the test brings),
// served by net/http/httptest, in the spirit of connect-go's memhttptest.
//
// One [Start] replaces the hand-built setups: options choose the breaker
// policy, the authenticator, the wire protocols, the Redis, and whether
// every request's bytes are recorded; [Server.Stop] and [Server.Restart]
// take the address away and bring it back, as a redeploy would. The
// package also holds the shared fixtures: [FastPolicy], the token table
// [Tokens] with its tokens, and [Bearer].
package servertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/logtest"
	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/store"
)

// Protocol is how the test server speaks HTTP.
type Protocol int

const (
	// H2C serves HTTP/1.1 and unencrypted HTTP/2 on plain TCP, as
	// cmd/cooldownd does (the default).
	H2C Protocol = iota
	// TLS serves HTTP/1.1 and HTTP/2 over TLS with httptest's certificate;
	// [Server.Client] trusts it.
	TLS
	// HTTP1 serves HTTP/1.1 only.
	HTTP1
)

// Interceptor sees each request before the server; returning true means
// it answered and the server does not.
type Interceptor func(w http.ResponseWriter, r *http.Request) bool

type options struct {
	policy     *breaker.Policy
	auth       server.Authenticator
	protocol   Protocol
	rdb        store.RedisClient
	store      *store.Store
	redisOpts  func(*redis.Options)
	storeOpts  func(*store.Options)
	serverOpts func(*server.Options)
	httpOpts   func(*http.Server)
	listener   func(net.Listener) net.Listener
	record     bool
}

// Option configures [Start] and [Run].
type Option func(*options)

// WithPolicy sets the store's breaker policy (default: the store's).
func WithPolicy(p breaker.Policy) Option { return func(o *options) { o.policy = &p } }

// WithAuth sets the authenticator (default: none; every caller is an admin
// of the default tenant).
func WithAuth(a server.Authenticator) Option { return func(o *options) { o.auth = a } }

// WithProtocol sets the wire protocols (default: [H2C]).
func WithProtocol(p Protocol) Option { return func(o *options) { o.protocol = p } }

// WithRedis runs the store on rdb (a real Redis, a Cluster, a proxy)
// instead of a new miniredis; [Server.Mini] is then nil. The caller owns
// rdb.
func WithRedis(rdb store.RedisClient) Option { return func(o *options) { o.rdb = rdb } }

// WithStore serves st (a replica of another test server: pass its Store)
// instead of a new store; the policy, Redis and store options are then
// not used.
func WithStore(st *store.Store) Option { return func(o *options) { o.store = st } }

// WithRedisOptions edits the options of the client of the miniredis (for
// example fewer retries, so tests of an unavailable store stay fast).
func WithRedisOptions(f func(*redis.Options)) Option { return func(o *options) { o.redisOpts = f } }

// WithStoreOptions edits the store's options after the policy is set.
func WithStoreOptions(f func(*store.Options)) Option { return func(o *options) { o.storeOpts = f } }

// WithServerOptions edits the server's options after the store, the
// authenticator and the discarding logger are set. On [Server.Restart]
// it is applied again to the new server.
func WithServerOptions(f func(*server.Options)) Option {
	return func(o *options) { o.serverOpts = f }
}

// WithHTTPServer edits the http.Server before it starts (its timeouts).
func WithHTTPServer(f func(*http.Server)) Option { return func(o *options) { o.httpOpts = f } }

// WithListener wraps the listener (for example to shrink socket buffers).
func WithListener(f func(net.Listener) net.Listener) Option {
	return func(o *options) { o.listener = f }
}

// WithRecording records every request (line, headers and body, the body
// read whole before the server sees it) the server receives; [Server.Wire]
// returns them.
func WithRecording() Option { return func(o *options) { o.record = true } }

// Server is one in-process cooldownd.
type Server struct {
	// URL is the base URL ("http://127.0.0.1:port" or "https://…").
	URL string
	// Addr is the listener's host:port; it stays the same across Restart.
	Addr string
	// Store is the server's store; it outlives Stop and Restart.
	Store *store.Store
	// Mini is the miniredis under the store (nil with [WithRedis] or
	// [WithStore]).
	Mini *miniredis.Miniredis

	o         options
	rdb       *redis.Client // owned (the miniredis client): closed by Close
	errLog    logtest.Buffer
	calls     atomic.Int64
	intercept atomic.Pointer[Interceptor]
	wireMu    sync.Mutex
	wire      bytes.Buffer

	mu   sync.Mutex
	srv  *server.Server
	http *httptest.Server
}

// Start runs a server for tb and closes it at cleanup. A handler panic
// (which net/http recovers and logs) fails the test.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s, err := Run(opts...)
	if err != nil {
		tb.Fatalf("servertest: %v", err)
	}
	tb.Cleanup(func() {
		s.Close()
		if l := s.errLog.String(); strings.Contains(l, "panic") {
			tb.Errorf("servertest: a handler panicked:\n%s", l)
		}
	})
	return s
}

// Run runs a server outside a test (an Example); the caller calls Close.
func Run(opts ...Option) (*Server, error) {
	s := &Server{}
	for _, f := range opts {
		f(&s.o)
	}
	if s.o.store != nil {
		s.Store = s.o.store
		if err := s.serve(nil); err != nil {
			return nil, err
		}
		return s, nil
	}
	rdb := s.o.rdb
	if rdb == nil {
		m, err := miniredis.Run()
		if err != nil {
			return nil, fmt.Errorf("start miniredis: %w", err)
		}
		ro := &redis.Options{Addr: m.Addr()}
		if s.o.redisOpts != nil {
			s.o.redisOpts(ro)
		}
		s.Mini, s.rdb = m, redis.NewClient(ro)
		rdb = s.rdb
	}
	so := store.Options{Policy: s.o.policy}
	if s.o.storeOpts != nil {
		s.o.storeOpts(&so)
	}
	st, err := store.New(rdb, so)
	if err != nil {
		s.closeRedis()
		return nil, fmt.Errorf("new store: %w", err)
	}
	s.Store = st
	if err := s.serve(nil); err != nil {
		s.closeRedis()
		return nil, err
	}
	return s, nil
}

// serve starts a new server.Server on l (nil: a new loopback port).
func (s *Server) serve(l net.Listener) error {
	so := server.Options{Store: s.Store, Auth: s.o.auth, Logger: slog.New(slog.DiscardHandler)}
	if s.o.serverOpts != nil {
		s.o.serverOpts(&so)
	}
	srv, err := server.New(so)
	if err != nil {
		return fmt.Errorf("new server: %w", err)
	}
	hs := httptest.NewUnstartedServer(s.handler(srv.Handler()))
	if l != nil {
		_ = hs.Listener.Close()
		hs.Listener = l
	}
	if s.o.listener != nil {
		hs.Listener = s.o.listener(hs.Listener)
	}
	hs.Config.ErrorLog = log.New(&s.errLog, "", 0)
	if s.o.httpOpts != nil {
		s.o.httpOpts(hs.Config)
	}
	switch s.o.protocol {
	case TLS:
		hs.EnableHTTP2 = true
		hs.StartTLS()
	case HTTP1:
		hs.Start()
	default:
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		hs.Config.Protocols = &p
		hs.Start()
	}
	s.mu.Lock()
	s.srv, s.http = srv, hs
	s.URL, s.Addr = hs.URL, hs.Listener.Addr().String()
	s.mu.Unlock()
	return nil
}

// handler counts, records and intercepts requests before h.
func (s *Server) handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.o.record {
			s.record(r)
		}
		s.calls.Add(1)
		if f := s.intercept.Load(); f != nil && (*f)(w, r) {
			return
		}
		h.ServeHTTP(w, r)
	})
}

// record appends r's request line, headers and body, as received (no
// chunk framing that could split a string a test looks for), to the wire,
// and leaves the body for the handler to read again.
func (s *Server) record(r *http.Request) {
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	s.wireMu.Lock()
	defer s.wireMu.Unlock()
	fmt.Fprintf(&s.wire, "%s %s %s\r\nHost: %s\r\n", r.Method, r.URL.RequestURI(), r.Proto, r.Host)
	_ = r.Header.Write(&s.wire)
	s.wire.WriteString("\r\n")
	s.wire.Write(body)
	if err != nil {
		fmt.Fprintf(&s.wire, "\r\n(body cut: %v)", err)
	}
	s.wire.WriteString("\r\n")
}

// SetIntercept sets (nil: clears) the request interceptor.
func (s *Server) SetIntercept(f Interceptor) {
	if f == nil {
		s.intercept.Store(nil)
		return
	}
	s.intercept.Store(&f)
}

// Calls is how many requests reached the server (intercepted ones too).
func (s *Server) Calls() int64 { return s.calls.Load() }

// Wire returns every request received so far ([WithRecording]).
func (s *Server) Wire() []byte {
	s.wireMu.Lock()
	defer s.wireMu.Unlock()
	return bytes.Clone(s.wire.Bytes())
}

// Server returns the running server.Server (nil while stopped).
func (s *Server) Server() *server.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv
}

// HTTP returns the running httptest.Server (nil while stopped).
func (s *Server) HTTP() *httptest.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.http
}

// Client returns an HTTP client of the server (it trusts the TLS
// certificate; with [H2C] it speaks HTTP/1.1).
func (s *Server) Client() *http.Client { return s.HTTP().Client() }

// Stop takes the address away: watch streams end, open connections are
// cut, and the listener closes. The store stays.
func (s *Server) Stop() {
	s.mu.Lock()
	srv, hs := s.srv, s.http
	s.srv, s.http = nil, nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	hs.CloseClientConnections() // first: open streams are cut, as by a crash
	srv.Close()                 // ends any watch stream before hs.Close waits for it
	hs.Close()
}

// Restart stops the server if it runs, then serves a new server.Server on
// the same address and store, waiting (up to 5 s) for the old socket to
// let go.
func (s *Server) Restart(ctx context.Context) error {
	s.Stop()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		l, err := net.Listen("tcp", s.Addr)
		if err == nil {
			return s.serve(l)
		}
		if err := Sleep(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("listen on %s again: %w", s.Addr, errors.Join(err, ctx.Err()))
		}
	}
}

// Close stops the server and closes the Redis client and the miniredis it
// started.
func (s *Server) Close() {
	s.Stop()
	s.closeRedis()
}

func (s *Server) closeRedis() {
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
	if s.Mini != nil {
		s.Mini.Close()
	}
}

// Sleep waits d or until ctx is done, whichever is first, and returns
// ctx's error in the second case.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
