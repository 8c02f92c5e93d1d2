package store_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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

// keyPolicy is fastPolicy with every count a report moves on: the
// failure-rate window, the retry budget's first attempts, the throttle's
// requests and accepts, the trip quorum's reporters.
func keyPolicy() breaker.Policy {
	p := fastPolicy()
	p.Jitter = 0
	p.FleetWindow = 10 * time.Second
	p.RetryBudget, p.RetryBudgetMin = 0.2, 1
	p.ThrottleK = 2
	p.TripQuorum = 2
	return p
}

// counts is what a report counts, read back from the store.
type counts struct {
	Successes, Failures, Consecutive   int64
	WindowCalls, WindowFails           int64
	Firsts, Requests, Accepts, Quorate int64
	Phase                              breaker.Phase
	Revision                           uint64
}

func countsOf(t *testing.T, st *store.Store, c store.Conn) counts {
	t.Helper()
	snap, _, err := st.Get(context.Background(), c.Tenant, c.ID, 0)
	require.NoError(t, err)
	s := snap.State
	return counts{
		Successes: s.Successes, Failures: s.Failures, Consecutive: int64(s.Consecutive),
		WindowCalls: s.Window.CurCalls, WindowFails: s.Window.CurFails,
		Firsts: s.Fleet.CurFirsts, Requests: s.Fleet.CurRequests, Accepts: s.Fleet.CurAccepts, Quorate: int64(len(s.Reporters)),
		Phase: s.Phase, Revision: s.Revision,
	}
}

// keyBackends are the Redis servers the report-key tests run on: real
// Redis, and miniredis (whose clock the test moves, so expiry is tested
// there without waiting).
func keyBackends(t *testing.T) map[string]func(t *testing.T, o store.Options) (*store.Store, redis.UniversalClient, *miniClock) {
	t.Helper()
	return map[string]func(t *testing.T, o store.Options) (*store.Store, redis.UniversalClient, *miniClock){
		"real": func(t *testing.T, o store.Options) (*store.Store, redis.UniversalClient, *miniClock) {
			rdb := redistest.Real(t)
			st, err := store.New(rdb, o)
			require.NoError(t, err)
			return st, rdb, nil
		},
		"mini": func(t *testing.T, o store.Options) (*store.Store, redis.UniversalClient, *miniClock) {
			m, rdb := redistest.Mini(t)
			st, err := store.New(rdb, o)
			require.NoError(t, err)
			return st, rdb, newMiniClock(m)
		},
	}
}

// TestReportResentIsCountedOnce: a report sent twice with one idempotency
// key (its first answer was lost, the client's queue sent it again) is
// applied and counted once, and its resend gets the first answer back; a
// key that names a different report is refused and changes nothing; a
// report without a key counts at every send, as before (the control that
// shows each case can see a second count). Failed on the code before the
// key: every resend was counted again.
func TestReportResentIsCountedOnce(t *testing.T) {
	t.Parallel()
	ok := breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200}
	fail := breaker.Report{Outcome: breaker.OutcomeTransientFailure, HTTPStatus: 503, Reporter: "proc-a"}
	cases := []struct {
		name string
		// prime runs before the report under test (a first success makes
		// the connection exist, so the next takes the fast path).
		prime bool
		rep   breaker.Report
		// key is the report's key; resend the one its second send carries.
		key, resend string
		// resendRep, when set, is what the second send says instead.
		resendRep *breaker.Report
		// twice: the second send counts again (no key, or another key).
		twice   bool
		reused  bool
		applied func(c counts) int64 // the count the report moves
	}{
		{name: "a success on the fast path", prime: true, rep: ok, key: "k-success-00000001", resend: "k-success-00000001",
			applied: func(c counts) int64 { return c.Successes }},
		{name: "a connection's first success (the full script creates it)", rep: ok, key: "k-created-00000001", resend: "k-created-00000001",
			applied: func(c counts) int64 { return c.Firsts }},
		{name: "a batch of 50 successes", prime: true, rep: breaker.Report{Outcome: breaker.OutcomeSuccess, Count: 50},
			key: "k-batch-000000001", resend: "k-batch-000000001",
			applied: func(c counts) int64 { return c.Requests }},
		{name: "a transient failure", prime: true, rep: fail, key: "k-failure-0000001", resend: "k-failure-0000001",
			applied: func(c counts) int64 { return c.Failures }},
		{name: "control: no key counts twice", prime: true, rep: fail, twice: true,
			applied: func(c counts) int64 { return c.Failures }},
		{name: "control: another key counts twice", prime: true, rep: fail, key: "k-first-00000001", resend: "k-second-0000001", twice: true,
			applied: func(c counts) int64 { return c.Failures }},
		{name: "a key reused for another outcome is refused", prime: true, rep: fail, key: "k-reused-00000001", resend: "k-reused-00000001",
			resendRep: &ok, reused: true, applied: func(c counts) int64 { return c.Failures }},
	}
	for name, open := range keyBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := keyPolicy()
			st, _, _ := open(t, store.Options{Policy: &p})
			ctx := context.Background()
			for i, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					c := store.Conn{Tenant: "t", ID: testID(0x70, byte(i)), ReportKey: tc.key}
					if tc.prime {
						_, err := st.Report(ctx, store.Conn{Tenant: c.Tenant, ID: c.ID}, ok)
						require.NoError(t, err)
					}
					before := countsOf(t, st, c)
					first, err := st.Report(ctx, c, tc.rep)
					require.NoError(t, err)
					require.False(t, first.Replayed)
					once := countsOf(t, st, c)
					require.Greater(t, tc.applied(once), tc.applied(before), "the first send counts")

					again := c
					again.ReportKey = tc.resend
					rep := tc.rep
					if tc.resendRep != nil {
						rep = *tc.resendRep
					}
					second, err := st.Report(ctx, again, rep)
					after := countsOf(t, st, c)
					switch {
					case tc.reused:
						require.ErrorIs(t, err, store.ErrReportKeyReused)
						assert.Equal(t, once, after, "a refused report changes nothing")
					case tc.twice:
						require.NoError(t, err)
						assert.False(t, second.Replayed)
						assert.Equal(t, 2*tc.applied(once)-tc.applied(before), tc.applied(after), "counted again")
					default:
						require.NoError(t, err)
						assert.True(t, second.Replayed, "the resend is answered from the key")
						second.Replayed = false
						assert.Equal(t, first, second, "the resend gets the first answer")
						assert.Equal(t, once, after, "a resend counts nothing: failure window, budget, throttle, quorum")
					}
				})
			}
		})
	}
}

