package store_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
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

// failHook fails the commands fail picks, before they reach Redis.
type failHook struct{ fail func(cmd redis.Cmder) bool }

func (h failHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h failHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.fail(cmd) {
			err := errors.New("injected failure")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (h failHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// countHook counts the commands a client sends, pipelined ones included.
type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func hasArg(cmd redis.Cmder, arg string) bool { return slices.Contains(cmd.Args(), any(arg)) }

// TestFailedIndexInsertLeavesNoHiddenConnection: issue 12 found a state
// that existed but was never listed when the index insert after the report
// script failed. The index is now written first: when it fails, nothing
// was created; when it succeeds, the connection is listed.
func TestFailedIndexInsertLeavesNoHiddenConnection(t *testing.T) {
	t.Parallel()
	_, rdb := redistest.Mini(t)
	st, err := store.New(rdb, store.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	c := store.Conn{Tenant: "t", ID: testID(1)}
	var failing atomic.Bool
	failing.Store(true)
	rdb.AddHook(failHook{fail: func(cmd redis.Cmder) bool { return failing.Load() && hasArg(cmd, "register") }})
	_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 60_000})
	require.Error(t, err)
	snap, _, err := st.Get(ctx, "t", c.ID, 0)
	require.NoError(t, err)
	assert.False(t, snap.Exists, "nothing exists that the index does not know")

	failing.Store(false)
	_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 60_000})
	require.NoError(t, err)
	snaps, _, err := st.List(ctx, "t", "", 10)
	require.NoError(t, err)
	require.Len(t, snaps, 1)
	assert.Equal(t, breaker.Open, snaps[0].State.Phase)
}

// TestLostIndexEntryHeals: an existing connection whose index entry is
// gone (data from before this layout, or a lost write) is indexed again
// the next time the sweeper looks at it.
func TestLostIndexEntryHeals(t *testing.T) {
	t.Parallel()
	m, rdb := redistest.Mini(t)
	clock := newMiniClock(m)
	st, err := store.New(rdb, store.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	c := store.Conn{Tenant: "t", ID: testID(2)}
	_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 60_000})
	require.NoError(t, err)
	require.NoError(t, rdb.ZRem(ctx, keys.Index("t"), c.ID.String()).Err())
	clock.advance(61 * time.Second) // the open's end brings the sweeper
	require.NoError(t, st.Sweep(ctx))
	snaps, _, err := st.List(ctx, "t", "", 10)
	require.NoError(t, err)
	require.Len(t, snaps, 1, "listed again")
	assert.Equal(t, breaker.HalfOpen, snaps[0].State.Phase)
}

// TestCapCostsConstantWork: issue 12 measured 20,000,794 EXISTS for 200
// reports on new ids past a cap of 100,000 (each walked the whole index).
// A rejected create now costs a fixed handful of commands whatever the
// tenant's size, and other tenants are untouched.
func TestCapCostsConstantWork(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	capN := sized(2000, 300)
	// A still clock: no registration's hold runs out while the index fills,
	// so nothing is due and the count is exactly the rejections' own.
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st, err := store.New(rdb, store.Options{MaxConnsPerTenant: capN, Clock: func() time.Time { return now }})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range capN {
		_, err := st.Report(ctx, store.Conn{Tenant: "t", ID: idOf(i)}, breaker.Report{Outcome: breaker.OutcomeSuccess})
		require.NoError(t, err)
	}
	var sent atomic.Int64
	rdb.AddHook(countHook{n: &sent})
	const rejected = 200
	start := time.Now()
	for i := range rejected {
		_, err := st.Report(ctx, store.Conn{Tenant: "t", ID: idOf(capN + i)}, breaker.Report{Outcome: breaker.OutcomeSuccess})
		require.ErrorIs(t, err, store.ErrTooManyConnections)
	}
	t.Logf("%d rejected creates at a cap of %d: %d commands, %s", rejected, capN, sent.Load(), time.Since(start))
	assert.Equal(t, int64(rejected*5), sent.Load(), "a rejected create costs 5 commands, whatever the index size")
	_, err = st.Report(ctx, store.Conn{Tenant: "u", ID: idOf(0)}, breaker.Report{Outcome: breaker.OutcomeSuccess})
	require.NoError(t, err, "the cap is per tenant")
}

