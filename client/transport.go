package client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// newHTTPClient returns the default HTTP client for cooldownd. For https it
// speaks HTTP/2 over TLS (ALPN, with HTTP/1.1 fallback). For http it sends
// unary calls (Admit, Report, ...) over HTTP/1.1 with keep-alive, from a
// pool of up to [unaryConnsPerHost] connections, and streams (the mirror's
// WatchConnections) over h2c with prior knowledge, falling back to
// HTTP/1.1 when the server turns out to speak only that: a unary call over
// HTTP/1.1 costs cooldownd about a third less CPU than over h2c
// (docs/decisions/0052-unary-calls-over-http1.md). Per-call deadlines come
// from contexts (see [WithAdmitTimeout]), so the client itself has no
// overall timeout. Proxies from the environment apply to https only: h2c
// cannot pass through an HTTP proxy, and the unary pool keeps to the same
// route as the stream.
func newHTTPClient(scheme string) *http.Client {
	base := func(p *http.Protocols) *http.Transport {
		t := &http.Transport{
			DialContext: (&net.Dialer{
				Timeout:   5 * time.Second,
				KeepAlive: 30 * time.Second,
			}).DialContext,
			Protocols:             p,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          unaryConnsPerHost,
			MaxIdleConnsPerHost:   unaryConnsPerHost,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   5 * time.Second,
			ExpectContinueTimeout: time.Second,
			// Ping an idle HTTP/2 connection so that a dead peer is noticed
			// before a call waits on it.
			HTTP2: &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: 5 * time.Second},
		}
		if scheme == "https" {
			t.Proxy = http.ProxyFromEnvironment
		}
		return t
	}
	if scheme == "https" {
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetHTTP2(true)
		return &http.Client{Transport: base(&p)}
	}
	var h2c, h1 http.Protocols
	h2c.SetUnencryptedHTTP2(true) // without HTTP1: prior knowledge
	h1.SetHTTP1(true)
	unary := base(&h1)
	// A burst of more calls than this waits for a connection of the pool
	// (within its admit timeout) instead of opening one per call.
	unary.MaxConnsPerHost = unaryConnsPerHost
	return &http.Client{Transport: &splitTransport{unary: unary, stream: &h2cFallback{h2c: base(&h2c), h1: base(&h1)}}}
}

// unaryConnsPerHost bounds the HTTP/1.1 connections one endpoint's unary
// pool keeps open (and idle): one per call in flight, so a process with
// up to 64 concurrent calls per endpoint never waits for a connection.
const unaryConnsPerHost = 64

// splitTransport sends streaming calls to stream and everything else (the
// unary calls) to unary.
type splitTransport struct {
	unary  *http.Transport
	stream http.RoundTripper
}

// RoundTrip implements [http.RoundTripper].
func (t *splitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if isStreaming(req) {
		return t.stream.RoundTrip(req)
	}
	return t.unary.RoundTrip(req)
}

// CloseIdleConnections closes both transports' idle connections.
func (t *splitTransport) CloseIdleConnections() {
	t.unary.CloseIdleConnections()
	if c, ok := t.stream.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// isStreaming reports whether req is a streaming RPC: the Connect
// protocol's streams are application/connect+<codec>; gRPC and gRPC-Web
// (every call a stream on the wire) are application/grpc…. A Connect
// unary call is application/<codec> (or a GET).
func isStreaming(req *http.Request) bool {
	ct := req.Header.Get("Content-Type")
	return strings.HasPrefix(ct, "application/connect+") || strings.HasPrefix(ct, "application/grpc")
}

// The protocols an h2cFallback may have settled on.
const (
	protoUnknown int32 = iota
	protoH2C
	protoH1
)

// h2cFallback sends over h2c with prior knowledge, and over HTTP/1.1 once
// it has learnt that the server speaks only that.
//
// An HTTP/1.1-only server answers the HTTP/2 preface with an HTTP/1.1
// error and hangs up, usually with the rest of the preface unread, so the
// client sees either that answer ("… looked like an HTTP/1.1 header") or,
// as often, a reset or broken pipe that hides it. A reset is also what a
// restarting h2c server causes, after it may have read the request, so the
// error alone cannot tell the two apart and must not replay the request.
// Instead the first such failure, before h2c has ever worked, asks the
// server with a request that has no side effects (HEAD /) over h2c and then
// over HTTP/1.1: any HTTP answer settles the protocol. Only when the server
// turns out to speak HTTP/1.1 alone — so it never read the failed request's
// HTTP/2 frames as a request — is that request sent again over HTTP/1.1.
type h2cFallback struct {
	h2c, h1 *http.Transport
	proto   atomic.Int32
	learn   sync.Mutex // one discovery at a time
}

// RoundTrip implements [http.RoundTripper].
func (t *h2cFallback) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.proto.Load() == protoH1 {
		return t.h1.RoundTrip(req)
	}
	resp, err := t.h2c.RoundTrip(req)
	if err == nil {
		t.proto.CompareAndSwap(protoUnknown, protoH2C)
		return resp, nil
	}
	if t.proto.Load() == protoH2C || !mayBeH1Only(err) || req.Context().Err() != nil {
		return nil, err
	}
	if !t.speaksOnlyH1(req.Context(), req.URL.Scheme, req.URL.Host) {
		return nil, err
	}
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return nil, err
		}
		body, gerr := req.GetBody()
		if gerr != nil {
			return nil, err
		}
		req = req.Clone(req.Context())
		req.Body = body
	}
	return t.h1.RoundTrip(req)
}

// speaksOnlyH1 learns, with side-effect-free requests, whether the server
// speaks h2c (false) or only HTTP/1.1 (true), and remembers it. When
// neither answers it returns false and learns nothing.
func (t *h2cFallback) speaksOnlyH1(ctx context.Context, scheme, host string) bool {
	t.learn.Lock()
	defer t.learn.Unlock()
	if p := t.proto.Load(); p != protoUnknown {
		return p == protoH1
	}
	ask := func(rt *http.Transport) (answered bool, err error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, scheme+"://"+host+"/", nil)
		if err != nil {
			return false, err
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return false, err
		}
		_ = resp.Body.Close()
		return true, nil
	}
	// Twice over h2c: an h2c server that reset one connection while
	// restarting answers the next; an HTTP/1.1-only server never does.
	for range 2 {
		ok, err := ask(t.h2c)
		if ok {
			t.proto.Store(protoH2C)
			return false
		}
		if !mayBeH1Only(err) {
			return false
		}
	}
	if ok, _ := ask(t.h1); ok {
		t.proto.Store(protoH1)
		return true
	}
	return false
}

// CloseIdleConnections closes both transports' idle connections.
func (t *h2cFallback) CloseIdleConnections() {
	t.h2c.CloseIdleConnections()
	t.h1.CloseIdleConnections()
}

// mayBeH1Only reports whether an h2c error is one an HTTP/1.1-only server
// causes: the HTTP/2 client read an HTTP/1.1 answer, the connection failed
// before the settings exchange or was closed under the request, or the
// server hung up on the preface (a reset, broken pipe or early EOF). The
// standard library exposes no types for the HTTP/2 ones, only messages.
func mayBeH1Only(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "looked like an HTTP/1.1 header") ||
		strings.Contains(msg, "client conn could not be established") ||
		strings.Contains(msg, "client conn is closed") ||
		strings.Contains(msg, "client connection lost") ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
