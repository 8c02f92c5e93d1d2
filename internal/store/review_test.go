package store_test

import (
	"context"
	"slices"
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

// beforeHook runs a function before each command a client sends, to
// interleave another replica's work at an exact point.
type beforeHook struct{ before func(cmd redis.Cmder) }

func (h beforeHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h beforeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.before(cmd)
		return next(ctx, cmd)
	}
}
func (h beforeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestHistoryExpiresWithTheState(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	st, err := store.New(rdb, store.Options{IdleTTL: time.Hour})
	require.NoError(t, err)
	ctx := context.Background()
	c := store.Conn{Tenant: "t", ID: testID(9)}
	// The first event creates the history list after the state was saved.
	_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 1000})
	require.NoError(t, err)
	l := keys.Layout{Tenant: "t", ID: c.ID}
	assert.Positive(t, rdb.PTTL(ctx, l.State()).Val())
	assert.Positive(t, rdb.PTTL(ctx, l.History()).Val(), "a history without a TTL would outlive its connection forever")
}

func TestForcedOpenUntilChangedNeverExpires(t *testing.T) {
	t.Parallel()
	m, rdb := redistest.Mini(t)
	st, err := store.New(rdb, store.Options{IdleTTL: time.Hour})
	require.NoError(t, err)
	ctx := context.Background()
	c := store.Conn{Tenant: "t", ID: testID(8)}
	_, err = st.Force(ctx, "t", c.ID, breaker.ForcedOpen, 0, "ops", "maintenance")
	require.NoError(t, err)
	m.FastForward(48 * time.Hour) // denied callers write nothing meanwhile
	d, err := st.Admit(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, breaker.ReasonForcedOpen, d.Reason, "until changed means until changed")
	// Clearing it brings the idle expiry back.
	_, err = st.Force(ctx, "t", c.ID, breaker.NoOverride, 0, "ops", "done")
	require.NoError(t, err)
	assert.Positive(t, rdb.PTTL(ctx, keys.Layout{Tenant: "t", ID: c.ID}.State()).Val())
}

func TestCapIgnoresExpiredConnections(t *testing.T) {
	t.Parallel()
	m, rdb := redistest.Mini(t)
	clock := newMiniClock(m)
	st, err := store.New(rdb, store.Options{IdleTTL: time.Hour, MaxConnsPerTenant: 2})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 2 {
		_, err := st.Report(ctx, store.Conn{Tenant: "t", ID: testID(byte(i))}, breaker.Report{Outcome: breaker.OutcomeSuccess})
		require.NoError(t, err)
	}
	clock.advance(2 * time.Hour) // both expired; nobody listed, no sweeper ran
	_, err = st.Report(ctx, store.Conn{Tenant: "t", ID: testID(5)}, breaker.Report{Outcome: breaker.OutcomeSuccess})
	require.NoError(t, err, "expired connections do not count against the cap")
	n, err := st.Count(ctx, "t")
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
}

// TestListPruneDoesNotDropARevivedConnection: List finds a connection's
// state gone; before it forgets the index entry, another replica revives
// the connection. The entry must stay.
func TestListPruneDoesNotDropARevivedConnection(t *testing.T) {
	t.Parallel()
	m, rdb := redistest.Mini(t)
	clock := newMiniClock(m)
	other := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	t.Cleanup(func() { _ = other.Close() })
	st, err := store.New(rdb, store.Options{IdleTTL: time.Hour})
	require.NoError(t, err)
	st2, err := store.New(other, store.Options{IdleTTL: time.Hour})
	require.NoError(t, err)
	ctx := context.Background()
	c := store.Conn{Tenant: "t", ID: testID(3)}
	_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess})
	require.NoError(t, err)
	clock.advance(2 * time.Hour)
	fired := false
	rdb.AddHook(beforeHook{before: func(cmd redis.Cmder) {
		if !fired && slices.Contains(cmd.Args(), any("forget")) {
			fired = true // another replica revives the connection right now
			_, err := st2.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 60_000})
			assert.NoError(t, err)
		}
	}})
	_, _, err = st.List(ctx, "t", "", 10)
	require.NoError(t, err)
	require.True(t, fired)
	snaps, _, err := st.List(ctx, "t", "", 10)
	require.NoError(t, err)
	require.Len(t, snaps, 1, "the live connection stays listed")
	assert.Equal(t, breaker.Open, snaps[0].State.Phase)
}

// TestExtendLeaseIsOneAtomicStep: ExtendLease is one script (compare the
// token, then extend), so a probe settled meanwhile cannot be revived:
// there is no second step that could re-create a lease.
func TestExtendLeaseIsOneAtomicStep(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	p := breaker.DefaultPolicy()
	p.ConsecutiveFailures = 1
	p.OpenBase, p.OpenMax, p.Jitter = 5*time.Millisecond, 5*time.Millisecond, 0
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st, err := store.New(rdb, store.Options{Policy: &p, Clock: func() time.Time { return now }})
	require.NoError(t, err)
	ctx := context.Background()
	c := store.Conn{Tenant: "t", ID: testID(7)}
	_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeTransientFailure})
	require.NoError(t, err)
	now = now.Add(20 * time.Millisecond)
	probe, err := st.Admit(ctx, c)
	require.NoError(t, err)
	require.Equal(t, breaker.AllowProbe, probe.Decision)

	_, err = st.ExtendLease(ctx, c, "0.0.0.forged", time.Hour) // loads the script
	require.ErrorIs(t, err, store.ErrLeaseNotHeld)
	var sent []string
	rdb.AddHook(beforeHook{before: func(cmd redis.Cmder) { sent = append(sent, cmd.Name()) }})
	exp, err := st.ExtendLease(ctx, c, probe.LeaseToken, 5*time.Minute) // within lease_ttl_max
	require.NoError(t, err)
	assert.Equal(t, now.Add(5*time.Minute).UnixMilli(), exp.UnixMilli())
	assert.Equal(t, []string{"evalsha"}, sent, "one round trip")

	_, err = st.Report(ctx, c, breaker.Report{LeaseToken: probe.LeaseToken, Outcome: breaker.OutcomeSuccess})
	require.NoError(t, err)
	_, err = st.ExtendLease(ctx, c, probe.LeaseToken, time.Hour)
	require.ErrorIs(t, err, store.ErrLeaseNotHeld, "a settled lease cannot be extended")
	snap, _, err := st.Get(ctx, "t", c.ID, 0)
	require.NoError(t, err)
	assert.Equal(t, breaker.Closed, snap.State.Phase)
	assert.Empty(t, snap.State.Leases, "nothing was re-created")
	r, err := st.Report(ctx, c, breaker.Report{Revision: probe.Revision, LeaseToken: probe.LeaseToken, Outcome: breaker.OutcomeTransientFailure})
	require.NoError(t, err)
	assert.False(t, r.Accepted, "a stale failure never re-opens a recovered connection")
	assert.Equal(t, breaker.Closed, r.Phase)
}