func idOf(i int) keys.ID {
	var id keys.ID
	copy(id[:], strconv.Itoa(i))
	id[31] = 0xca
	return id
}

// TestTwoCreatesAtCapMinusOne: two replicas create a connection each at
// cap-1: exactly one gets the last place (before, both could be
// rejected).
func TestTwoCreatesAtCapMinusOne(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	st, err := store.New(rdb, store.Options{MaxConnsPerTenant: 2})
	require.NoError(t, err)
	other := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	t.Cleanup(func() { _ = other.Close() })
	st2, err := store.New(other, store.Options{MaxConnsPerTenant: 2})
	require.NoError(t, err)
	ctx := context.Background()
	for round := range 20 {
		tenant := "t" + strconv.Itoa(round)
		_, err := st.Report(ctx, store.Conn{Tenant: tenant, ID: idOf(0)}, breaker.Report{Outcome: breaker.OutcomeSuccess})
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, s := range []*store.Store{st, st2} {
			wg.Go(func() {
				_, errs[i] = s.Report(ctx, store.Conn{Tenant: tenant, ID: idOf(1 + i)}, breaker.Report{Outcome: breaker.OutcomeSuccess})
			})
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else {
				require.ErrorIs(t, err, store.ErrTooManyConnections)
			}
		}
		assert.Equal(t, 1, ok, "round %d: exactly one create takes the last place", round)
		n, err := st.Count(ctx, tenant)
		require.NoError(t, err)
		assert.Equal(t, int64(2), n)
	}
}

// TestRejectedConnectionPublishesNothing: a report past the cap that
// would open a connection publishes no event (the event of the next
// accepted change is the first one a watcher sees).
func TestRejectedConnectionPublishesNothing(t *testing.T) {
	t.Parallel()
	_, rdb := redistest.Mini(t)
	st, err := store.New(rdb, store.Options{MaxConnsPerTenant: 1})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = st.Report(ctx, store.Conn{Tenant: "t", ID: testID(1)}, breaker.Report{Outcome: breaker.OutcomeSuccess})
	require.NoError(t, err)
	evs, err := st.Watch(ctx, "t")
	require.NoError(t, err)
	_, err = st.Report(ctx, store.Conn{Tenant: "t", ID: testID(2)}, breaker.Report{Outcome: breaker.OutcomeAuthFailure})
	require.ErrorIs(t, err, store.ErrTooManyConnections)
	_, err = st.Report(ctx, store.Conn{Tenant: "t", ID: testID(1)}, breaker.Report{Outcome: breaker.OutcomeRateLimited})
	require.NoError(t, err)
	select {
	case ev := <-evs:
		assert.Equal(t, testID(1), ev.ID, "the rejected connection's event was published")
	case <-ctx.Done():
		t.Fatal("no event")
	}
}

// TestOverridesAndAdmitRespectTheCap: ForceConnection and Reset cannot
// create a connection past the cap, and Admit says so too for a new
// connection, as Report does; existing connections keep working.
func TestOverridesAndAdmitRespectTheCap(t *testing.T) {
	t.Parallel()
	_, rdb := redistest.Mini(t)
	st, err := store.New(rdb, store.Options{MaxConnsPerTenant: 1})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = st.Force(ctx, "t", testID(1), breaker.ForcedOpen, 0, "ops", "")
	require.NoError(t, err)
	_, err = st.Force(ctx, "t", testID(2), breaker.ForcedOpen, 0, "ops", "")
	require.ErrorIs(t, err, store.ErrTooManyConnections)
	_, err = st.Reset(ctx, "t", testID(2), "ops", "")
	require.ErrorIs(t, err, store.ErrTooManyConnections)
	_, err = st.Admit(ctx, store.Conn{Tenant: "t", ID: testID(2)})
	require.ErrorIs(t, err, store.ErrTooManyConnections, "Admit and Report agree on the cap")
	d, err := st.Admit(ctx, store.Conn{Tenant: "t", ID: testID(1)})
	require.NoError(t, err)
	assert.Equal(t, breaker.ReasonForcedOpen, d.Reason)
	_, err = st.Reset(ctx, "t", testID(1), "ops", "")
	require.NoError(t, err)
	n, err := st.Count(ctx, "t")
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
}
