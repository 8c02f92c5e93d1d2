package store_test

import (
	"context"
	"sync"
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

// testClock is a virtual clock for the scripts (Options.Clock).
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock {
	return &testClock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// next receives one transition or fails after a generous bound (the
// sweep was already run: this only waits for pub/sub delivery).
func next(t *testing.T, ch <-chan store.Transition) store.Transition {
	t.Helper()
	select {
	case tr, ok := <-ch:
		require.True(t, ok, "watch closed")
		return tr
	case <-time.After(10 * time.Second):
		t.Fatal("no transition within 10s")
		return store.Transition{}
	}
}

// TestEndedOpenIsPublishedWithoutAdmit: a cooldown ends while nobody
// calls Admit. The sweep applies the half-open at the instant the open
// ended, records it and publishes it; readers then show that revision
// and a changedAt that stays put.
func TestEndedOpenIsPublishedWithoutAdmit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		redis func(testing.TB) redis.UniversalClient
	}{
		{"single", func(tb testing.TB) redis.UniversalClient { return redistest.Real(tb) }},
		{"cluster", func(tb testing.TB) redis.UniversalClient { return redistest.Cluster(tb) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			endedOpenIsPublished(t, tc.redis(t))
		})
	}
}

func endedOpenIsPublished(t *testing.T, rdb redis.UniversalClient) {
	clock := newTestClock()
	st, err := store.New(rdb, store.Options{Clock: clock.Now})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := st.Watch(ctx, "t")
	require.NoError(t, err)
	c := store.Conn{Tenant: "t", ID: testID(1)}
	start := clock.Now()
	_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 1000})
	require.NoError(t, err)
	opened := next(t, evs)
	require.Equal(t, breaker.Open, opened.To)

	clock.advance(1500 * time.Millisecond)
	require.NoError(t, st.Sweep(ctx))
	half := next(t, evs)
	assert.Equal(t, breaker.HalfOpen, half.To)
	assert.Equal(t, breaker.CauseOpenExpired, half.Cause)
	end := start.Add(time.Second).UnixMilli()
	assert.Equal(t, end, half.At, "stamped with the end of the open, not the sweep's time")
	require.NotNil(t, half.State)
	assert.Equal(t, half.Revision, half.State.State.Revision)

	for range 2 {
		clock.advance(time.Minute)
		snap, hist, err := st.Get(ctx, "t", c.ID, 10)
		require.NoError(t, err)
		require.NotEmpty(t, hist)
		assert.Equal(t, hist[0].Revision, snap.State.Revision, "the revision shown is in the history")
		assert.Equal(t, end, snap.State.ChangedAt, "changedAt does not move with reads")
		snaps, _, err := st.List(ctx, "t", "", 10)
		require.NoError(t, err)
		require.Len(t, snaps, 1)
		assert.Equal(t, snap.State, snaps[0].State)
	}
}

// TestTimedOverrideEndIsPublished: a forced open for a duration ends on
// its own; the sweep publishes it stamped with the override's end.
func TestTimedOverrideEndIsPublished(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	clock := newTestClock()
	st, err := store.New(rdb, store.Options{Clock: clock.Now})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := st.Watch(ctx, "t")
	require.NoError(t, err)
	id := testID(2)
	until := clock.Now().Add(10 * time.Minute).UnixMilli()
	_, err = st.Force(ctx, "t", id, breaker.ForcedOpen, 10*time.Minute, "ops", "maintenance")
	require.NoError(t, err)
	require.Equal(t, breaker.CauseForced, next(t, evs).Cause)
	clock.advance(9 * time.Minute)
	require.NoError(t, st.Sweep(ctx))
	clock.advance(2 * time.Minute)
	require.NoError(t, st.Sweep(ctx))
	ended := next(t, evs)
	assert.Equal(t, breaker.CauseForceExpired, ended.Cause)
	assert.Equal(t, breaker.HalfOpen, ended.To)
	assert.Equal(t, until, ended.At)
}

