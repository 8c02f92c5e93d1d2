package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/client"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/store"
)

// cooldownd starts a real cooldownd (no auth, loopback) over miniredis.
func cooldownd(t *testing.T) string {
	t.Helper()
	_, rdb := redistest.Mini(t)
	st, err := store.New(rdb, store.Options{})
	require.NoError(t, err)
	srv, err := server.New(server.Options{Store: st, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		_ = hs.Close()
	})
	return "http://" + ln.Addr().String()
}

// provider is a fake LLM API: it answers each request with the next of its
// scripted responses (the last one repeats) and counts the calls.
type provider struct {
	mu      sync.Mutex
	answers []answer
	calls   int
}

type answer struct {
	status int
	body   string
	header map[string]string
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	p.mu.Lock()
	a := p.answers[min(p.calls, len(p.answers)-1)]
	p.calls++
	p.mu.Unlock()
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.body)
}

func (p *provider) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

const (
	gptOK = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-5.5",
	  "choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"Hello from GPT, five words."}}]}`
	gptNoQuota = `{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`
	claudeOK   = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-5-5",
	  "content":[{"type":"text","text":"Hello from Claude, five words."}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":7}}`
)

func testConfig(t *testing.T, oa, an *provider) config {
	t.Helper()
	oaSrv := httptest.NewServer(oa)
	t.Cleanup(oaSrv.Close)
	anSrv := httptest.NewServer(an)
	t.Cleanup(anSrv.Close)
	return config{cooldownd: cooldownd(t), openaiURL: oaSrv.URL + "/v1", openaiKey: "sk-test-openai-key-0000000000000000",
		anthropicURL: anSrv.URL, anthropicKey: "sk-ant-test-key-000000000000000000"}
}

// TestFallbackReturnsTheBody: gpt-5.5 is out of quota, so DoFallback moves on
// to Claude at once and returns Claude's text; the next call skips gpt-5.5
// without calling it (cooldownd blocks the exhausted quota for everyone).
func TestFallbackReturnsTheBody(t *testing.T) {
	t.Parallel()
	oa := &provider{answers: []answer{{status: 429, body: gptNoQuota}}}
	an := &provider{answers: []answer{{status: 200, body: claudeOK}}}
	m, err := newModels(testConfig(t, oa, an))
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.cl.Close() })
	ctx := t.Context()

	text, from, err := m.ask(ctx, "Say hello in five words.")
	require.NoError(t, err)
	assert.Equal(t, "Hello from Claude, five words.", text)
	assert.Equal(t, "anthropic claude-sonnet-5-5", from.Label())
	assert.Equal(t, 1, oa.count(), "the exhausted quota is not retried")
	assert.Equal(t, 1, an.count())

	text, _, err = m.ask(ctx, "Again.")
	require.NoError(t, err)
	assert.Equal(t, "Hello from Claude, five words.", text)
	assert.Equal(t, 1, oa.count(), "gpt-5.5 is skipped while its quota is blocked")
	assert.Equal(t, 2, an.count())
}

// TestFallbackPrimaryAnswers: a healthy primary answers, with its text.
func TestFallbackPrimaryAnswers(t *testing.T) {
	t.Parallel()
	oa := &provider{answers: []answer{{status: 200, body: gptOK}}}
	an := &provider{answers: []answer{{status: 200, body: claudeOK}}}
	m, err := newModels(testConfig(t, oa, an))
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.cl.Close() })
	text, from, err := m.ask(t.Context(), "Say hello in five words.")
	require.NoError(t, err)
	assert.Equal(t, "Hello from GPT, five words.", text)
	assert.Equal(t, "openai gpt-5.5", from.Label())
	assert.Equal(t, 0, an.count())
}

