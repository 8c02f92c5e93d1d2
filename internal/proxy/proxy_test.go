package proxy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/client"
	"github.com/cooldownd/cooldownd/internal/logtest"
	"github.com/cooldownd/cooldownd/internal/servertest"
)

// seen is one request as the fake upstream received it.
type seen struct {
	method, path, host, auth, apiKey, model string
	bodySum                                 [32]byte
	bodyLen                                 int
}

// upstream is a fake provider over TLS: it records what it receives and
// answers with handle (nil: a 200 echoing the model).
type upstream struct {
	srv    *httptest.Server
	mu     sync.Mutex
	seen   []seen
	handle func(w http.ResponseWriter, r *http.Request, s seen)
}

func newUpstream(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, s seen)) *upstream {
	t.Helper()
	u := &upstream{handle: handle}
	u.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s := seen{method: r.Method, path: r.URL.RequestURI(), host: r.Host, auth: r.Header.Get("Authorization"),
			apiKey: r.Header.Get("X-Api-Key"), bodySum: sha256.Sum256(b), bodyLen: len(b)}
		var m struct{ Model string }
		_ = json.Unmarshal(b, &m)
		s.model = m.Model
		u.mu.Lock()
		u.seen = append(u.seen, s)
		u.mu.Unlock()
		if u.handle != nil {
			u.handle(w, r, s)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"model":%q}`, s.model)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) requests() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.seen...)
}

// trusting is a transport that trusts the upstreams' test certificates and
// nothing else: TLS is verified, as in production.
func trusting(us ...*upstream) *http.Transport {
	pool := x509.NewCertPool()
	for _, u := range us {
		pool.AddCert(u.srv.Certificate())
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig.RootCAs = pool
	return tr
}

type fixture struct {
	proxy *httptest.Server
	reg   *prometheus.Registry
	log   *logtest.Buffer
}

// start runs a proxy on an in-process cooldownd with routes (prefix to
// URL) and fallbacks.
func start(t *testing.T, cfg Config, routes map[string]string, us ...*upstream) *fixture {
	t.Helper()
	cd := servertest.Start(t)
	cl, err := client.New(cd.URL, client.WithAdmitTimeout(10*time.Second), client.WithBackoff(time.Millisecond, 2*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	for p, u := range routes {
		r, err := ParseRoute(p + "=" + u)
		require.NoError(t, err)
		cfg.Routes = append(cfg.Routes, r)
	}
	f := &fixture{reg: prometheus.NewRegistry(), log: &logtest.Buffer{}}
	cfg.Client, cfg.Transport, cfg.Registerer = cl, trusting(us...), f.reg
	cfg.Logger = slog.New(slog.NewJSONHandler(f.log, nil))
	p, err := New(cfg)
	require.NoError(t, err)
	f.proxy = httptest.NewServer(p)
	t.Cleanup(f.proxy.Close)
	return f
}

// raw sends a request line and headers as written, for requests an HTTP
// client would not send (an absolute URI, a .. segment).
func raw(t *testing.T, addr, req string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	_, err = io.WriteString(c, req)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func TestRouting(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil)
	f := start(t, Config{}, map[string]string{"/openai": up.srv.URL, "/openai/azure": up.srv.URL + "/base/"}, up)
	addr := strings.TrimPrefix(f.proxy.URL, "http://")
	upHost := strings.TrimPrefix(up.srv.URL, "https://")
	for _, tc := range []struct {
		name, req string
		status    int
		path      string // what the upstream saw; "" nothing
	}{
		{"prefix stripped, query kept", "GET /openai/v1/models?limit=2 HTTP/1.1\r\nHost: x\r\n\r\n", 200, "/v1/models?limit=2"},
		{"the prefix alone", "GET /openai HTTP/1.1\r\nHost: x\r\n\r\n", 200, "/"},
		{"the longest prefix wins and joins the upstream's path", "GET /openai/azure/v1/x HTTP/1.1\r\nHost: x\r\n\r\n", 200, "/base/v1/x"},
		{"a prefix matches whole segments only", "GET /openaix/v1 HTTP/1.1\r\nHost: x\r\n\r\n", 404, ""},
		{"no route", "GET /other/v1 HTTP/1.1\r\nHost: x\r\n\r\n", 404, ""},
		{"never routed by Host", "GET /v1/models HTTP/1.1\r\nHost: " + upHost + "\r\n\r\n", 404, ""},
		{"an absolute URI is refused (no open relay)", "GET " + up.srv.URL + "/openai/v1/models HTTP/1.1\r\nHost: " + upHost + "\r\n\r\n", 400, ""},
		{"CONNECT is refused", "CONNECT " + upHost + " HTTP/1.1\r\nHost: " + upHost + "\r\n\r\n", 400, ""},
		{"a .. segment is refused", "GET /openai/../admin HTTP/1.1\r\nHost: x\r\n\r\n", 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(up.requests())
			assert.Equal(t, tc.status, raw(t, addr, tc.req))
			got := up.requests()[before:]
			if tc.path == "" {
				assert.Empty(t, got, "nothing reached the upstream")
				return
			}
			require.Len(t, got, 1)
			assert.Equal(t, tc.path, got[0].path)
			assert.Equal(t, upHost, got[0].host, "the upstream's own Host, not the request's")
		})
	}
}

func TestCredentialAndBodyPassThrough(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil)
	f := start(t, Config{MaxSniff: 1 << 10}, map[string]string{"/openai": up.srv.URL, "/anthropic": up.srv.URL}, up)
	big := append([]byte(`{"model":"gpt-4o","messages":"`), bytes.Repeat([]byte("x"), 3<<20)...)
	big = append(big, `"}`...)
	for _, tc := range []struct {
		name, path, header, value string
		body                      []byte
		model                     string // the model label counted
	}{
		{"bearer, small body", "/openai/v1/chat/completions", "Authorization", "Bearer sk-one", []byte(`{"model":"gpt-4o"}`), "gpt-4o"},
		{"x-api-key", "/anthropic/v1/messages", "X-Api-Key", "sk-ant-two", []byte(`{"model":"claude"}`), "claude"},
		{"a body past the sniff bound streams through, without a model", "/openai/v1/chat/completions", "Authorization", "Bearer sk-three", big, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(up.requests())
			req, err := http.NewRequest(http.MethodPost, f.proxy.URL+tc.path, bytes.NewReader(tc.body))
			require.NoError(t, err)
			req.Header.Set(tc.header, tc.value)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			require.Equal(t, 200, resp.StatusCode)
			got := up.requests()[before:]
			require.Len(t, got, 1)
			assert.Equal(t, sha256.Sum256(tc.body), got[0].bodySum, "the whole body, unchanged")
			assert.Equal(t, len(tc.body), got[0].bodyLen)
			if tc.header == "Authorization" {
				assert.Equal(t, tc.value, got[0].auth, "the credential, untouched")
			} else {
				assert.Equal(t, tc.value, got[0].apiKey, "the credential, untouched")
			}
			assert.Equal(t, 1.0, forwarded(t, f, tc.path, tc.model))
		})
	}
	assert.NotContains(t, f.log.String(), "sk-", "no credential in the proxy's log")
}

