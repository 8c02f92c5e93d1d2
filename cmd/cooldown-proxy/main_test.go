package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/logtest"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/servertest"
)

// keyCanary is the application's provider key: it reaches the upstream and
// nothing else.
const keyCanary = "sk-CANARYproxy0123456789abcdefDEADBEEF"

var buildOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "cooldown-proxy-test-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "cooldown-proxy")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build: %w\n%s", err, out)
	}
	return bin, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if bin, err := buildOnce(); err == nil {
		_ = os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

// proc is one running proxy process.
type proc struct {
	cmd  *exec.Cmd
	url  string
	log  *logtest.Buffer
	done chan error
}

// startProxy runs the proxy binary with args (on a free loopback port,
// JSON logs) and waits for its listening line.
func startProxy(t *testing.T, args ...string) *proc {
	t.Helper()
	bin, err := buildOnce()
	require.NoError(t, err)
	p := &proc{log: &logtest.Buffer{}, done: make(chan error, 1)}
	// A generous admit timeout: on a loaded machine a 250 ms Admit would be
	// decided in-process, and the second proxy would not see the first's
	// cooldown.
	p.cmd = exec.Command(bin, append([]string{"--listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug", "--admit-timeout", "10s"}, args...)...)
	p.cmd.Stderr, p.cmd.Stdout = p.log, p.log
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	require.NoError(t, p.cmd.Start())
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		p.done <- nil
		if strings.Contains(p.log.String(), "panic") {
			t.Errorf("the proxy panicked:\n%s", p.log.String())
		}
	})
	p.url = "http://" + waitLog(t, p, "cooldown-proxy listening")["addr"].(string)
	return p
}

// waitLog waits (bounded) for a log record with msg and returns it.
func waitLog(t *testing.T, p *proc, msg string) map[string]any {
	t.Helper()
	for range 2000 {
		for line := range strings.SplitSeq(p.log.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
				return rec
			}
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("the proxy exited (%v):\n%s", err, p.log.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("no %q in the proxy's log:\n%s", msg, p.log.String())
	return nil
}

// fakeOpenAI answers by model: "limited" and "big" are rate limited for an
// hour, "stream" streams two chunks with a handshake between them, others
// succeed echoing the model.
type fakeOpenAI struct {
	srv     *httptest.Server
	mu      sync.Mutex
	models  []string
	auths   []string
	release chan struct{} // closed: the stream's second chunk may go
	chunk1  atomic.Int32
}

func newFake(t *testing.T) *fakeOpenAI {
	f := &fakeOpenAI{release: make(chan struct{})}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Model string `json:"model"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.mu.Lock()
		f.models = append(f.models, body.Model)
		f.auths = append(f.auths, r.Header.Get("Authorization")+r.Header.Get("X-Api-Key"))
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch body.Model {
		case "limited", "big":
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"message":"Rate limit reached for `+keyCanary+`","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
		case "stream":
			w.Header().Set("Content-Type", "text/event-stream")
			chunk := func(s string) string {
				return `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"stream","choices":[{"index":0,"delta":{"content":"` + s + `"}}]}` + "\n\n"
			}
			_, _ = io.WriteString(w, chunk("one"))
			w.(http.Flusher).Flush()
			f.chunk1.Add(1)
			select {
			case <-f.release:
			case <-r.Context().Done():
				return
			}
			_, _ = io.WriteString(w, chunk("two")+"data: [DONE]\n\n")
		default:
			_, _ = fmt.Fprintf(w, `{"id":"x","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`, body.Model)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeOpenAI) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.models...)
}

func (f *fakeOpenAI) caFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw}), 0o600))
	return p
}

func sdk(base string) openai.Client {
	return openai.NewClient(option.WithBaseURL(base+"/openai/v1/"), option.WithAPIKey(keyCanary), option.WithMaxRetries(0))
}

func chat(model string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}}
}

