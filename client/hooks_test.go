package client

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeTime is a clock that only sleeping moves, with the sleeps recorded.
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

func (f *fakeTime) slept() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.sleeps...)
}

// TestGuardWaitsThroughHooks: with withClock and withSleep (clienttest.WithClock and WithSleep) a caller's test
// checks the guard's backoff and a provider's Retry-After without a real
// sleep. The client decides in-process (no cooldownd), on the fake clock.
func TestGuardWaitsThroughHooks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script []reply
		check  func(t *testing.T, sleeps []time.Duration)
	}{
		{name: "retry-after is obeyed", script: []reply{{status: 429, headers: map[string]string{"Retry-After": "7"}}, {status: 200}},
			check: func(t *testing.T, sleeps []time.Duration) {
				require.Len(t, sleeps, 1)
				assert.GreaterOrEqual(t, sleeps[0], 7*time.Second)
			}},
		{name: "exponential backoff with jitter", script: []reply{{status: 500}, {status: 500}, {status: 200}},
			check: func(t *testing.T, sleeps []time.Duration) {
				require.Len(t, sleeps, 2)
				assert.GreaterOrEqual(t, sleeps[0], 500*time.Millisecond)
				assert.LessOrEqual(t, sleeps[0], time.Second)
				assert.GreaterOrEqual(t, sleeps[1], time.Second)
				assert.LessOrEqual(t, sleeps[1], 2*time.Second)
			}},
		{name: "overloaded waits at least the floor", script: []reply{{status: 529}, {status: 200}},
			check: func(t *testing.T, sleeps []time.Duration) {
				require.Len(t, sleeps, 1)
				assert.GreaterOrEqual(t, sleeps[0], overloadFloor)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ft := &fakeTime{now: time.Unix(1_700_000_000, 0)}
			prov := newProvider(t, tt.script...)
			c := newClient(t, "http://127.0.0.1:1", withClock(ft.Now), withSleep(ft.Sleep),
				WithBackoff(time.Second, 8*time.Second), WithDegradeAfter(1, 0))
			cn := conn(t, c, prov.URL, "key-hooks", "")
			start := time.Now()
			resp, err := c.Do(t.Context(), cn, prov.get())
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			_ = resp.Body.Close()
			tt.check(t, ft.slept())
			assert.Less(t, time.Since(start), 5*time.Second, "no real sleep")
		})
	}
}