func forwarded(t *testing.T, f *fixture, path, model string) float64 {
	t.Helper()
	route := "/" + strings.Split(path, "/")[1]
	mfs, err := f.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["route"] == route && l["model"] == model && l["decision"] == "forwarded" {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no forwarded count for route %s model %q", route, model)
	return 0
}

func TestDenialShapes(t *testing.T) {
	t.Parallel()
	p := &Proxy{cfg: Config{RetryLimit: DefaultRetryLimit}}
	for _, tc := range []struct {
		name     string
		provider string
		reason   client.DenyReason
		wait     time.Duration
		status   int
		typ      string
		retry    string
		after    string
		afterMS  string
	}{
		{"openai cooldown", ProviderOpenAI, client.ReasonCooldown, 1500 * time.Millisecond, 429, "rate_limit_error", "true", "2", "1500"},
		{"openai cooldown past the SDKs' limit", ProviderOpenAI, client.ReasonCooldown, time.Hour, 429, "rate_limit_error", "false", "3600", "3600000"},
		{"openai quota never retries", ProviderOpenAI, client.ReasonQuota, time.Second, 429, "insufficient_quota", "false", "1", "1000"},
		{"openai auth", ProviderOpenAI, client.ReasonAuth, time.Minute, 401, "authentication_error", "false", "60", "60000"},
		{"openai open", ProviderOpenAI, client.ReasonOpen, 10 * time.Second, 503, "service_unavailable_error", "true", "10", "10000"},
		{"openai retry budget", ProviderOpenAI, client.ReasonRetryBudget, 0, 429, "rate_limit_error", "false", "0", "0"},
		{"anthropic cooldown", ProviderAnthropic, client.ReasonCooldown, 2 * time.Second, 429, "rate_limit_error", "true", "2", "2000"},
		{"anthropic overloaded", ProviderAnthropic, client.ReasonOverloaded, 5 * time.Second, 529, "overloaded_error", "true", "5", "5000"},
		{"anthropic probe in flight", ProviderAnthropic, client.ReasonProbeInFlight, 250 * time.Millisecond, 503, "api_error", "true", "1", "250"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := httptest.NewRecorder()
			p.writeDenial(w, tc.provider, &client.DeniedError{Reason: tc.reason, RetryAfter: tc.wait})
			assert.Equal(t, tc.status, w.Code)
			assert.Equal(t, tc.reason.String(), w.Header().Get("cooldownd-reason"))
			assert.Equal(t, tc.retry, w.Header().Get("x-should-retry"))
			assert.Equal(t, tc.after, w.Header().Get("Retry-After"))
			assert.Equal(t, tc.afterMS, w.Header().Get("retry-after-ms"))
			var body struct {
				Type  string
				Error struct{ Type, Message, Code string }
			}
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
			assert.Equal(t, tc.typ, body.Error.Type)
			assert.Contains(t, body.Error.Message, tc.reason.String())
			if tc.provider == ProviderAnthropic {
				assert.Equal(t, "error", body.Type)
			} else {
				assert.Equal(t, "cooldownd_"+tc.reason.String(), body.Error.Code)
			}
		})
	}
}