// TestProxyWithRealClients runs two proxy processes on one cooldownd (real
// Redis) in front of a fake OpenAI over verified TLS, and drives them with
// openai-go and curl.
func TestProxyWithRealClients(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	var cdLog logtest.Buffer
	cd := servertest.Start(t, servertest.WithRedis(rdb), servertest.WithServerOptions(func(o *server.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&cdLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}))
	up := newFake(t)
	fb := filepath.Join(t.TempDir(), "fallbacks.yaml")
	require.NoError(t, os.WriteFile(fb, []byte("big:\n  - model: small\n"), 0o600))
	args := []string{"--cooldownd", cd.URL, "--route", "/openai=" + up.srv.URL, "--route", "/anthropic=" + up.srv.URL,
		"--ca-file", up.caFile(t), "--fallback-file", fb}
	a := startProxy(t, append(args, "--mirror=false")...)
	b := startProxy(t, args...) // the mirror on: the default
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("a 429 seen by one proxy is denied by the other without reaching the upstream", func(t *testing.T) {
		ca, cb := sdk(a.url), sdk(b.url)
		_, err := ca.Chat.Completions.New(ctx, chat("limited"))
		var apiErr *openai.Error
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, 429, apiErr.StatusCode)
		assert.Equal(t, "rate_limit_exceeded", apiErr.Code, "the upstream's own answer")
		require.Equal(t, []string{"limited"}, up.seen())

		_, err = cb.Chat.Completions.New(ctx, chat("limited"))
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, 429, apiErr.StatusCode)
		assert.Equal(t, "cooldownd_cooldown", apiErr.Code)
		assert.Contains(t, apiErr.Message, "cooldown")
		h := apiErr.Response.Header
		assert.Equal(t, "cooldown", h.Get("cooldownd-reason"))
		assert.Equal(t, "false", h.Get("x-should-retry"), "an hour is past the SDKs' retry limit")
		after, err := strconv.Atoi(h.Get("Retry-After"))
		require.NoError(t, err)
		assert.InDelta(t, 3600, after, 60)
		ms, err := strconv.Atoi(h.Get("retry-after-ms"))
		require.NoError(t, err)
		assert.InDelta(t, 3600_000, ms, 60_000)
		assert.Equal(t, []string{"limited"}, up.seen(), "the second proxy did not reach the upstream")

		// The cooldown is the model's: another model on the same key goes.
		resp, err := cb.Chat.Completions.New(ctx, chat("gpt-4o"))
		require.NoError(t, err)
		assert.Equal(t, "gpt-4o", resp.Model)
	})

	t.Run("a stream arrives chunk by chunk", func(t *testing.T) {
		cl := sdk(b.url)
		s := cl.Chat.Completions.NewStreaming(ctx, chat("stream"))
		require.True(t, s.Next(), "first chunk: %v", s.Err())
		assert.Equal(t, "one", s.Current().Choices[0].Delta.Content)
		// The upstream holds the second chunk until the first was read here.
		close(up.release)
		require.True(t, s.Next(), "second chunk: %v", s.Err())
		assert.Equal(t, "two", s.Current().Choices[0].Delta.Content)
		assert.False(t, s.Next())
		assert.NoError(t, s.Err())
		assert.Equal(t, int32(1), up.chunk1.Load(), "the stream was not replayed")
	})

	t.Run("a fallback rewrites the model", func(t *testing.T) {
		before := len(up.seen())
		cl := sdk(a.url)
		resp, err := cl.Chat.Completions.New(ctx, chat("big"))
		require.NoError(t, err)
		assert.Equal(t, "small", resp.Model)
		assert.Equal(t, []string{"big", "small"}, up.seen()[before:])
	})

	t.Run("curl", func(t *testing.T) {
		if _, err := exec.LookPath("curl"); err != nil {
			t.Fatal("curl is required (.ci/run installs it)")
		}
		curl := func(args ...string) (string, string) {
			out, err := exec.CommandContext(ctx, "curl", append([]string{"-sS", "-w", "\n%{http_code}"}, args...)...).Output()
			require.NoError(t, err, "%s", out)
			s := strings.TrimSpace(string(out))
			i := strings.LastIndexByte(s, '\n')
			return s[:i], s[i+1:]
		}
		body, code := curl("-H", "Authorization: Bearer "+keyCanary, "-H", "Content-Type: application/json",
			"-d", `{"model":"gpt-4o","messages":[]}`, a.url+"/openai/v1/chat/completions")
		assert.Equal(t, "200", code)
		assert.Contains(t, body, `"model":"gpt-4o"`)

		// Anthropic's shape on an anthropic route.
		msg := []string{"-H", "x-api-key: " + keyCanary, "-H", "anthropic-version: 2023-06-01", "-d", `{"model":"limited","max_tokens":1,"messages":[]}`}
		_, code = curl(append(msg, a.url+"/anthropic/v1/messages")...)
		assert.Equal(t, "429", code, "the upstream's own 429")
		body, code = curl(append(msg, b.url+"/anthropic/v1/messages")...)
		assert.Equal(t, "429", code)
		var e struct {
			Type  string
			Error struct{ Type, Message string }
		}
		require.NoError(t, json.Unmarshal([]byte(body), &e), body)
		assert.Equal(t, "error", e.Type)
		assert.Equal(t, "rate_limit_error", e.Error.Type)
		assert.Contains(t, e.Error.Message, "cooldown")

		// Used as a forward proxy, it refuses: no open relay.
		before := len(up.seen())
		_, code = curl("-x", a.url, "-d", `{"model":"gpt-4o"}`, "http://example.invalid/openai/v1/chat/completions")
		assert.Equal(t, "400", code)
		assert.Len(t, up.seen(), before)
	})

	t.Run("the key reaches the upstream and nothing else", func(t *testing.T) {
		up.mu.Lock()
		assert.Contains(t, up.auths, "Bearer "+keyCanary, "passed through untouched")
		up.mu.Unlock()
		var places []string
		places = append(places, "cooldownd's log\n"+cdLog.String(), "proxy a's log\n"+a.log.String(), "proxy b's log\n"+b.log.String())
		for _, p := range []*proc{a, b} {
			resp, err := http.Get(p.url + "/metrics")
			require.NoError(t, err)
			m, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			require.Contains(t, string(m), "cooldown_proxy_requests_total")
			places = append(places, "metrics\n"+string(m))
		}
		places = append(places, "redis\n"+redisDump(ctx, t, rdb))
		for _, place := range places {
			for _, form := range []string{keyCanary, hex.EncodeToString([]byte(keyCanary)), base64.StdEncoding.EncodeToString([]byte(keyCanary)), base64.RawURLEncoding.EncodeToString([]byte(keyCanary))} {
				assert.NotContains(t, place, form, strings.SplitN(place, "\n", 2)[0])
			}
		}
	})
}

