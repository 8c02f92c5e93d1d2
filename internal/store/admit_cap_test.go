package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// TestAdmitAtCapAnswersWhatItGranted (issue 22): the tenant is at its cap
// (one connection, half-open and due for a probe). An Admit's first
// candidate is a new connection, a retry, denied by the retry budget (its
// floor, retry_budget_min × fleet_window, is below one call); the second is
// the half-open one, and the script grants it the probe lease. The answer
// must be that grant: before the fix the cap was checked in Go for every
// candidate without state after the script ran, so the Admit failed
// resource_exhausted while the lease it had written stayed held, and every
// caller got PROBE_IN_FLIGHT for the lease's TTL. A candidate without state
// that is admitted still answers [store.ErrTooManyConnections]: it is
// granted nothing, and the candidates before it were denied.
func TestAdmitAtCapAnswersWhatItGranted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		redis func(testing.TB) redis.UniversalClient
	}{
		{"single", func(tb testing.TB) redis.UniversalClient { _, c := redistest.Mini(tb); return c }},
		// Two slots: the pipelined rounds (the probe is granted in the
		// second round).
		{"cluster", func(tb testing.TB) redis.UniversalClient { return redistest.Cluster(tb) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := tc.redis(t)
			p := breaker.DefaultPolicy()
			p.RetryBudgetMin = 0 // no floor: a connection with no first attempt has no budget
			shadow := p
			shadow.Shadow = true
			clock := newTestClock()
			ctx := context.Background()
			newStore := func(p breaker.Policy) *store.Store {
				st, err := store.New(rdb, store.Options{Policy: &p, MaxConnsPerTenant: 1, Clock: clock.Now})
				require.NoError(t, err)
				return st
			}
			st := newStore(p)
			fresh := store.Conn{Tenant: "t", ID: testID(1), Retry: true}
			half := store.Conn{Tenant: "t", ID: testID(2)}
			if cc, ok := rdb.(*redis.ClusterClient); ok {
				slot := func(c store.Conn) int64 {
					n, err := cc.ClusterKeySlot(ctx, keys.Layout{Tenant: c.Tenant, ID: c.ID}.State()).Result()
					require.NoError(t, err)
					return n
				}
				require.NotEqual(t, slot(fresh), slot(half), "the candidates must be in two slots")
			}
			_, err := st.Report(ctx, half, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 1000})
			require.NoError(t, err)
			clock.advance(2 * time.Second)

			i, ds, err := st.AdmitFirst(ctx, []store.Conn{fresh, half})
			require.NoError(t, err, "the half-open candidate was granted its probe")
			require.Equal(t, 1, i)
			require.Len(t, ds, 2)
			assert.Equal(t, breaker.Deny, ds[0].Decision)
			assert.Equal(t, breaker.ReasonRetryBudget, ds[0].Reason)
			require.Equal(t, breaker.AllowProbe, ds[1].Decision)
			require.NotEmpty(t, ds[1].LeaseToken)

			d, err := st.Admit(ctx, half)
			require.NoError(t, err)
			assert.Equal(t, breaker.ReasonProbeInFlight, d.Reason, "the lease granted is the one held")
			res, err := st.Report(ctx, half, breaker.Report{Outcome: breaker.OutcomeSuccess, LeaseToken: ds[1].LeaseToken, Revision: ds[1].Revision})
			require.NoError(t, err)
			assert.True(t, res.Accepted, "…and its holder closes the connection with it")
			assert.Equal(t, breaker.Closed, res.Phase)

			d, err = st.Admit(ctx, fresh)
			require.NoError(t, err, "denied, so granted nothing: the cap is not in question")
			assert.Equal(t, breaker.ReasonRetryBudget, d.Reason)
			_, err = st.Admit(ctx, store.Conn{Tenant: "t", ID: testID(1)})
			require.ErrorIs(t, err, store.ErrTooManyConnections, "admitted without state at the cap: refused, as Report would")
			_, err = newStore(shadow).Admit(ctx, fresh)
			require.ErrorIs(t, err, store.ErrTooManyConnections, "a shadowed denial is admitted: refused")
			n, err := st.Count(ctx, "t")
			require.NoError(t, err)
			assert.Equal(t, int64(1), n, "nothing was created past the cap")
		})
	}
}