func TestFallbackRewritesTheModel(t *testing.T) {
	t.Parallel()
	// The primary model is rate limited for an hour; the fallback answers.
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, s seen) {
		if s.model == "big" {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"type":"requests","code":"rate_limit_exceeded","message":"slow down"}}`)
			return
		}
		_, _ = fmt.Fprintf(w, `{"model":%q}`, s.model)
	})
	other := newUpstream(t, nil)
	dir := t.TempDir()
	cred := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(cred, []byte("sk-from-file\n"), 0o600))
	fb := filepath.Join(dir, "fallbacks.yaml")
	require.NoError(t, os.WriteFile(fb, []byte("big:\n  - model: small\n  - model: elsewhere\n    route: /other\n    credential_file: "+cred+"\n"), 0o600))
	routes := []Route{}
	for _, s := range []string{"/openai=" + up.srv.URL, "/other=" + other.srv.URL} {
		r, err := ParseRoute(s)
		require.NoError(t, err)
		routes = append(routes, r)
	}
	fbs, err := LoadFallbacks(fb, routes)
	require.NoError(t, err)
	f := start(t, Config{Fallbacks: fbs}, map[string]string{"/openai": up.srv.URL, "/other": other.srv.URL}, up, other)

	post := func(model string) (*http.Response, string) {
		req, err := http.NewRequest(http.MethodPost, f.proxy.URL+"/openai/v1/chat/completions", strings.NewReader(`{"model":"`+model+`","messages":[]}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer sk-app")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return resp, string(b)
	}
	resp, body := post("big")
	assert.Equal(t, 200, resp.StatusCode)
	assert.JSONEq(t, `{"model":"small"}`, body, "the fallback answered")
	assert.Equal(t, "small", resp.Header.Get("cooldownd-fallback"))
	got := up.requests()
	require.Len(t, got, 2, "the primary once, then the fallback at once")
	assert.Equal(t, []string{"big", "small"}, []string{got[0].model, got[1].model})
	assert.Equal(t, "Bearer sk-app", got[1].auth, "same upstream, same key")

	// Now the primary is denied without a call; the fallback goes at once.
	resp, body = post("big")
	assert.Equal(t, 200, resp.StatusCode)
	assert.JSONEq(t, `{"model":"small"}`, body)
	got = up.requests()
	require.Len(t, got, 3)
	assert.Equal(t, "small", got[2].model, "the primary, cooling down, was not called")

	// A fallback on another route takes its credential from the file.
	up.handle = func(w http.ResponseWriter, _ *http.Request, _ seen) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusTooManyRequests)
	}
	resp, body = post("big") // small is now rate limited too
	assert.Equal(t, 200, resp.StatusCode)
	assert.JSONEq(t, `{"model":"elsewhere"}`, body)
	o := other.requests()
	require.Len(t, o, 1)
	assert.Equal(t, "Bearer sk-from-file", o[0].auth, "the file's credential, not the request's")
	assert.NotContains(t, f.log.String(), "sk-")
}

