package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/servertest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// bound is far above every timeout these tests configure and far below
// "held forever".
const bound = 5 * time.Second

// timeoutServer serves a store on rdb over plain HTTP/1.1 with the given
// server options, as cmd/cooldownd configures its http.Server.
func timeoutServer(t *testing.T, rdb redis.UniversalClient, o server.Options) *httptest.Server {
	t.Helper()
	ts := servertest.Start(t, servertest.WithRedis(rdb), servertest.WithProtocol(servertest.HTTP1),
		servertest.WithHTTPServer(func(hs *http.Server) { hs.ReadHeaderTimeout = time.Second }),
		servertest.WithServerOptions(func(so *server.Options) {
			o.Store, o.Logger = so.Store, so.Logger
			*so = o
		}))
	return ts.HTTP()
}

// TestSlowBodiesAreCutOff: a client that sends its body a byte at a time
// (before it is even authenticated) loses its connection at the body
// deadline instead of holding a goroutine for as long as it likes.
func TestSlowBodiesAreCutOff(t *testing.T) {
	_, rdb := redistest.Mini(t)
	hs := timeoutServer(t, rdb, server.Options{BodyTimeout: 200 * time.Millisecond})
	before := runtime.NumGoroutine()
	const n = 50
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", hs.Listener.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = io.WriteString(c, "POST /cooldown.v1.CooldownService/Admit HTTP/1.1\r\nHost: x\r\n"+
			"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
		require.NoError(t, err)
		conns[i] = c
	}
	held := runtime.NumGoroutine() - before
	t.Logf("%d slow bodies hold %d goroutines", n, held)
	for i, c := range conns {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(bound)))
		// The server answers (an error) and closes the connection.
		answer, err := io.ReadAll(bufio.NewReader(c))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection %d still open after %s", i, bound)
		}
		assert.Contains(t, string(answer), "deadline_exceeded", "connection %d", i)
		assert.Contains(t, string(answer), "request body not received within 200ms")
	}
	deadline := time.Now().Add(bound)
	for runtime.NumGoroutine() > before+5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("after the body deadline: %d goroutines above the start", runtime.NumGoroutine()-before)
	assert.LessOrEqual(t, runtime.NumGoroutine(), before+5, "the slow clients' goroutines are gone")
}

// TestUnaryRequestTimeout: a unary RPC is bounded even when the caller
// sends no deadline and Redis never answers.
func TestUnaryRequestTimeout(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: servertest.Silent(t), ContextTimeoutEnabled: true, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { _ = rdb.Close() })
	hs := timeoutServer(t, rdb, server.Options{RequestTimeout: 200 * time.Millisecond})
	c := cooldownv1connect.NewCooldownServiceClient(hs.Client(), hs.URL)
	began := time.Now()
	_, err := c.Admit(context.Background(), admitReq(newID()))
	requireCode(t, err, connect.CodeDeadlineExceeded)
	assert.Less(t, time.Since(began), bound)
}

