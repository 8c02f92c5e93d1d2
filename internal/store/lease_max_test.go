package store_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// TestExtendLeaseIsCutToThePolicysBound: an ExtendLease asking for more
// than the policy's lease_ttl_max holds the probe for lease_ttl_max, not
// for what it asked (the API allows 24 h); 0 there leaves it unbounded,
// and 0 asked is the lease TTL. Before lease_ttl_max, extend.lua gave any
// probe a day whatever the policy said.
func TestExtendLeaseIsCutToThePolicysBound(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	for i, tt := range []struct {
		name string
		max  time.Duration
		ask  time.Duration
		want time.Duration
	}{
		{"a day, cut to the bound", 10 * time.Minute, 24 * time.Hour, 10 * time.Minute},
		{"under the bound", 10 * time.Minute, time.Minute, time.Minute},
		{"0 is the lease TTL", 10 * time.Minute, 0, 30 * time.Second},
		{"no bound", 0, 24 * time.Hour, 24 * time.Hour},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			p := breaker.DefaultPolicy()
			p.LeaseTTL, p.LeaseTTLMax = 30*time.Second, tt.max
			require.NoError(t, p.Validate())
			var now atomic.Int64
			now.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
			st, err := store.New(rdb, store.Options{Policy: &p, Clock: func() time.Time { return time.UnixMilli(now.Load()) }})
			require.NoError(t, err)
			c := store.Conn{Tenant: "leasemax", ID: testID(byte(40 + i))}
			_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 1000})
			require.NoError(t, err)
			now.Add(1000)
			d, err := st.Admit(ctx, c)
			require.NoError(t, err)
			require.Equal(t, breaker.AllowProbe, d.Decision)
			now.Add(5000)
			exp, err := st.ExtendLease(ctx, c, d.LeaseToken, tt.ask)
			require.NoError(t, err)
			assert.Equal(t, tt.want, exp.Sub(time.UnixMilli(now.Load())))
		})
	}
}
