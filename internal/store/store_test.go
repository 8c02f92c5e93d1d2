package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

func testID(b ...byte) keys.ID {
	var id keys.ID
	copy(id[:], b)
	id[31] = 0xcd
	return id
}

// miniClock moves a miniredis's TIME and its key expiry together (it
// expires keys only when told time passed).
type miniClock struct {
	m   *miniredis.Miniredis
	now time.Time
}

func newMiniClock(m *miniredis.Miniredis) *miniClock {
	c := &miniClock{m: m, now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	m.SetTime(c.now)
	return c
}

func (c *miniClock) advance(d time.Duration) {
	c.now = c.now.Add(d)
	c.m.SetTime(c.now)
	c.m.FastForward(d)
}

func TestNoScriptAfterFlushIsTransparent(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	p := fastPolicy()
	st, err := store.New(rdb, store.Options{Policy: &p})
	require.NoError(t, err)
	ctx := context.Background()
	c := store.Conn{Tenant: "t", ID: testID(1)}
	_, err = st.Admit(ctx, c)
	require.NoError(t, err)
	// A restarted Redis has no scripts cached: EVALSHA answers NOSCRIPT.
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	d, err := st.Admit(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, breaker.Allow, d.Decision)
	_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 10_000})
	require.NoError(t, err)
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	snaps, _, err := st.List(ctx, "t", "", 10)
	require.NoError(t, err)
	require.Len(t, snaps, 1)
	assert.Equal(t, breaker.Open, snaps[0].State.Phase)
}

func TestAdmitOnUnknownConnectionWritesNothing(t *testing.T) {
	t.Parallel()
	m, rdb := redistest.Mini(t)
	st, err := store.New(rdb, store.Options{})
	require.NoError(t, err)
	d, err := st.Admit(context.Background(), store.Conn{Tenant: "t", ID: testID(2)})
	require.NoError(t, err)
	assert.Equal(t, breaker.Allow, d.Decision)
	assert.Equal(t, uint64(0), d.Revision)
	assert.Empty(t, m.Keys(), "the healthy path must not write")
}

func TestIdleConnectionsExpireAndLeaveTheIndex(t *testing.T) {
	t.Parallel()
	m, rdb := redistest.Mini(t)
	clock := newMiniClock(m)
	st, err := store.New(rdb, store.Options{IdleTTL: time.Hour})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 3 {
		_, err := st.Report(ctx, store.Conn{Tenant: "t", ID: testID(byte(i))}, breaker.Report{Outcome: breaker.OutcomeSuccess})
		require.NoError(t, err)
	}
	n, err := st.Count(ctx, "t")
	require.NoError(t, err)
	assert.Equal(t, int64(3), n)
	clock.advance(30 * time.Minute)
	_, err = st.Report(ctx, store.Conn{Tenant: "t", ID: testID(0)}, breaker.Report{Outcome: breaker.OutcomeSuccess})
	require.NoError(t, err)
	clock.advance(45 * time.Minute) // 1 and 2 are idle for 75 min, 0 for 45
	snaps, more, err := st.List(ctx, "t", "", 10)
	require.NoError(t, err)
	assert.False(t, more)
	require.Len(t, snaps, 1)
	assert.Equal(t, testID(0), snaps[0].ID)
	n, err = st.Count(ctx, "t")
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "List prunes expired connections from the index")
}

func TestOpenConnectionOutlivesIdleTTL(t *testing.T) {
	t.Parallel()
	m, rdb := redistest.Mini(t)
	clock := newMiniClock(m)
	p := breaker.DefaultPolicy()
	st, err := store.New(rdb, store.Options{Policy: &p, IdleTTL: time.Minute})
	require.NoError(t, err)
	ctx := context.Background()
	c := store.Conn{Tenant: "t", ID: testID(9)}
	_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeQuotaExhausted})
	require.NoError(t, err)
	clock.advance(50 * time.Minute)
	d, err := st.Admit(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, breaker.Deny, d.Decision, "a one-hour quota block survives a shorter idle TTL")
	assert.Equal(t, breaker.ReasonQuota, d.Reason)
}