// TestReportResentAfterItTripped: a failure whose report tripped the
// breaker, sent again, does not trip it a second time (nor count toward
// the next trip), and its resend carries the first answer's open, revision
// and events, so that the store schedules the open's end again.
func TestReportResentAfterItTripped(t *testing.T) {
	t.Parallel()
	for name, open := range keyBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := keyPolicy()
			p.TripQuorum = 0
			st, _, _ := open(t, store.Options{Policy: &p})
			ctx := context.Background()
			c := store.Conn{Tenant: "t", ID: testID(0x71)}
			fail := breaker.Report{Outcome: breaker.OutcomeTransientFailure}
			for range p.ConsecutiveFailures - 1 {
				_, err := st.Report(ctx, c, fail)
				require.NoError(t, err)
			}
			c.ReportKey = "k-trip-0000000001"
			first, err := st.Report(ctx, c, fail)
			require.NoError(t, err)
			require.Equal(t, breaker.Open, first.Phase)
			require.Len(t, first.Events, 1)
			opened := countsOf(t, st, c)
			second, err := st.Report(ctx, c, fail)
			require.NoError(t, err)
			assert.True(t, second.Replayed)
			assert.Equal(t, first.Revision, second.Revision)
			assert.Equal(t, first.Events, second.Events, "the first answer's transitions: the store schedules their wake again")
			assert.Equal(t, first.Now, second.Now, "the first answer's server time")
			assert.Equal(t, opened, countsOf(t, st, c), "not tripped or counted again")
		})
	}
}

// TestReportResentAfterTheStateMoved: a success taken by the fast path,
// sent again after another report opened the connection (so the resend
// goes to the full script), still gets its first answer and counts
// nothing: the two paths read one key.
func TestReportResentAfterTheStateMoved(t *testing.T) {
	t.Parallel()
	for name, open := range keyBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := keyPolicy()
			st, _, _ := open(t, store.Options{Policy: &p})
			ctx := context.Background()
			c := store.Conn{Tenant: "t", ID: testID(0x75)}
			ok := breaker.Report{Outcome: breaker.OutcomeSuccess}
			_, err := st.Report(ctx, c, ok)
			require.NoError(t, err)
			keyed := c
			keyed.ReportKey = "k-moved-00000001"
			first, err := st.Report(ctx, keyed, ok)
			require.NoError(t, err)
			_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 60_000})
			require.NoError(t, err)
			moved := countsOf(t, st, c)
			require.Equal(t, breaker.Open, moved.Phase)
			again, err := st.Report(ctx, keyed, ok)
			require.NoError(t, err)
			assert.True(t, again.Replayed)
			again.Replayed = false
			assert.Equal(t, first, again, "the first answer (closed, the old revision), not the state now")
			assert.Equal(t, moved, countsOf(t, st, c), "counted nothing")
		})
	}
}

