package clienttest_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/client"
	"github.com/cooldownd/cooldownd/client/clienttest"
)

// fakeTime is a clock that only its sleeps move.
type fakeTime struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func (f *fakeTime) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeTime) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.sleeps = append(f.sleeps, d)
	return nil
}

// TestHooksReachTheGuard: a caller's test, outside package client, sets the
// client's clock and sleep through clienttest, and the guard waits for a
// provider's Retry-After (7 s) through them, not on wall time. cooldownd is
// unreachable, so the in-process breaker decides on the same clock.
func TestHooksReachTheGuard(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(prov.Close)

	ft := &fakeTime{now: time.Unix(1_700_000_000, 0)}
	c, err := client.New("http://127.0.0.1:1", clienttest.WithClock(ft.Now), clienttest.WithSleep(ft.Sleep),
		client.WithDegradeAfter(1, 0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	conn, err := c.Connection("openai", prov.URL, "sk-clienttest-0000", "", "clienttest")
	require.NoError(t, err)

	resp, err := c.Do(t.Context(), conn, func(ctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, prov.URL, nil)
		if err != nil {
			return nil, err
		}
		return prov.Client().Do(req)
	})
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.EqualValues(t, 2, calls.Load())
	ft.mu.Lock()
	defer ft.mu.Unlock()
	require.Len(t, ft.sleeps, 1, "the guard waited through the sleep hook")
	assert.GreaterOrEqual(t, ft.sleeps[0], 7*time.Second, "for the provider's Retry-After, on the hook's clock")
}

// TestNilHooksKeepTheDefaults: a nil clock or sleep is no option at all.
func TestNilHooksKeepTheDefaults(t *testing.T) {
	t.Parallel()
	c, err := client.New("http://127.0.0.1:1", clienttest.WithClock(nil), clienttest.WithSleep(nil))
	require.NoError(t, err)
	require.NoError(t, c.Close())
}
