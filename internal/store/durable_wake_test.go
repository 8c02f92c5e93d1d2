package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// TestUnacknowledgedDurableOpenEndsOnTime (issue 22): with Durability, a
// report that trips a connection is applied on the master and fails
// unavailable when no replica acknowledges it in time (a lagging replica:
// what the option is for). Its open must still be scheduled: the sweep
// after the open's end applies and publishes OPEN_EXPIRED, stamped with
// that end. Before the fix the wake entry stayed at the connection's idle
// expiry (24 h), so the end was never published, and a retry of the
// report was stale and scheduled nothing either.
func TestUnacknowledgedDurableOpenEndsOnTime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		redis func(testing.TB) redis.UniversalClient
	}{
		// Neither has a replica: WAIT 1 always answers 0.
		{"single", func(tb testing.TB) redis.UniversalClient { return redistest.Real(tb) }},
		{"cluster", func(tb testing.TB) redis.UniversalClient { return redistest.Cluster(tb) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := newTestClock()
			st, err := store.New(tc.redis(t), store.Options{Clock: clock.Now,
				Durability: store.Durability{Replicas: 1, Timeout: 10 * time.Millisecond}})
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			evs, err := st.Watch(ctx, "t")
			require.NoError(t, err)
			c := store.Conn{Tenant: "t", ID: testID(7)}
			// An existing, healthy connection: once swept, its wake entry is
			// its idle expiry.
			_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess})
			require.NoError(t, err, "a success does not wait for replicas")
			clock.advance(time.Minute)
			require.NoError(t, st.Sweep(ctx))

			start := clock.Now()
			res, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 1000})
			require.NoError(t, err)
			require.Equal(t, store.NotReplicated, res.Durability, "no replica acknowledged the open")
			opened := next(t, evs)
			require.Equal(t, breaker.Open, opened.To, "the open was applied on the master")

			clock.advance(1500 * time.Millisecond)
			require.NoError(t, st.Sweep(ctx))
			half := next(t, evs)
			assert.Equal(t, breaker.HalfOpen, half.To)
			assert.Equal(t, breaker.CauseOpenExpired, half.Cause)
			assert.Equal(t, start.Add(time.Second).UnixMilli(), half.At, "published by the sweep, stamped with the open's end")
		})
	}
}