// TestReportKeyRemembered: the key lives in the connection's hash slot
// for Options.ReportKeyTTL (default DefaultReportKeyTTL, at least the
// clients' queue max age of a minute) and is forgotten after it, so a
// report sent again later counts again; a report without a key writes
// no key.
func TestReportKeyRemembered(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{0, 5 * time.Minute} {
		for name, open := range keyBackends(t) {
			t.Run(name+"/"+ttl.String(), func(t *testing.T) {
				t.Parallel()
				p := keyPolicy()
				st, rdb, clock := open(t, store.Options{Policy: &p, ReportKeyTTL: ttl})
				ctx := context.Background()
				c := store.Conn{Tenant: "t", ID: testID(0x72)}
				fail := breaker.Report{Outcome: breaker.OutcomeTransientFailure}
				_, err := st.Report(ctx, c, fail)
				require.NoError(t, err)
				all := func() []string {
					ks, err := rdb.Keys(ctx, "cd:*").Result()
					require.NoError(t, err)
					return ks
				}
				l := keys.Layout{Tenant: c.Tenant, ID: c.ID}
				assert.NotContains(t, all(), l.Report("k-none-000000001"))
				n := len(all())

				c.ReportKey = "k-kept-000000001"
				_, err = st.Report(ctx, c, fail)
				require.NoError(t, err)
				k := l.Report(c.ReportKey)
				assert.Len(t, all(), n+1, "one key per report")
				assert.Contains(t, k, "{t:"+c.ID.String()+"}", "in the connection's hash tag: its Cluster slot")
				want := ttl
				if want == 0 {
					want = store.DefaultReportKeyTTL
				}
				left, err := rdb.PTTL(ctx, k).Result()
				require.NoError(t, err)
				assert.InDelta(t, want.Milliseconds(), left.Milliseconds(), 5000)
				assert.GreaterOrEqual(t, want, time.Minute, "at least the clients' report queue max age")
				if clock == nil {
					return // real Redis expires on wall time: miniredis shows the end
				}
				failures := countsOf(t, st, c).Failures
				clock.advance(want - time.Second)
				again, err := st.Report(ctx, c, fail)
				require.NoError(t, err)
				assert.True(t, again.Replayed, "still remembered just before the TTL")
				clock.advance(2 * time.Second)
				again, err = st.Report(ctx, c, fail)
				require.NoError(t, err)
				assert.False(t, again.Replayed, "forgotten after the TTL: applied again")
				assert.Equal(t, failures+1, countsOf(t, st, c).Failures)
			})
		}
	}
}

// TestReportKeyOnACluster: the report's key shares the connection's hash
// tag, so the script's three keys are one slot (no CROSSSLOT) wherever
// the connection's slot lives.
func TestReportKeyOnACluster(t *testing.T) {
	t.Parallel()
	rdb := redistest.Cluster(t)
	p := keyPolicy()
	st, err := store.New(rdb, store.Options{Policy: &p})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 8 { // connections in several slots
		c := store.Conn{Tenant: "t", ID: testID(0x73, byte(i)), ReportKey: "k-cluster-000000" + string(rune('a'+i))}
		fail := breaker.Report{Outcome: breaker.OutcomeTransientFailure}
		first, err := st.Report(ctx, c, fail)
		require.NoError(t, err)
		second, err := st.Report(ctx, c, fail)
		require.NoError(t, err)
		assert.True(t, second.Replayed)
		assert.Equal(t, first.Revision, second.Revision)
		assert.Equal(t, int64(1), countsOf(t, st, c).Failures)
	}
}

// TestReportKeyMemory measures what a remembered report costs Redis (the
// figure docs/benchmarks.md gives): MEMORY USAGE of one key (its name in
// the connection's hash tag, the first reply, the expiry), and used_memory
// over 2,000 remembered reports, with a bound so that the doc stays true.
func TestReportKeyMemory(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	p := keyPolicy()
	st, err := store.New(rdb, store.Options{Policy: &p})
	require.NoError(t, err)
	ctx := context.Background()
	c := store.Conn{Tenant: "default", ID: testID(0x74)}
	ok := breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200}
	_, err = st.Report(ctx, c, ok) // the connection exists: what follows is the keys alone
	require.NoError(t, err)
	used := func() int64 {
		info, err := rdb.Info(ctx, "memory").Result()
		require.NoError(t, err)
		for line := range strings.SplitSeq(info, "\r\n") {
			if v, found := strings.CutPrefix(line, "used_memory:"); found {
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err)
				return n
			}
		}
		t.Fatal("no used_memory in INFO memory")
		return 0
	}
	const n = 2000
	before := used()
	for i := range n {
		c.ReportKey = fmt.Sprintf("%022d", i) // 22 characters, as the clients' keys
		_, err := st.Report(ctx, c, ok)
		require.NoError(t, err)
	}
	perKey := float64(used()-before) / n
	one, err := rdb.MemoryUsage(ctx, keys.Layout{Tenant: c.Tenant, ID: c.ID}.Report(c.ReportKey)).Result()
	require.NoError(t, err)
	t.Logf("a remembered report: MEMORY USAGE %d bytes; used_memory %.0f bytes per key over %d", one, perKey, n)
	assert.Less(t, one, int64(256))
	assert.Less(t, perKey, 320.0)
}