func TestStreamPassesThroughAsItArrives(t *testing.T) {
	t.Parallel()
	second := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ seen) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select { // the second chunk only once the first went through
		case <-second:
		case <-time.After(10 * time.Second):
			_, _ = io.WriteString(w, "data: TIMEOUT\n\n")
			return
		}
		_, _ = io.WriteString(w, "data: two\n\ndata: [DONE]\n\n")
	})
	f := start(t, Config{}, map[string]string{"/openai": up.srv.URL}, up)
	req, err := http.NewRequest(http.MethodPost, f.proxy.URL+"/openai/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "data: one\n", line, "the first chunk arrived before the upstream sent the second")
	close(second)
	rest, err := io.ReadAll(br)
	require.NoError(t, err)
	assert.Equal(t, "\ndata: two\n\ndata: [DONE]\n\n", string(rest))
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"/openai", "openai=https://x", "/=https://x", "/a/=https://x", "/healthz=https://x",
		"/a=ftp://x", "/a=https://user:pw@x", "/a=https://x?q=1", "/a/../b=https://x"} {
		_, err := ParseRoute(s)
		assert.Error(t, err, s)
	}
	r, err := ParseRoute("/claude=https://api.anthropic.com/")
	require.NoError(t, err)
	assert.Equal(t, ProviderAnthropic, r.Provider)
	assert.Equal(t, (&url.URL{Scheme: "https", Host: "api.anthropic.com"}).String(), r.Upstream.String())
	dir := t.TempDir()
	for name, body := range map[string]string{
		"bad model":    "a:\n  - model: 'has space'\n",
		"no route":     "a:\n  - model: b\n    route: /nowhere\n",
		"bad header":   "a:\n  - model: b\n    header: cookie\n",
		"missing file": "a:\n  - model: b\n    credential_file: /nonexistent/key\n",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		_, err := LoadFallbacks(p, []Route{r})
		assert.Error(t, err, name)
	}
}

func TestErrorsWithoutAnAnswer(t *testing.T) {
	t.Parallel()
	p := &Proxy{cfg: Config{RetryLimit: DefaultRetryLimit}, log: slog.New(slog.DiscardHandler)}
	var err error
	p.metrics, err = newMetrics(nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"cooldownd refused the proxy", &client.RejectedError{Op: "admit", Code: connect.CodeUnauthenticated, Err: errors.New("bad token")}, 503, "cooldownd_rejected"},
		{"the upstream did not answer", &client.Error{ErrorCode: "conn_refused", Err: errors.New("dial")}, 502, "conn_refused"},
		{"a denial", &client.DeniedError{Reason: client.ReasonOpen, RetryAfter: time.Second}, 503, "cooldownd_open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := httptest.NewRecorder()
			p.answerError(w, httptest.NewRequest(http.MethodPost, "/openai/v1/x", nil), tc.err)
			assert.Equal(t, tc.status, w.Code)
			var body struct{ Error struct{ Code string } }
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
			assert.Equal(t, tc.code, body.Error.Code)
		})
	}
}