func TestWatchDeliversTransitionsOfOneTenantOnly(t *testing.T) {
	t.Parallel()
	_, rdb := redistest.Mini(t)
	st, err := store.New(rdb, store.Options{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, err := st.Watch(ctx, "a")
	require.NoError(t, err)
	_, err = st.Report(ctx, store.Conn{Tenant: "b", ID: testID(1)}, breaker.Report{Outcome: breaker.OutcomeRateLimited})
	require.NoError(t, err)
	_, err = st.Report(ctx, store.Conn{Tenant: "a", ID: testID(1)}, breaker.Report{Outcome: breaker.OutcomeAuthFailure})
	require.NoError(t, err)
	select {
	case ev := <-evs:
		assert.Equal(t, "a", ev.Tenant)
		assert.Equal(t, testID(1), ev.ID)
		assert.Equal(t, breaker.CauseAuth, ev.Cause)
		assert.Equal(t, breaker.Open, ev.To)
	case <-ctx.Done():
		t.Fatal("no event within 10s")
	}
}

func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	_, rdb := redistest.Mini(t)
	st, err := store.New(rdb, store.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	id := testID(7)
	_, err = st.Report(ctx, store.Conn{Tenant: "a", ID: id}, breaker.Report{Outcome: breaker.OutcomeQuotaExhausted})
	require.NoError(t, err)
	d, err := st.Admit(ctx, store.Conn{Tenant: "b", ID: id})
	require.NoError(t, err)
	assert.Equal(t, breaker.Allow, d.Decision, "the same id under another tenant is another connection")
	snaps, _, err := st.List(ctx, "b", "", 10)
	require.NoError(t, err)
	assert.Empty(t, snaps)
	_, err = st.Reset(ctx, "b", id, "mallory", "")
	require.NoError(t, err)
	d, err = st.Admit(ctx, store.Conn{Tenant: "a", ID: id})
	require.NoError(t, err)
	assert.Equal(t, breaker.Deny, d.Decision, "b's reset must not touch a's connection")
}

func TestExtendLeaseKeepsAProbeAlive(t *testing.T) {
	t.Parallel()
	m, rdb := redistest.Mini(t)
	clock := newMiniClock(m)
	p := fastPolicy()
	p.MaxProbes = 1
	st, err := store.New(rdb, store.Options{Policy: &p})
	require.NoError(t, err)
	ctx := context.Background()
	c := store.Conn{Tenant: "t", ID: testID(3)}
	_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 100})
	require.NoError(t, err)
	clock.advance(150 * time.Millisecond)
	probe, err := st.Admit(ctx, c)
	require.NoError(t, err)
	require.Equal(t, breaker.AllowProbe, probe.Decision)
	clock.advance(200 * time.Millisecond)
	exp, err := st.ExtendLease(ctx, c, probe.LeaseToken, time.Second)
	require.NoError(t, err)
	assert.Equal(t, clock.now.Add(time.Second).UnixMilli(), exp.UnixMilli())
	clock.advance(200 * time.Millisecond) // past the original 300 ms TTL
	d, err := st.Admit(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, breaker.ReasonProbeInFlight, d.Reason, "the extended lease is still held")
	_, err = st.ExtendLease(ctx, c, "0.0.1.forged", time.Second)
	require.ErrorIs(t, err, store.ErrLeaseNotHeld)
}

func TestTenantConnectionCap(t *testing.T) {
	t.Parallel()
	_, rdb := redistest.Mini(t)
	st, err := store.New(rdb, store.Options{MaxConnsPerTenant: 2})
	require.NoError(t, err)
	ctx := context.Background()
	ok := breaker.Report{Outcome: breaker.OutcomeSuccess}
	for i := range 2 {
		_, err := st.Report(ctx, store.Conn{Tenant: "t", ID: testID(byte(i))}, ok)
		require.NoError(t, err)
	}
	_, err = st.Report(ctx, store.Conn{Tenant: "t", ID: testID(9)}, ok)
	require.ErrorIs(t, err, store.ErrTooManyConnections)
	_, err = st.Report(ctx, store.Conn{Tenant: "t", ID: testID(0)}, ok)
	require.NoError(t, err, "existing connections keep working at the cap")
	_, err = st.Report(ctx, store.Conn{Tenant: "u", ID: testID(9)}, ok)
	require.NoError(t, err, "the cap is per tenant")
	snap, _, err := st.Get(ctx, "t", testID(9), 0)
	require.NoError(t, err)
	assert.False(t, snap.Exists, "the refused connection left nothing behind")
}

func TestLapsedLeaseIsNoticedAtTheNextGrant(t *testing.T) {
	t.Parallel()
	m, rdb := redistest.Mini(t)
	p := fastPolicy()
	p.MaxProbes = 1
	st, err := store.New(rdb, store.Options{Policy: &p})
	require.NoError(t, err)
	ctx := context.Background()
	c := store.Conn{Tenant: "t", ID: testID(4)}
	now := time.Now()
	advance := func(d time.Duration) {
		now = now.Add(d)
		m.SetTime(now)
		m.FastForward(d)
	}
	advance(0)
	_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 100})
	require.NoError(t, err)
	advance(150 * time.Millisecond)
	first, err := st.Admit(ctx, c)
	require.NoError(t, err)
	require.Equal(t, breaker.AllowProbe, first.Decision)
	assert.False(t, first.LeaseExpired)
	advance(400 * time.Millisecond) // past the 300 ms lease: its holder died
	second, err := st.Admit(ctx, c)
	require.NoError(t, err)
	require.Equal(t, breaker.AllowProbe, second.Decision)
	assert.True(t, second.LeaseExpired, "the lapsed lease is counted")
	// A settled probe is not counted as expired.
	_, err = st.Report(ctx, c, breaker.Report{Revision: second.Revision, LeaseToken: second.LeaseToken, Outcome: breaker.OutcomeCanceled})
	require.NoError(t, err)
	third, err := st.Admit(ctx, c)
	require.NoError(t, err)
	require.Equal(t, breaker.AllowProbe, third.Decision)
	assert.False(t, third.LeaseExpired, "a canceled probe released its lease")
}

