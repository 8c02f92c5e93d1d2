package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// orDefault returns d, def when d is zero, and 0 (no bound) when d is
// negative.
func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// limitBody gives every request body a read deadline of s.bodyTO from the
// moment the handler starts (the headers are bounded by the http.Server's
// ReadHeaderTimeout). Connect reads the body before it authenticates, so
// without it a client sending one byte a second holds a goroutine and a
// connection for as long as it likes. Once the body is read to its end the
// deadline no longer acts (see deadlineBody): a watch stream then lives as
// long as its caller. A watch stream's writes are bounded by s.streamTO
// each.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.streamTO > 0 && strings.HasSuffix(r.URL.Path, "/WatchConnections") {
			w = &stallGuard{ResponseWriter: w, rc: http.NewResponseController(w), d: s.streamTO}
		}
		if s.bodyTO > 0 && r.Body != nil && r.Body != http.NoBody {
			// One allocation: the body holds its controller (no closures).
			b := &deadlineBody{ReadCloser: r.Body, timeout: s.bodyTO, w: w, h1: r.ProtoMajor == 1}
			b.rc = http.NewResponseController(w)
			if b.rc.SetReadDeadline(time.Now().Add(s.bodyTO)) == nil {
				r.Body = b
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline when the body ends on HTTP/1.1
// (h1), where it is the connection's (its background read would hit it).
// An HTTP/2 stream's deadline acts on that stream's body alone, which has
// ended (closing an ended body does nothing), and the stream's end stops
// it: lifting it there would cost a message to the connection's serve
// loop per request for nothing. On HTTP/1.1 it also marks the answer
// Connection: close when the deadline cut the body off: Connect answers
// before the body is drained, and the connection must not be kept alive
// with the rest unread (an HTTP/2 stream is reset on its own).
type deadlineBody struct {
	io.ReadCloser
	timeout time.Duration
	once    sync.Once
	w       http.ResponseWriter
	rc      *http.ResponseController
	h1      bool
}

func (b *deadlineBody) lift()    { _ = b.rc.SetReadDeadline(time.Time{}) }
func (b *deadlineBody) expired() { b.w.Header().Set("Connection", "close") }

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		if b.h1 {
			b.once.Do(b.lift)
		}
	case errors.Is(err, os.ErrDeadlineExceeded):
		if b.h1 {
			b.once.Do(b.expired)
		}
		// Say what happened, not which sockets it happened on.
		err = fmt.Errorf("request body not received within %s: %w", b.timeout, os.ErrDeadlineExceeded)
	}
	return n, err
}

// stallGuard gives each write and flush of a stream a deadline, lifted
// when it completes: a stream may be idle for any time, but one write may
// not wait on a peer that stopped reading for longer than d.
type stallGuard struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (g *stallGuard) Write(p []byte) (int, error) {
	_ = g.rc.SetWriteDeadline(time.Now().Add(g.d))
	defer func() { _ = g.rc.SetWriteDeadline(time.Time{}) }()
	return g.ResponseWriter.Write(p)
}

func (g *stallGuard) Flush() {
	_ = g.rc.SetWriteDeadline(time.Now().Add(g.d))
	defer func() { _ = g.rc.SetWriteDeadline(time.Time{}) }()
	_ = g.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (g *stallGuard) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// timeoutInterceptor bounds unary RPCs by s.requestTO (a caller's shorter
// deadline still wins). Streams pass through untouched. A caller's deadline
// within the bound (both clients send one with every call, which connect
// already holds the call to) is the bound: the context goes on as it is,
// without a context and a child registration of its own per call.
func (s *Server) timeoutInterceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		if s.requestTO <= 0 {
			return next
		}
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if d, ok := ctx.Deadline(); ok && time.Until(d) <= s.requestTO {
				return next(ctx, req)
			}
			ctx, cancel := context.WithTimeout(ctx, s.requestTO)
			defer cancel()
			return next(ctx, req)
		}
	})
}
