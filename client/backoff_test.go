package client

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scripted returns a call func that answers from replies (then the last
// one) and records the fake time of every call.
func scripted(replies ...reply) (func(context.Context) (*http.Response, error), *[]time.Time) {
	var at []time.Time
	return func(context.Context) (*http.Response, error) {
		r := replies[min(len(at), len(replies)-1)]
		at = append(at, time.Now())
		return response(r.status, r.headers, r.body), nil
	}, &at
}

// gaps returns the durations between consecutive times.
func gaps(at []time.Time) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(at); i++ {
		out = append(out, at[i].Sub(at[i-1]))
	}
	return out
}

func TestBackoffTiming(t *testing.T) {
	t.Parallel()
	noTrip := fastPolicy()
	noTrip.ConsecutiveFailures = 0
	tests := []struct {
		name    string
		replies []reply
		opts    []Option
		wantErr bool
		check   func(t *testing.T, gaps []time.Duration)
	}{
		{name: "exponential with jitter and cap",
			replies: []reply{{status: 500}, {status: 500}, {status: 500}, {status: 200}},
			opts:    []Option{WithMaxRetries(3), WithBackoff(time.Second, 3*time.Second)},
			check: func(t *testing.T, g []time.Duration) {
				require.Len(t, g, 3)
				for i, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
					assert.GreaterOrEqual(t, g[i], want/2, "retry %d", i+1)
					assert.LessOrEqual(t, g[i], want, "retry %d", i+1)
				}
			}},
		{name: "retry-after never shortened",
			replies: []reply{{status: 429, headers: map[string]string{"Retry-After": "3"}}, {status: 200}},
			opts:    []Option{WithBackoff(time.Millisecond, time.Millisecond)},
			check: func(t *testing.T, g []time.Duration) {
				require.Len(t, g, 1)
				assert.GreaterOrEqual(t, g[0], 3*time.Second)
				assert.Less(t, g[0], 4*time.Second)
			}},
		{name: "overloaded floor",
			replies: []reply{{status: 529, body: `{"type":"error","error":{"type":"overloaded_error"}}`}, {status: 200}},
			opts:    []Option{WithBackoff(time.Millisecond, time.Millisecond)},
			check: func(t *testing.T, g []time.Duration) {
				require.Len(t, g, 1)
				assert.GreaterOrEqual(t, g[0], 5*time.Second)
				assert.Less(t, g[0], 6*time.Second)
			}},
		{name: "delay above max server delay ends at once",
			replies: []reply{{status: 429, headers: map[string]string{"Retry-After": "31"}}, {status: 200}},
			wantErr: true,
			check:   func(t *testing.T, g []time.Duration) { assert.Empty(t, g) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				c, err := newFakeService(noTrip).client(tt.opts...)
				require.NoError(t, err)
				cn := NewConn(ID{1}, "test")
				call, at := scripted(tt.replies...)
				start := time.Now()
				_, err = c.Do(t.Context(), cn, call)
				if tt.wantErr {
					require.Error(t, err)
					assert.Equal(t, start, time.Now(), "no wait")
				} else {
					require.NoError(t, err)
				}
				tt.check(t, gaps(*at))
			})
		})
	}
}

func TestCancelDuringBackoff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c, err := newFakeService(fastPolicy()).client(WithBackoff(10*time.Second, 10*time.Second))
		require.NoError(t, err)
		call, at := scripted(reply{status: 500})
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		_, err = c.Do(ctx, NewConn(ID{1}, "test"), call)
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "returns when canceled, not after the backoff")
		require.ErrorIs(t, err, context.Canceled)
		var e *Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, 1, e.Attempts)
		assert.Equal(t, OutcomeTransientFailure, e.LastOutcome)
		assert.Len(t, *at, 1, "never retried after the cancellation")
	})
}

func TestBackoffPastDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c, err := newFakeService(fastPolicy()).client(WithBackoff(10*time.Second, 10*time.Second))
		require.NoError(t, err)
		call, at := scripted(reply{status: 500})
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		start := time.Now()
		_, err = c.Do(ctx, NewConn(ID{1}, "test"), call)
		var e *Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, start, time.Now(), "a backoff that would pass the deadline is not waited for")
		assert.Len(t, *at, 1)
	})
}

func TestDenyWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    []Option
		wantErr bool
		wait    time.Duration // least wait before the call
	}{
		{name: "waits the cooldown", wait: 2 * time.Second},
		{name: "max wait shorter denies at once", opts: []Option{WithMaxWait(time.Second)}, wantErr: true},
		{name: "no wait denies at once", opts: []Option{WithNoWait()}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				svc := newFakeService(fastPolicy())
				other, err := svc.client(WithMaxRetries(0))
				require.NoError(t, err)
				cn := NewConn(ID{1}, "test")
				limited, _ := scripted(reply{status: 429, headers: map[string]string{"Retry-After": "2"}})
				_, err = other.Do(t.Context(), cn, limited)
				require.Error(t, err)

				c, err := svc.client(tt.opts...)
				require.NoError(t, err)
				call, at := scripted(reply{status: 200})
				start := time.Now()
				_, err = c.Do(t.Context(), cn, call)
				if tt.wantErr {
					var d *DeniedError
					require.ErrorAs(t, err, &d)
					assert.Equal(t, ReasonCooldown, d.Reason)
					assert.Equal(t, 2*time.Second, d.RetryAfter)
					assert.Equal(t, start, time.Now())
					assert.Empty(t, *at)
					return
				}
				require.NoError(t, err)
				require.Len(t, *at, 1)
				waited := (*at)[0].Sub(start)
				assert.GreaterOrEqual(t, waited, tt.wait, "a denial's retry-after is never shortened")
				assert.Less(t, waited, tt.wait+tt.wait/10+10*time.Millisecond, "jitter adds at most 10%% + 10ms")
			})
		})
	}
}

func TestProbeInFlightPolls(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := fastPolicy()
		p.LeaseTTL = 30 * time.Second
		svc := newFakeService(p)
		c, err := svc.client()
		require.NoError(t, err)
		cn := NewConn(ID{1}, "test")
		// Trip the breaker, let it turn half-open, and hold the probe.
		for range 2 {
			a, err := c.Admit(t.Context(), cn)
			require.NoError(t, err)
			require.NoError(t, c.Report(t.Context(), a, Classification{Outcome: OutcomeTransientFailure}))
		}
		time.Sleep(p.OpenBase)
		probe, err := c.Admit(t.Context(), cn)
		require.NoError(t, err)
		require.Equal(t, DecisionAllowProbe, probe.Decision)
		time.AfterFunc(2500*time.Millisecond, func() {
			_ = c.Report(context.Background(), probe, Classification{Outcome: OutcomeSuccess})
		})

		call, at := scripted(reply{status: 200})
		start := time.Now()
		_, err = c.Do(t.Context(), cn, call)
		require.NoError(t, err)
		require.Len(t, *at, 1)
		waited := (*at)[0].Sub(start)
		assert.GreaterOrEqual(t, waited, 2500*time.Millisecond)
		assert.Less(t, waited, 2500*time.Millisecond+DefaultProbePoll+DefaultProbePoll/10+10*time.Millisecond,
			"polls every DefaultProbePoll instead of waiting out the 30 s lease")
	})
}
