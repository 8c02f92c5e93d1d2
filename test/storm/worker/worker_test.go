package worker

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/client"
	"github.com/cooldownd/cooldownd/test/storm/fakeprovider"
)

// scripted answers each key from its own list of statuses (the last one
// repeats) and records when each request arrived.
type scripted struct {
	mu    sync.Mutex
	plan  map[string][]int
	seen  map[string][]time.Time
	extra http.Header
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(fakeprovider.HeaderKey)
	s.mu.Lock()
	n := len(s.seen[key])
	s.seen[key] = append(s.seen[key], time.Now())
	plan := s.plan[key]
	status := plan[min(n, len(plan)-1)]
	s.mu.Unlock()
	for k, v := range s.extra {
		w.Header()[k] = v
	}
	w.WriteHeader(status)
	if status == http.StatusForbidden {
		_, _ = w.Write([]byte(`{"error":{"code":"insufficient_quota"}}`))
	}
}

func newWorker(t *testing.T, url string, fallback bool) *Worker {
	t.Helper()
	w, err := New(Config{
		Strategy: NoCoordination, Provider: url, RunID: t.Name(), Goroutines: 1, Fallback: fallback,
		Policy: client.DefaultPolicy(), MaxRetries: 2, BackoffBase: 10 * time.Millisecond, BackoffCap: 40 * time.Millisecond,
		AttemptTimeout: time.Second, Deadline: 5 * time.Second, Think: time.Millisecond, Duration: time.Second,
	})
	require.NoError(t, err)
	return w
}

func TestNoCoordinationRetriesThenSucceeds(t *testing.T) {
	t.Parallel()
	s := &scripted{plan: map[string][]int{KeyPrimary: {500, 500, 200}}, seen: map[string][]time.Time{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c := newWorker(t, srv.URL, false).userCall(t.Context(), 0, rand.New(rand.NewPCG(1, 2)))
	assert.True(t, c.OK, c.Err)
	assert.Equal(t, 3, c.Attempts)
	assert.Equal(t, KeyPrimary, c.Key)
}

func TestNoCoordinationGivesUpAfterMaxRetries(t *testing.T) {
	t.Parallel()
	s := &scripted{plan: map[string][]int{KeyPrimary: {500}}, seen: map[string][]time.Time{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c := newWorker(t, srv.URL, false).userCall(t.Context(), 0, rand.New(rand.NewPCG(1, 2)))
	assert.False(t, c.OK)
	assert.Equal(t, 3, c.Attempts, "the first attempt and 2 retries")
	assert.Equal(t, "failed:transient_failure", c.Err)
}

func TestNoCoordinationHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	s := &scripted{plan: map[string][]int{KeyPrimary: {429, 200}}, seen: map[string][]time.Time{},
		extra: http.Header{"Retry-After-Ms": {"300"}}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c := newWorker(t, srv.URL, false).userCall(t.Context(), 0, rand.New(rand.NewPCG(1, 2)))
	require.True(t, c.OK, c.Err)
	seen := s.seen[KeyPrimary]
	require.Len(t, seen, 2)
	assert.GreaterOrEqual(t, seen[1].Sub(seen[0]), 300*time.Millisecond)
}

func TestNoCoordinationMovesOnToTheFallback(t *testing.T) {
	t.Parallel()
	s := &scripted{plan: map[string][]int{KeyPrimary: {403}, KeyFallback: {200}}, seen: map[string][]time.Time{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c := newWorker(t, srv.URL, true).userCall(t.Context(), 0, rand.New(rand.NewPCG(1, 2)))
	assert.True(t, c.OK, c.Err)
	assert.Equal(t, 2, c.Attempts, "an exhausted quota is not retried")
	assert.Equal(t, KeyFallback, c.Key)
}

// TestRetryHeader: the provider can tell a retry (the call was already
// sent to this key) from a first attempt.
func TestRetryHeader(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var retries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n := len(retries)
		retries = append(retries, r.Header.Get(fakeprovider.HeaderRetry))
		mu.Unlock()
		if n < 2 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	c := newWorker(t, srv.URL, false).userCall(t.Context(), 0, rand.New(rand.NewPCG(1, 2)))
	require.True(t, c.OK, c.Err)
	assert.Equal(t, []string{"", "1", "1"}, retries)
}

// TestObserverCountsTheWire: the worker's client's Admits and Reports are
// read off the wire — denials by reason, shadow denials, throttled
// answers, retry marks and reporter ids — and passed on unchanged, with
// the answer uncompressed.
func TestObserverCountsTheWire(t *testing.T) {
	t.Parallel()
	answers := []*cooldownv1.AdmitResponse{
		{Decision: cooldownv1.Decision_DECISION_DENY, DenyReason: cooldownv1.DenyReason_DENY_REASON_RETRY_BUDGET},
		{Decision: cooldownv1.Decision_DECISION_ALLOW, ShadowDenyReason: cooldownv1.DenyReason_DENY_REASON_OPEN, ThrottleProbability: 0.5},
	}
	var mu sync.Mutex
	n := 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Empty(t, r.Header.Get("Accept-Encoding"), "the answer must come uncompressed")
		if strings.HasSuffix(r.URL.Path, "/Report") {
			return
		}
		mu.Lock()
		a := answers[n%len(answers)]
		n++
		mu.Unlock()
		b, err := proto.Marshal(a)
		assert.NoError(t, err)
		w.Header().Set("Content-Type", "application/proto")
		_, _ = w.Write(b)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)

	o := newObserver()
	post := func(method string, m proto.Message) *http.Response {
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/cooldown.v1.CooldownService/"+method, bytes.NewReader(b))
		require.NoError(t, err)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := o.Do(req)
		require.NoError(t, err)
		return resp
	}
	resp := post("Admit", &cooldownv1.AdmitRequest{Retry: []bool{false, true}})
	var got cooldownv1.AdmitResponse
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, proto.Unmarshal(body, &got))
	assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_RETRY_BUDGET, got.GetDenyReason(), "the answer is passed on")
	_ = post("Admit", &cooldownv1.AdmitRequest{Retry: []bool{false}}).Body.Close()
	_ = post("Report", &cooldownv1.ReportRequest{Retry: true, Reporter: "r1"}).Body.Close()
	_ = post("Report", &cooldownv1.ReportRequest{Reporter: "r1"}).Body.Close()

	w := o.snapshot()
	assert.Equal(t, 2, w.Admits)
	assert.Equal(t, 1, w.RetryAdmits)
	assert.Equal(t, map[string]int{"DENY_REASON_RETRY_BUDGET": 1}, w.Denies)
	assert.Equal(t, 1, w.Denied())
	assert.Equal(t, map[string]int{"DENY_REASON_OPEN": 1}, w.Shadowed)
	assert.Equal(t, 1, w.Throttled)
	assert.Equal(t, 2, w.Reports)
	assert.Equal(t, 1, w.RetryReports)
	assert.Equal(t, []string{"r1"}, w.Reporters)
	assert.Zero(t, w.Undecoded)
}