// TestWatchOutlivesTheTimeouts: the body deadline no longer acts once the
// request is read (HTTP/1.1 lifts it; an HTTP/2 stream's acts on the ended
// body alone) and the unary timeout does not apply, so a watch stream
// lives as long as its caller, over HTTP/1.1 and over h2c.
func TestWatchOutlivesTheTimeouts(t *testing.T) {
	t.Parallel()
	o := server.Options{BodyTimeout: 50 * time.Millisecond, RequestTimeout: 50 * time.Millisecond}
	for _, tc := range []struct {
		name  string
		proto servertest.Protocol
	}{{"http1", servertest.HTTP1}, {"h2c", servertest.H2C}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, rdb := redistest.Mini(t)
			ts := servertest.Start(t, servertest.WithRedis(rdb), servertest.WithProtocol(tc.proto),
				servertest.WithHTTPServer(func(hs *http.Server) { hs.ReadHeaderTimeout = time.Second }),
				servertest.WithServerOptions(func(so *server.Options) { so.BodyTimeout, so.RequestTimeout = o.BodyTimeout, o.RequestTimeout }))
			hc := ts.Client()
			if tc.proto == servertest.H2C {
				var p http.Protocols
				p.SetUnencryptedHTTP2(true)
				tr := &http.Transport{Protocols: &p}
				t.Cleanup(tr.CloseIdleConnections)
				hc = &http.Client{Transport: tr}
			}
			c := cooldownv1connect.NewCooldownServiceClient(hc, ts.HTTP().URL)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream, err := c.WatchConnections(ctx, connect.NewRequest(&cooldownv1.WatchConnectionsRequest{}))
			require.NoError(t, err)
			require.True(t, stream.Receive(), "first heartbeat: %v", stream.Err())
			time.Sleep(300 * time.Millisecond) // several times both timeouts
			st, err := store.New(rdb, store.Options{})
			require.NoError(t, err)
			_, err = st.Force(ctx, "default", testIDOf(t, newID()), breaker.ForcedOpen, 0, "ops", "")
			require.NoError(t, err)
			for stream.Receive() {
				if stream.Msg().GetTransition() != nil {
					return
				}
			}
			t.Fatalf("stream ended: %v", stream.Err())
		})
	}
}

func testIDOf(t *testing.T, b []byte) keys.ID {
	t.Helper()
	id, err := keys.IDFromBytes(b)
	require.NoError(t, err)
	return id
}

// smallBuffers accepts connections with a tiny socket send buffer, so a
// peer that stops reading blocks the server's writes after a few KB.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(1024)
	}
	return c, err
}

// TestStalledWatcherIsCutOff: a watcher that stops reading cannot hold its
// handler (and its watch slot) blocked on a full connection: the stream's
// write deadline ends it.
func TestStalledWatcherIsCutOff(t *testing.T) {
	t.Parallel()
	ts := servertest.Start(t, servertest.WithProtocol(servertest.HTTP1),
		servertest.WithListener(func(l net.Listener) net.Listener { return smallBuffers{l} }),
		servertest.WithServerOptions(func(so *server.Options) { so.StreamWriteTimeout = 200 * time.Millisecond }))
	hs, st := ts.HTTP(), ts.Store

	c, err := net.Dial("tcp", hs.Listener.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.(*net.TCPConn).SetReadBuffer(1024))
	msg := []byte("{}")
	env := append([]byte{0, 0, 0, 0, byte(len(msg))}, msg...)
	_, err = fmt.Fprintf(c, "POST /cooldown.v1.CooldownService/WatchConnections HTTP/1.1\r\nHost: x\r\n"+
		"Content-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n%s", len(env), env)
	require.NoError(t, err)
	// The stream is open once the gauge says so; then this peer never reads.
	streams := func() float64 { return scrape(t, hs.URL)["cooldownd_watch_streams{}"] }
	deadline := time.Now().Add(bound)
	for streams() != 1 {
		require.True(t, time.Now().Before(deadline), "the watch stream never opened")
		time.Sleep(10 * time.Millisecond)
	}
	began := time.Now()
	for i := range 100 { // ~50 KB, far more than the socket buffers hold
		_, err := st.Force(context.Background(), keys.DefaultTenant, testIDOf(t, bytes32(i)), breaker.ForcedOpen, 0, "ops", strings.Repeat("r", 250))
		require.NoError(t, err)
	}
	t.Logf("100 overrides in %s", time.Since(began))
	deadline = time.Now().Add(bound)
	for streams() != 0 {
		require.True(t, time.Now().Before(deadline), "a watcher that stopped reading still holds its stream after %s", bound)
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("stream cut off %s after the overrides", time.Since(deadline.Add(-bound)))
}

func bytes32(i int) []byte {
	b := make([]byte, 32)
	b[0], b[1] = byte(i), byte(i>>8)
	return b
}