// TestSweeperPublishesWithinASecond runs two replicas' sweepers (Run, on
// their own schedule, real Redis): every open that ends is published once,
// by a sweep, with nobody calling Admit or Sweep, stamped with its end and
// before the scripts' clock has moved a second past it. The clock is the
// test's: it moves in 100 ms steps, and at each step the test waits for
// the events of every open ended by then (bounded by next's 10 s of wall
// time), so a loaded machine slows the test down instead of failing it,
// while a sweeper that does not publish still fails it. (On the wall clock
// it flaked: 2.2 s from an open's end to its event at load 25-30 on two
// cores, the delay of a starved sweeper, Redis and test goroutine, not of
// the sweep.)
func TestSweeperPublishesWithinASecond(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clock := newTestClock()
	var stores []*store.Store
	for range 2 {
		st, err := store.New(rdb, store.Options{Clock: clock.Now, SweepInterval: 100 * time.Millisecond, SweepLockTTL: time.Second})
		require.NoError(t, err)
		stores = append(stores, st)
	}
	evs, err := stores[0].Watch(ctx, "t")
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, st := range stores {
		wg.Go(func() { _ = st.Run(runCtx) })
	}
	defer func() { stop(); wg.Wait() }()
	const n = 20
	ends := map[keys.ID]int64{}
	for i := range n {
		id := testID(byte(i))
		retry := int64(200 + 10*i)
		ends[id] = clock.Now().UnixMilli() + retry
		_, err := stores[i%2].Report(ctx, store.Conn{Tenant: "t", ID: id},
			breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: retry})
		require.NoError(t, err)
	}
	seen := map[keys.ID]int{}
	due := func(now int64) int {
		k := 0
		for _, end := range ends {
			if end <= now {
				k++
			}
		}
		return k
	}
	for len(seen) < n {
		clock.advance(100 * time.Millisecond)
		now := clock.Now().UnixMilli()
		for len(seen) < due(now) {
			tr := next(t, evs)
			if tr.To != breaker.HalfOpen {
				continue
			}
			end, ok := ends[tr.ID]
			require.True(t, ok, "an open the test did not make: %+v", tr)
			seen[tr.ID]++
			assert.Equal(t, end, tr.At, "stamped with the open's end")
			assert.Less(t, now-tr.At, time.Second.Milliseconds(), "published within a second of its end")
		}
	}
	// Nothing is published twice (the other replica's sweep found nothing
	// due): a last open, published after the sweeps that could have
	// duplicated one, closes the list.
	last := testID(n)
	_, err = stores[0].Report(ctx, store.Conn{Tenant: "t", ID: last},
		breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 100})
	require.NoError(t, err)
	clock.advance(200 * time.Millisecond)
	for {
		tr := next(t, evs)
		if tr.To != breaker.HalfOpen {
			continue
		}
		if tr.ID == last {
			break
		}
		seen[tr.ID]++
	}
	assert.Equal(t, n, countOf(seen), "%d half-opens published for %d opens", countOf(seen), n)
	for id, k := range seen {
		assert.Equal(t, 1, k, "%s published %d times", id, k)
	}
}

func countOf(m map[keys.ID]int) int {
	n := 0
	for _, k := range m {
		n += k
	}
	return n
}

// TestSweepForgetsExpiredConnections: an expired connection leaves its
// tenant's index at the sweep, without a List.
func TestSweepForgetsExpiredConnections(t *testing.T) {
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
	clock.advance(30 * time.Minute)
	require.NoError(t, st.Sweep(ctx)) // the registrations' looks: all alive
	n, err := st.Count(ctx, "t")
	require.NoError(t, err)
	assert.Equal(t, int64(3), n)
	clock.advance(31 * time.Minute)
	require.NoError(t, st.Sweep(ctx))
	n, err = st.Count(ctx, "t")
	require.NoError(t, err)
	assert.Zero(t, n)
}

// TestReadsShowARecordedRevision: with no sweep and no Admit, a reader
// that finds an open ended shows the half-open with a revision that is in
// the history and a changedAt at the open's end, the same at every read.
func TestReadsShowARecordedRevision(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	clock := newTestClock()
	st, err := store.New(rdb, store.Options{Clock: clock.Now})
	require.NoError(t, err)
	ctx := context.Background()
	c := store.Conn{Tenant: "t", ID: testID(3)}
	end := clock.Now().Add(time.Second).UnixMilli()
	_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 1000})
	require.NoError(t, err)
	for range 3 {
		clock.advance(700 * time.Millisecond)
		snap, hist, err := st.Get(ctx, "t", c.ID, 10)
		require.NoError(t, err)
		if snap.State.Phase == breaker.Open {
			continue
		}
		require.NotEmpty(t, hist)
		assert.Equal(t, hist[0].Revision, snap.State.Revision, "the revision shown is in the history")
		assert.Equal(t, end, snap.State.ChangedAt, "changedAt is the open's end, whenever it is read")
	}
}
