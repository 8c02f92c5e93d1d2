package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// halfOpen brings c to half-open on st (a 1 ms rate limit, then a wait on
// the store's own clock).
func halfOpen(t *testing.T, st *store.Store, c store.Conn) {
	t.Helper()
	ctx := context.Background()
	_, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 1})
	require.NoError(t, err)
	for {
		d, err := st.Admit(ctx, c)
		require.NoError(t, err)
		if d.Phase == breaker.HalfOpen {
			return
		}
		require.Equal(t, breaker.Deny, d.Decision)
	}
}

// TestProbeInFlightRetryAfterIsAlwaysPositive is issue 12's measurement:
// with a 1 ms lease on real Redis (its own TIME, no test clock), the
// scripts judged leases by key existence (expired against the script's
// start) and by TIME (now): 10,541 of 19,064 PROBE_IN_FLIGHT denials
// carried retry_after <= 0. With the expiry stored in the state and judged
// against TIME only, a live lease always ends after now.
func TestProbeInFlightRetryAfterIsAlwaysPositive(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	p := fastPolicy()
	p.MaxProbes, p.LeaseTTL = 1, time.Millisecond
	st, err := store.New(rdb, store.Options{Policy: &p})
	require.NoError(t, err)
	c := store.Conn{Tenant: "t", ID: testID(1)}
	halfOpen(t, st, c)
	var mu sync.Mutex
	var inFlight, bad int
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range sized(1500, 400) {
				d, err := st.Admit(context.Background(), c)
				if !assert.NoError(t, err) {
					return
				}
				if d.Reason == breaker.ReasonProbeInFlight {
					mu.Lock()
					inFlight++
					if d.RetryAfter <= 0 {
						bad++
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	t.Logf("PROBE_IN_FLIGHT denials: %d, with retry_after <= 0: %d", inFlight, bad)
	require.Positive(t, inFlight, "the run must meet held leases")
	assert.Zero(t, bad, "a denial for a probe in flight always says when to come back")
}

// TestCanceledProbeCannotReopen is issue 12's sequence on the store: a
// probe reports CANCELED, another caller is granted the probe, the first
// caller's late TRANSIENT_FAILURE (same admission) must not re-open, and
// the new probe's SUCCESS closes.
func TestCanceledProbeCannotReopen(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	p := fastPolicy()
	p.MaxProbes = 1
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st, err := store.New(rdb, store.Options{Policy: &p, Clock: func() time.Time { return now }})
	require.NoError(t, err)
	ctx := context.Background()
	c := store.Conn{Tenant: "t", ID: testID(2)}
	_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 100})
	require.NoError(t, err)
	now = now.Add(200 * time.Millisecond)
	first, err := st.Admit(ctx, c)
	require.NoError(t, err)
	require.Equal(t, breaker.AllowProbe, first.Decision)
	_, err = st.Report(ctx, c, breaker.Report{Revision: first.Revision, LeaseToken: first.LeaseToken, Outcome: breaker.OutcomeCanceled})
	require.NoError(t, err)
	second, err := st.Admit(ctx, c)
	require.NoError(t, err)
	require.Equal(t, breaker.AllowProbe, second.Decision, "the canceled probe released its lease")

	late, err := st.Report(ctx, c, breaker.Report{Revision: first.Revision, LeaseToken: first.LeaseToken, Outcome: breaker.OutcomeTransientFailure})
	require.NoError(t, err)
	assert.False(t, late.Accepted, "one verdict per lease: the canceled probe has none left")
	assert.Equal(t, breaker.HalfOpen, late.Phase)
	ok, err := st.Report(ctx, c, breaker.Report{Revision: second.Revision, LeaseToken: second.LeaseToken, Outcome: breaker.OutcomeSuccess})
	require.NoError(t, err)
	assert.True(t, ok.Accepted)
	assert.Equal(t, breaker.Closed, ok.Phase)
}

// TestRevisionsDoNotRestartAfterIdleExpiry: a connection expires idle and
// comes back; a report held across the gap carries a revision of the old
// life, which the new life never repeats.
func TestRevisionsDoNotRestartAfterIdleExpiry(t *testing.T) {
	t.Parallel()
	m, rdb := redistest.Mini(t)
	clock := newMiniClock(m)
	p := fastPolicy()
	st, err := store.New(rdb, store.Options{Policy: &p, IdleTTL: time.Minute})
	require.NoError(t, err)
	ctx := context.Background()
	c := store.Conn{Tenant: "t", ID: testID(3)}
	lifeRevs := func() []uint64 {
		var revs []uint64
		for range 3 { // three transitions: open, half-open, closed
			_, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 10})
			require.NoError(t, err)
			clock.advance(20 * time.Millisecond)
			d, err := st.Admit(ctx, c)
			require.NoError(t, err)
			r, err := st.Report(ctx, c, breaker.Report{LeaseToken: d.LeaseToken, Outcome: breaker.OutcomeSuccess})
			require.NoError(t, err)
			revs = append(revs, d.Revision, r.Revision)
		}
		return revs
	}
	old := lifeRevs()
	held, err := st.Admit(ctx, c) // admitted, reported only after the gap
	require.NoError(t, err)
	clock.advance(2 * time.Minute)
	snap, _, err := st.Get(ctx, "t", c.ID, 0)
	require.NoError(t, err)
	require.False(t, snap.Exists, "the connection expired idle")
	again := lifeRevs()
	for _, r := range again {
		assert.NotContains(t, old, r, "revision %d repeats one of the previous life %v", r, old)
	}
	r, err := st.Report(ctx, c, breaker.Report{Revision: held.Revision, Outcome: breaker.OutcomeTransientFailure})
	require.NoError(t, err)
	assert.False(t, r.Accepted, "a report held across the gap cannot match the new life")
}
