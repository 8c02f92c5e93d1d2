package client

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// h1OnlyServer is an HTTP/1.1-only server written on a raw listener, so
// that it fails the way issue 11 measured, every time: it answers the
// HTTP/2 preface with an HTTP/1.1 error and hangs up without reading the
// rest, and with reset set it closes with SO_LINGER 0, so the client's
// write of its HTTP/2 frames meets a reset or a broken pipe that hides the
// answer. Every HTTP/1.1 request is read whole and answered 401.
func h1OnlyServer(t *testing.T, reset bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { serveH1Only(c.(*net.TCPConn), reset) })
		}
	})
	return "http://" + l.Addr().String()
}

func serveH1Only(c *net.TCPConn, reset bool) {
	defer func() { _ = c.Close() }()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if strings.HasPrefix(line, "PRI * HTTP/2.0") {
			_, _ = io.WriteString(c, "HTTP/1.1 505 HTTP Version Not Supported\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
			if reset {
				_ = c.SetLinger(0)
			}
			return
		}
		n := 0
		for {
			h, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if h == "\r\n" {
				break
			}
			if k, v, ok := strings.Cut(h, ":"); ok && strings.EqualFold(k, "Content-Length") {
				n, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
			return
		}
		body := "no"
		if strings.HasPrefix(line, "HEAD") {
			body = ""
		}
		_, _ = io.WriteString(c, "HTTP/1.1 401 Unauthorized\r\nContent-Type: text/plain\r\nContent-Length: "+
			strconv.Itoa(len("no"))+"\r\n\r\n"+body)
	}
}

// TestHTTP1OnlyRefusalIsNotAnOutage reproduces the flake of TestTokenSent
// deterministically: a 401 from an HTTP/1.1-only server used to reach the
// client as "write: broken pipe" (code canceled) about 1 time in 8, and the
// call was let through in-process. The client now learns the server's
// protocol with a side-effect-free request and sees the 401 every time.
func TestHTTP1OnlyRefusalIsNotAnOutage(t *testing.T) {
	t.Parallel()
	for _, reset := range []bool{true, false} {
		t.Run("reset="+strconv.FormatBool(reset), func(t *testing.T) {
			t.Parallel()
			url := h1OnlyServer(t, reset)
			for range 20 {
				// A generous timeout: under load the discovery round trips may take a
				// while, and a call past the timeout is rightly decided in-process.
				c := newClient(t, url, WithToken("t0ken"), WithAdmitTimeout(10*time.Second))
				_, err := c.Admit(t.Context(), NewConn(ID{1}, "x"))
				require.ErrorIs(t, err, ErrRejected)
				assert.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err))
				_, err = c.Admit(t.Context(), NewConn(ID{1}, "x"))
				require.ErrorIs(t, err, ErrRejected, "and from then on over HTTP/1.1")
				assert.Zero(t, c.Stats().LocalDecisions)
			}
		})
	}
}

// TestH2CServerNotReplayed: against a server that speaks h2c, no request
// is ever sent twice; unary calls go over HTTP/1.1
// (docs/decisions/0052-unary-calls-over-http1.md).
func TestH2CServerNotReplayed(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	var mu sync.Mutex
	protos := map[string]int{}
	cd.SetIntercept(func(_ http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		protos[r.Proto]++
		mu.Unlock()
		return false
	})
	c := newClient(t, cd.URL, WithoutMirror()) // every Admit goes to cooldownd, and no stream
	for range 5 {
		_, err := c.Admit(t.Context(), NewConn(ID{2}, "x"))
		require.NoError(t, err)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string]int{"HTTP/1.1": 5}, protos)
}
