package client

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/breaker"
)

// fastPolicy is a policy with sub-second durations, for tests against a
// real server.
func fastPolicy() breaker.Policy {
	p := breaker.DefaultPolicy()
	p.ConsecutiveFailures = 2
	p.FailureRate = 0
	p.OpenBase = 100 * time.Millisecond
	p.OpenMax = time.Second
	p.Jitter = 0
	p.RateLimitCooldown = 200 * time.Millisecond
	return p
}

// restart serves again on the same address.
func (cd *cooldownd) restart(t testing.TB) {
	t.Helper()
	require.NoError(t, cd.Restart(context.Background()))
}

// get reads one connection's state and history through the API.
func (cd *cooldownd) get(t *testing.T, conn Conn) *cooldownv1.GetConnectionResponse {
	t.Helper()
	api := cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, cd.URL)
	resp, err := api.GetConnection(context.Background(), connect.NewRequest(&cooldownv1.GetConnectionRequest{
		Id: conn.ID().Bytes(), HistoryLimit: 50,
	}))
	require.NoError(t, err)
	return resp.Msg
}

// reply is one scripted provider answer.
type reply struct {
	status  int
	headers map[string]string
	body    string
}

// provider is a fake LLM provider that answers from a script, then with
// the last entry (or 200 "ok" when empty), and counts its calls.
type provider struct {
	*httptest.Server
	mu     sync.Mutex
	script []reply
	bodies []string
	hits   atomic.Int64
}

func newProvider(t *testing.T, script ...reply) *provider {
	t.Helper()
	p := &provider{script: script}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.Close)
	return p
}

func (p *provider) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	n := p.hits.Add(1)
	p.mu.Lock()
	p.bodies = append(p.bodies, string(b))
	rep := reply{status: http.StatusOK, body: "ok"}
	if len(p.script) > 0 {
		rep = p.script[min(int(n)-1, len(p.script)-1)]
	}
	p.mu.Unlock()
	for k, v := range rep.headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rep.status)
	_, _ = io.WriteString(w, rep.body)
}

// received returns the request bodies the provider received.
func (p *provider) received() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.bodies...)
}

// get returns a call func for Do that GETs the provider.
func (p *provider) get() func(ctx context.Context) (*http.Response, error) {
	return func(ctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
		if err != nil {
			return nil, err
		}
		return p.Client().Do(req)
	}
}

type logBuffer = syncBuffer

// newLogger returns a debug-level text logger writing to a new buffer.
func newLogger() (*slog.Logger, *logBuffer) {
	b := new(logBuffer)
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// newClient returns a Client for url with a discarding logger, fast
// backoff, and opts.
func newClient(t *testing.T, url string, opts ...Option) *Client {
	t.Helper()
	// A generous admit timeout: most tests are about decisions, and on a
	// loaded machine a call past 250 ms is rightly decided in-process. The
	// tests about timeouts set their own.
	base := []Option{WithLogger(slog.New(slog.DiscardHandler)), WithBackoff(time.Millisecond, 5*time.Millisecond),
		WithAdmitTimeout(10 * time.Second)}
	c, err := New(url, append(base, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// conn derives a Conn for a test key on the provider p.
func conn(t *testing.T, c *Client, endpoint, key, scope string) Conn {
	t.Helper()
	cn, err := c.Connection("openai", endpoint, key, scope, "")
	require.NoError(t, err)
	return cn
}

// response builds a provider response without a network, for synctest.
func response(status int, headers map[string]string, body string) *http.Response {
	h := make(http.Header)
	for k, v := range headers {
		h.Set(k, v)
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(bytes.NewReader([]byte(body)))}
}