func TestPolicyPerLabel(t *testing.T) {
	t.Parallel()
	m, rdb := redistest.Mini(t)
	newMiniClock(m) // a still clock: the cooldown left is exact
	base := breaker.DefaultPolicy()
	slow := base
	slow.RateLimitCooldown = time.Minute
	st, err := store.New(rdb, store.Options{PolicyFor: func(tenant, label string) breaker.Policy {
		if tenant == "t" && label == "slow" {
			return slow
		}
		return base
	}})
	require.NoError(t, err)
	ctx := context.Background()
	for _, tc := range []struct {
		label string
		want  int64
	}{{"slow", time.Minute.Milliseconds()}, {"fast", base.RateLimitCooldown.Milliseconds()}} {
		c := store.Conn{Tenant: "t", ID: testID(tc.label[0]), Label: tc.label}
		_, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited})
		require.NoError(t, err)
		d, err := st.Admit(ctx, c)
		require.NoError(t, err)
		assert.Equal(t, breaker.ReasonCooldown, d.Reason)
		assert.Equal(t, tc.want, d.RetryAfter, "the %q label's cooldown", tc.label)
	}
}

func TestWatchersOfATenantShareOneSubscription(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	st, err := store.New(rdb, store.Options{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clients := func() int {
		list, err := rdb.ClientList(ctx).Result()
		require.NoError(t, err)
		return strings.Count(list, "\n")
	}
	before := clients()
	var chans []<-chan store.Transition
	wctx, stopWatchers := context.WithCancel(ctx)
	for range 50 {
		ch, err := st.Watch(wctx, "a")
		require.NoError(t, err)
		chans = append(chans, ch)
	}
	assert.LessOrEqual(t, clients()-before, 1, "50 watchers of one tenant, one Redis connection")
	_, err = st.Report(ctx, store.Conn{Tenant: "a", ID: testID(1)}, breaker.Report{Outcome: breaker.OutcomeAuthFailure})
	require.NoError(t, err)
	for i, ch := range chans {
		select {
		case ev, ok := <-ch:
			require.True(t, ok, "watcher %d closed", i)
			assert.Equal(t, breaker.CauseAuth, ev.Cause)
		case <-ctx.Done():
			t.Fatalf("watcher %d got nothing", i)
		}
	}
	stopWatchers()
	for _, ch := range chans {
		for range ch { // drains, then closes once the watcher left
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for clients() > before {
		require.True(t, time.Now().Before(deadline), "the shared subscription is closed after the last watcher")
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSlowWatcherIsDropped(t *testing.T) {
	t.Parallel()
	_, rdb := redistest.Mini(t)
	st, err := store.New(rdb, store.Options{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	slow, err := st.Watch(ctx, "a")
	require.NoError(t, err)
	for range 300 { // more than a watcher may lag behind (one connection: each Force is one round trip)
		_, err := st.Force(ctx, "a", testID(1), breaker.ForcedOpen, 0, "ops", "")
		require.NoError(t, err)
	}
	n := 0
	for range slow {
		n++
	}
	assert.Less(t, n, 300, "the lagging watcher's channel closed instead of blocking the others")
}

func TestWatchedTransitionsCarryTheState(t *testing.T) {
	t.Parallel()
	_, rdb := redistest.Mini(t)
	st, err := store.New(rdb, store.Options{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, err := st.Watch(ctx, "a")
	require.NoError(t, err)
	c := store.Conn{Tenant: "a", ID: testID(2), Label: "openai gpt-4o"}
	res, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 30_000, HTTPStatus: 429})
	require.NoError(t, err)
	select {
	case ev := <-evs:
		require.NotNil(t, ev.State, "watchers need no read of their own")
		want, _, err := st.Get(ctx, "a", c.ID, 0)
		require.NoError(t, err)
		assert.Equal(t, want.State, ev.State.State)
		assert.Equal(t, "openai gpt-4o", ev.State.Label)
		assert.Equal(t, res.Revision, ev.State.State.Revision)
	case <-ctx.Done():
		t.Fatal("no event within 10s")
	}
}
