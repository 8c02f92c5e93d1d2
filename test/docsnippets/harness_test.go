package docsnippets

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/client"
	"github.com/cooldownd/cooldownd/internal/servertest"
)

// env is what a wrapped snippet sees (tools/docsnippets/wrappers.go names
// its fields): an in-process cooldownd on an embedded Redis with fast
// policies, three fake providers, and a client with one connection to each.
type env struct {
	ctx        context.Context
	cooldownd  string // the address "http://cooldownd:8080" stands for
	apiKey     string
	salt       []byte
	body       []byte // the request body the snippets send
	url        string // the chat completions URL of provider 0
	httpClient *http.Client
	cl         *client.Client // a client of cooldownd with short backoffs
	conn       client.Conn    // provider 0
	fallback   []client.Conn  // providers 0, 1 and 2, in that order
	providers  []*provider
	made       *client.Client // what a snippet of the "new" wrapper made
	madeConn   client.Conn

	t testing.TB
}

const (
	payload  = `{"model":"gpt-4o","messages":[{"role":"user","content":"Say hello in five words."}]}`
	chatOK   = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"Hello from provider %d."}}]}`
	noQuota  = `{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`
	busy     = `{"error":{"message":"busy","type":"server_error"}}`
	slowDown = `{"error":{"message":"Rate limit reached.","type":"requests","code":"rate_limit_exceeded"}}`
)

// newEnv starts an env whose provider i answers with scripts[i] in turn
// (its last answer repeats; a provider without a script answers 200).
func newEnv(t testing.TB, scripts ...[]answer) *env {
	t.Helper()
	s := servertest.Start(t, servertest.WithPolicy(servertest.FastPolicy()))
	e := &env{ctx: t.Context(), cooldownd: s.URL, apiKey: "sk-docs-test-key-0000000000000000", salt: []byte("docs-test-salt-16"),
		body: []byte(payload), httpClient: &http.Client{Timeout: time.Minute}, t: t}
	cl, err := client.New(s.URL, client.WithBackoff(5*time.Millisecond, 20*time.Millisecond),
		client.WithAdmitTimeout(5*time.Second)) // generous: the machine is shared and loaded
	require.NoError(t, err)
	e.closeLater(cl)
	e.cl = cl
	for i := range 3 {
		p := &provider{n: i}
		if i < len(scripts) {
			p.answers = scripts[i]
		}
		p.srv = httptest.NewServer(p)
		t.Cleanup(p.srv.Close)
		conn, err := cl.Connection("openai", p.srv.URL+"/v1", e.apiKey, "gpt-4o", "")
		require.NoError(t, err)
		e.providers = append(e.providers, p)
		e.fallback = append(e.fallback, conn)
	}
	e.conn, e.url = e.fallback[0], e.providers[0].srv.URL+"/v1/chat/completions"
	return e
}

// closeLater closes c when the test ends.
func (e *env) closeLater(c *client.Client) { e.t.Cleanup(func() { _ = c.Close() }) }

// send is a fresh request with the body to conn's provider.
func (e *env) send(ctx context.Context, conn client.Conn) (*http.Response, error) {
	url := e.url
	for i, c := range e.fallback {
		if c.ID() == conn.ID() {
			url = e.providers[i].srv.URL + "/v1/chat/completions"
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(e.body))
	if err != nil {
		return nil, err
	}
	return e.httpClient.Do(req)
}

// call is send under the test's context.
func (e *env) call(conn client.Conn) (*http.Response, error) { return e.send(e.ctx, conn) }

// provider is a fake OpenAI: it answers each request with the next of its
// answers (the last one repeats; none: 200) and keeps each request's body.
type provider struct {
	n       int
	srv     *httptest.Server
	mu      sync.Mutex
	answers []answer
	bodies  []string
}

type answer struct {
	status int
	body   string
	header map[string]string
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	p.bodies = append(p.bodies, string(b))
	a := answer{status: http.StatusOK}
	if len(p.answers) > 0 {
		a = p.answers[min(len(p.bodies), len(p.answers))-1]
	}
	p.mu.Unlock()
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	if a.body == "" && a.status == http.StatusOK {
		a.body = chatText(p.n)
	}
	_, _ = io.WriteString(w, a.body)
}

// received returns the bodies of the requests so far.
func (p *provider) received() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.bodies...)
}

func chatText(n int) string { return fmt.Sprintf(chatOK, n) }

// rateLimitedOnce is a provider that answers one 429 with a short
// Retry-After, then 200.
var rateLimitedOnce = []answer{{status: http.StatusTooManyRequests, body: slowDown, header: map[string]string{"retry-after-ms": "1"}},
	{status: http.StatusOK}}

// doResult is what one guarded call of a snippet came to.
type doResult struct {
	status int
	err    error
	bodies []string // what the provider received, per attempt
}

// observeDo runs a guarded call against a provider that rate-limits it
// once, and returns what came back and what the provider received.
func observeDo(t testing.TB, f func(e *env) (*http.Response, error)) doResult {
	t.Helper()
	e := newEnv(t, rateLimitedOnce)
	resp, err := f(e)
	r := doResult{err: err}
	if resp != nil {
		r.status = resp.StatusCode
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	r.bodies = e.providers[0].received()
	return r
}

// runDo: the call succeeds after the 429, and every attempt sent the
// body, the retry too (a body built outside the call function is empty
// on the retry, and providers may answer an empty body with a 200).
func runDo(t *testing.T, f func(e *env) (*http.Response, error)) {
	r := observeDo(t, f)
	require.NoError(t, r.err)
	assert.Equal(t, http.StatusOK, r.status)
	require.Len(t, r.bodies, 2, "the 429, then the retry")
	for i, b := range r.bodies {
		assert.Equal(t, payload, b, "attempt %d carries the request body", i+1)
	}
}

// runNew: the client and connection work: the connection is admitted.
func runNew(t *testing.T, f func(e *env) error) {
	e := newEnv(t)
	require.NoError(t, f(e))
	c, conn := e.made, e.madeConn
	require.NotNil(t, c)
	e.closeLater(c)
	plain, err := e.cl.Connection("openai", "https://api.openai.com/v1", e.apiKey, "gpt-4o", "")
	require.NoError(t, err)
	assert.NotEqual(t, plain.ID(), conn.ID(), "the salt keys the id")
	a, err := c.Admit(e.ctx, conn)
	require.NoError(t, err)
	assert.True(t, a.Allowed())
}

// runFallback: the first candidate is out of quota, so the call moves on
// to the second at once, and the third is never called.
func runFallback(t *testing.T, f func(e *env) (*http.Response, error)) {
	e := newEnv(t, []answer{{status: http.StatusTooManyRequests, body: noQuota}})
	resp, err := f(e)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, chatText(1), string(b), "the second candidate answered")
	assert.Len(t, e.providers[0].received(), 1, "the exhausted quota is not retried")
	assert.Empty(t, e.providers[2].received())
}

// runSDKTransport: a call through the guarded SDK client is retried by
// the guard after a 503 (the SDK's own retries are off), with its body.
func runSDKTransport(t *testing.T, f func(e *env) openai.Client) {
	e := newEnv(t, []answer{{status: http.StatusServiceUnavailable, body: busy}, {status: http.StatusOK}})
	oa := f(e)
	c, err := oa.Chat.Completions.New(e.ctx, openai.ChatCompletionNewParams{
		Model:    openai.ChatModelGPT5_5,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello in five words.")},
	}, oaoption.WithBaseURL(e.providers[0].srv.URL+"/v1"), oaoption.WithAPIKey(e.apiKey))
	require.NoError(t, err)
	require.NotEmpty(t, c.Choices)
	assert.Equal(t, "Hello from provider 0.", c.Choices[0].Message.Content)
	bodies := e.providers[0].received()
	require.Len(t, bodies, 2, "one retry, by the guard")
	assert.Equal(t, bodies[0], bodies[1], "the retry carries the body")
	assert.Contains(t, bodies[1], "Say hello in five words.")
}

// runAttempt: primary is admitted, as a retry (the call was sent to it).
func runAttempt(t *testing.T, f func(e *env) (client.Admission, error)) {
	e := newEnv(t)
	a, err := f(e)
	require.NoError(t, err)
	assert.True(t, a.Allowed())
	assert.Equal(t, e.fallback[0].ID(), a.Conn.ID())
	assert.True(t, a.Retry, "a call already sent to primary is a retry there")
}

// runByHand: the by-hand protocol reports what the call came to: primary
// answers out of quota, and cooldownd then denies it.
func runByHand(t *testing.T, f func(e *env)) {
	e := newEnv(t, []answer{{status: http.StatusTooManyRequests, body: noQuota}})
	f(e)
	assert.Len(t, e.providers[0].received(), 1)
	a, err := e.cl.Admit(e.ctx, e.fallback[0])
	require.NoError(t, err)
	assert.Equal(t, client.DecisionDeny, a.Decision, "the quota report reached cooldownd")
	assert.Equal(t, client.ReasonQuota, a.Reason)
}

// TestRunDoCatchesAOneShotBody: the check of runDo fails on the README's
// old snippet, which built the body once, outside the call function: the
// retry after the 429 sent an empty body.
func TestRunDoCatchesAOneShotBody(t *testing.T) {
	t.Parallel()
	r := observeDo(t, func(e *env) (*http.Response, error) {
		ctx, url := e.ctx, e.url
		body := bytes.NewReader(e.body) // the old README's body: one reader for every attempt
		cl, err := client.New(e.cooldownd, client.WithToken(""))
		require.NoError(t, err)
		conn, err := cl.Connection("openai", "https://api.openai.com/v1", e.apiKey, "gpt-4o", "openai gpt-4o")
		require.NoError(t, err)
		e.closeLater(cl)
		return cl.Do(ctx, conn, func(ctx context.Context) (*http.Response, error) {
			req, _ := http.NewRequestWithContext(ctx, "POST", url, body)
			return http.DefaultClient.Do(req)
		})
	})
	require.NoError(t, r.err, "the provider answered the empty retry")
	assert.Equal(t, []string{payload, ""}, r.bodies, "runDo sees the retry's empty body")
}