// redisDump is every key of rdb and its value, as text.
func redisDump(ctx context.Context, t *testing.T, rdb *redis.Client) string {
	t.Helper()
	var out bytes.Buffer
	keys, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys, "cooldownd wrote its state")
	for _, k := range keys {
		typ := rdb.Type(ctx, k).Val()
		var v any
		switch typ {
		case "string":
			v = rdb.Get(ctx, k).Val()
		case "hash":
			v = rdb.HGetAll(ctx, k).Val()
		case "set":
			v = rdb.SMembers(ctx, k).Val()
		case "zset":
			v = rdb.ZRangeWithScores(ctx, k, 0, -1).Val()
		case "list":
			v = rdb.LRange(ctx, k, 0, -1).Val()
		case "stream":
			v = rdb.XRange(ctx, k, "-", "+").Val()
		}
		fmt.Fprintf(&out, "%s %s %v\n", k, typ, v)
	}
	return out.String()
}

// TestShutdownFinishesStreams: SIGTERM lets a stream in flight finish.
func TestShutdownFinishesStreams(t *testing.T) {
	t.Parallel()
	cd := servertest.Start(t)
	up := newFake(t)
	p := startProxy(t, "--cooldownd", cd.URL, "--route", "/openai="+up.srv.URL, "--ca-file", up.caFile(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := sdk(p.url)
	s := cl.Chat.Completions.NewStreaming(ctx, chat("stream"))
	require.True(t, s.Next(), "%v", s.Err())
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	waitLog(t, p, "shutting down: finishing in-flight requests")
	close(up.release)
	require.True(t, s.Next(), "the stream goes on after SIGTERM: %v", s.Err())
	assert.Equal(t, "two", s.Current().Choices[0].Delta.Content)
	assert.False(t, s.Next())
	assert.NoError(t, s.Err())
	select {
	case err := <-p.done:
		p.done <- err
		assert.NoError(t, err, "exit status")
	case <-ctx.Done():
		t.Fatal("the proxy did not exit")
	}
	waitLog(t, p, "stopped")
}

func TestParse(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "proxy.yaml")
	require.NoError(t, os.WriteFile(file, []byte("listen: 127.0.0.1:9000\nmirror: false\nroute:\n  - /openai=https://api.openai.com\n  - /anthropic=https://api.anthropic.com\nlog-format: json\n"), 0o600))
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want func(t *testing.T, c config)
		err  string
	}{
		{name: "defaults", want: func(t *testing.T, c config) {
			assert.Equal(t, "127.0.0.1:8081", c.listen, "loopback by default")
			assert.True(t, c.mirror, "the mirror on, as the client's default")
		}},
		{name: "env", env: []string{"COOLDOWN_PROXY_LISTEN=127.0.0.1:7000", "COOLDOWN_PROXY_ROUTE=/a=https://a,/b=https://b", "COOLDOWN_PROXY_MIRROR=false"},
			want: func(t *testing.T, c config) {
				assert.Equal(t, "127.0.0.1:7000", c.listen)
				assert.Equal(t, routes{"/a=https://a", "/b=https://b"}, c.routes)
				assert.False(t, c.mirror)
			}},
		{name: "a flag beats the variable", args: []string{"--listen", "127.0.0.1:1"}, env: []string{"COOLDOWN_PROXY_LISTEN=127.0.0.1:2"},
			want: func(t *testing.T, c config) { assert.Equal(t, "127.0.0.1:1", c.listen) }},
		{name: "the file, under the variable", args: []string{"--config", file}, env: []string{"COOLDOWN_PROXY_LISTEN=127.0.0.1:2"},
			want: func(t *testing.T, c config) {
				assert.Equal(t, "127.0.0.1:2", c.listen)
				assert.False(t, c.mirror)
				assert.Equal(t, "json", c.logFormat)
				assert.Equal(t, routes{"/openai=https://api.openai.com", "/anthropic=https://api.anthropic.com"}, c.routes)
			}},
		{name: "arguments", args: []string{"x"}, err: "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := parse(tc.args, tc.env, io.Discard)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			tc.want(t, c)
		})
	}
}

func TestRunRefuses(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"--version"}, nil, &out, io.Discard))
	assert.True(t, strings.HasPrefix(out.String(), "cooldown-proxy "), out.String())
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{nil, "no --route"},
		{[]string{"--route", "/a=ftp://x"}, "absolute http(s) URL"},
		{[]string{"--route", "/a=https://x", "--log-format", "xml"}, "--log-format"},
		{[]string{"--route", "/a=https://x", "--ca-file", "/nonexistent"}, "--ca-file"},
	} {
		err := run(context.Background(), tc.args, nil, io.Discard, io.Discard)
		assert.ErrorContains(t, err, tc.err)
		assert.False(t, errors.Is(err, context.Canceled))
	}
}
