package worker

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