// TestGuardedSDK: the guarded openai-go client is retried by the guard (not
// by the SDK) after a 503, and a rate limit with Retry-After makes the next
// call a denial that the SDK does not send.
func TestGuardedSDK(t *testing.T) {
	t.Parallel()
	oa := &provider{answers: []answer{{status: 503, body: `{"error":{"message":"busy","type":"server_error"}}`}, {status: 200, body: gptOK},
		{status: 429, body: `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`, header: map[string]string{"Retry-After": "600"}}}}
	an := &provider{answers: []answer{{status: 200, body: claudeOK}}}
	c := testConfig(t, oa, an)
	m, err := newModels(c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.cl.Close() })
	ctx := t.Context()

	text, err := m.askGPT(ctx, "hi")
	require.NoError(t, err)
	assert.Equal(t, "Hello from GPT, five words.", text)
	assert.Equal(t, 2, oa.count(), "one retry, by the guard")

	_, err = m.askGPT(ctx, "hi")
	require.Error(t, err, "the 429 comes back as the SDK's error")
	calls := oa.count()
	_, err = m.askGPT(ctx, "hi")
	var denied *client.DeniedError
	require.True(t, errors.As(err, &denied), "denied by cooldownd, not sent: %v", err)
	assert.Equal(t, calls, oa.count())
}

// TestRun runs the program as its users do, through its environment.
func TestRun(t *testing.T) {
	t.Parallel()
	oa := &provider{answers: []answer{{status: 200, body: gptOK}}}
	an := &provider{answers: []answer{{status: 200, body: claudeOK}}}
	c := testConfig(t, oa, an)
	env := map[string]string{"COOLDOWND_URL": c.cooldownd, "OPENAI_BASE_URL": c.openaiURL, "OPENAI_API_KEY": c.openaiKey,
		"ANTHROPIC_BASE_URL": c.anthropicURL, "ANTHROPIC_API_KEY": c.anthropicKey}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.NoError(t, run(ctx, []string{"Say", "hello"}, func(k string) string { return env[k] }, &out))
	assert.Equal(t, "openai gpt-5.5: Hello from GPT, five words.\n", out.String())

	err := run(ctx, nil, func(string) string { return "" }, &out)
	require.ErrorContains(t, err, "set OPENAI_API_KEY and ANTHROPIC_API_KEY")
}

// TestREADMEQuotesTheExample: the README's SDK snippets are this program's
// code, word for word (between its README:start and README:end marks).
func TestREADMEQuotesTheExample(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	blocks := 0
	for _, part := range strings.Split(string(src), "// README:start ")[1:] {
		name, rest, _ := strings.Cut(part, "\n")
		body, _, ok := strings.Cut(rest, "// README:end")
		require.True(t, ok, "README block %s has no end", name)
		assert.Contains(t, string(readme), dedent(body), "README.md does not quote the %q block of examples/sdk/main.go", name)
		blocks++
	}
	assert.Equal(t, 3, blocks)
}

// dedent removes the common leading tabs of a block and its trailing
// indentation.
func dedent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\t\n"), "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, "\t"))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range lines {
		if len(l) >= indent {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// TestFallbackAttemptsAcrossCandidates holds the README's count: one retry
// budget (2 by default) for all candidates, plus one call for each
// candidate moved on from, all counted in the error's Attempts.
func TestFallbackAttemptsAcrossCandidates(t *testing.T) {
	t.Parallel()
	busy := answer{status: 503, body: `{"error":{"message":"busy","type":"server_error"}}`}
	oa := &provider{answers: []answer{busy}}
	an := &provider{answers: []answer{{status: 503, body: `{"type":"error","error":{"type":"api_error","message":"busy"}}`}}}
	m, err := newModels(testConfig(t, oa, an))
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.cl.Close() })
	_, _, err = m.ask(t.Context(), "hi")
	var ce *client.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.Equal(t, 3, oa.count(), "gpt-5.5: the first call and both retries")
	assert.Equal(t, 1, an.count(), "claude: one call once the budget is spent")
	assert.Equal(t, 4, ce.Attempts)
	assert.Equal(t, "anthropic claude-sonnet-5-5", ce.Conn.Label())
}
