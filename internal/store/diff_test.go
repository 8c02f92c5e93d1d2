package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// fastPolicy runs the whole machine in milliseconds.
func fastPolicy() breaker.Policy {
	return breaker.Policy{
		ConsecutiveFailures: 3, FailureRate: 0.5, MinCalls: 4, Window: time.Second,
		OpenBase: 100 * time.Millisecond, OpenMax: 1600 * time.Millisecond, Jitter: 0.3,
		RateLimitCooldown: 50 * time.Millisecond, OverloadFloor: 200 * time.Millisecond,
		QuotaBlock: 1500 * time.Millisecond, AuthBlock: time.Second, MaxProbes: 2, LeaseTTL: 300 * time.Millisecond,
	}
}

// fleetPolicy is fastPolicy with the fleet rules of variant v on: 0 none,
// 1 the retry budget, 2 the throttle and the trip quorum, 3 all of them in
// shadow mode. Their window is short enough for sequences to see it
// rotate and long enough for counts to build up.
func fleetPolicy(v uint64) breaker.Policy {
	p := fastPolicy()
	p.FleetWindow = 2 * time.Second
	// Extensions ask for 50-450 ms: some are cut (lease_ttl_max), or, in
	// every other sequence, none.
	if v%2 == 0 {
		p.LeaseTTLMax = 400 * time.Millisecond
	}
	switch v % 4 {
	case 1:
		p.RetryBudget, p.RetryBudgetMin = 0.3, 1
	case 2:
		p.ThrottleK, p.TripQuorum = 1.5, 2
	case 3:
		p.RetryBudget, p.RetryBudgetMin, p.ThrottleK, p.TripQuorum, p.Shadow = 0.25, 0, 2, 3, true
	}
	return p
}

// fleetSeen counts what the sequences exercised of the fleet rules, so
// that a test can require that each was reached.
type fleetSeen struct {
	budget, throttled, shadowed, blocked, counted atomic.Int64
}

// world drives the store and the model with the same operations.
type world struct {
	t      require.TestingT
	rng    *rand.Rand
	st     *store.Store
	rdb    redis.UniversalClient
	mini   *miniredis.Miniredis // nil on real Redis: lease expiry is emulated
	policy breaker.Policy
	seen   *fleetSeen
	now    int64
	nonce  string
	jitter int64
	// draws are the throttle's draws of a step's Admit, one per
	// candidate in order; drawn counts the store's calls for one, so that
	// a second draw for a candidate (in a later round) would be another
	// value than the model's.
	draws  [3]int64
	drawn  int
	conns  []store.Conn
	model  []*breaker.State
	events [][]breaker.Event
	tokens [][]string // every lease token granted per connection, live or not
	// keyed is the last report sent with an idempotency key, and its
	// answer: a later step may send it again (its answer was lost), which
	// the model does not see.
	keyed *keyedReport
}

type keyedReport struct {
	c   store.Conn
	rep breaker.Report
	got store.ReportResult
}

func newWorld(t require.TestingT, rdb redis.UniversalClient, mini *miniredis.Miniredis, seed uint64, tenant string,
	policy breaker.Policy, seen *fleetSeen) *world {
	w := &world{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b9)), rdb: rdb, mini: mini, policy: policy, seen: seen}
	w.now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).UnixMilli() + int64(seed%1000)*10_000
	opts := store.Options{Policy: &w.policy, Nonce: func() string { return w.nonce }, Jitter: func() int64 { return w.jitter },
		Draw: func() int64 { d := w.draws[w.drawn%len(w.draws)]; w.drawn++; return d }}
	if mini == nil {
		opts.Clock = func() time.Time { return time.UnixMilli(w.now) }
	} else {
		mini.SetTime(time.UnixMilli(w.now))
	}
	st, err := store.New(rdb, opts)
	require.NoError(t, err)
	w.st = st
	for i := range 2 {
		var id keys.ID
		id[0], id[1], id[31] = byte(seed), byte(seed>>8), byte(i)
		w.conns = append(w.conns, store.Conn{Tenant: tenant, ID: id, Label: "conn " + strconv.Itoa(i)})
		w.model = append(w.model, &breaker.State{})
		w.events = append(w.events, nil)
		w.tokens = append(w.tokens, nil)
	}
	return w
}

func (w *world) advance(d int64) {
	w.now += d
	if w.mini != nil {
		w.mini.SetTime(time.UnixMilli(w.now))
		w.mini.FastForward(time.Duration(d) * time.Millisecond)
	}
	// Real Redis: nothing to do. Leases, opens and overrides end by the
	// expiries stored in the state, judged against the scripts' clock
	// (here the virtual one); key TTLs only collect garbage.
}

func (w *world) step(ctx context.Context, k int) string {
	i := w.rng.IntN(len(w.conns))
	c, m := w.conns[i], w.model[i]
	w.nonce = "n" + strconv.Itoa(k)
	w.jitter = w.rng.Int64N(1_000_000)
	for j := range w.draws {
		w.draws[j] = w.rng.Int64N(1_000_000)
	}
	w.drawn = 0
	switch op := w.rng.IntN(100); {
	case op < 8:
		return w.admitFirst(ctx)
	case op < 30:
		c.Retry = w.rng.IntN(3) == 0
		got, err := w.st.Admit(ctx, c)
		require.NoError(w.t, err)
		want, evs := m.Admit(w.policy, w.now, w.attempt(c, 0))
		w.events[i] = append(w.events[i], evs...)
		desc := fmt.Sprintf("admit %d retry %v draw %d → %+v", i, c.Retry, w.draws[0], want)
		require.Equal(w.t, shapes(evs), shapes(got.Events), desc)
		w.sameVerdict(want, got, m, desc)
		if want.Decision == breaker.Deny {
			require.Positive(w.t, got.RetryAfter, desc)
		}
		if want.Lease != nil {
			require.Equal(w.t, want.Lease.Token, got.LeaseToken, desc)
			require.Equal(w.t, want.Lease.Expires, got.LeaseExpires.UnixMilli(), desc)
			w.tokens[i] = append(w.tokens[i], got.LeaseToken)
		}
		return desc
	case op < 75 && w.keyed != nil && w.rng.IntN(8) == 0:
		// The client's queue sends a keyed report again: answered as the
		// first was, and counted nothing (check compares the state).
		k := w.keyed
		again, err := w.st.Report(ctx, k.c, k.rep)
		require.NoError(w.t, err)
		desc := fmt.Sprintf("resend %s %+v", k.c.ReportKey, k.rep)
		require.True(w.t, again.Replayed, desc)
		again.Replayed = false
		require.Equal(w.t, k.got, again, desc)
		return desc
	case op < 75:
		rep := breaker.Report{Outcome: pickOutcome(w.rng), HTTPStatus: 200 + w.rng.IntN(400), ErrorCode: "e" + strconv.Itoa(w.rng.IntN(3))}
		switch w.rng.IntN(6) {
		case 0, 1, 2, 3:
			rep.Revision = m.Revision
		case 4:
			rep.Revision = uint64(w.rng.IntN(int(m.Revision) + 1))
		default:
			rep.Revision = m.Revision + 1
		}
		if n := len(w.tokens[i]); n > 0 && w.rng.IntN(2) == 0 {
			rep.LeaseToken = w.tokens[i][n-1-w.rng.IntN(min(n, 3))]
		}
		if w.rng.IntN(12) == 0 {
			rep.RetryAfter = []int64{1, 40, 250, 5000}[w.rng.IntN(4)]
		}
		if rep.Outcome == breaker.OutcomeSuccess && w.rng.IntN(4) == 0 {
			rep.Count = 1 + w.rng.Int64N(50) // a client's batch of successes
		}
		rep.Retry = w.rng.IntN(4) == 0
		rep.Reporter = []string{"", "r1", "r2", "r3", "pod-7.a_b"}[w.rng.IntN(5)]
		if w.rng.IntN(3) == 0 {
			c.ReportKey = fmt.Sprintf("diff-key-%08d", k)
		}
		got, err := w.st.Report(ctx, c, rep)
		require.NoError(w.t, err)
		if c.ReportKey != "" {
			w.keyed = &keyedReport{c: c, rep: rep, got: got}
		}
		closed := m.Phase <= breaker.Closed && m.Override == breaker.NoOverride
		want, evs := m.Report(w.policy, w.now, rep, float64(w.jitter)/1e6)
		w.events[i] = append(w.events[i], evs...)
		desc := fmt.Sprintf("report %d %+v → %+v", i, rep, want)
		require.Equal(w.t, shapes(evs), shapes(got.Events), desc)
		require.Equal(w.t, want, got.ReportResult, desc)
		require.Equal(w.t, m.Revision, got.Revision, desc)
		require.Equal(w.t, w.throttle(m), got.ThrottleProbability, desc)
		if closed && want.Accepted && rep.Outcome == breaker.OutcomeTransientFailure && len(evs) == 0 &&
			w.policy.ConsecutiveFailures > 0 && m.Consecutive >= w.policy.ConsecutiveFailures {
			w.seen.blocked.Add(1) // the trip rule fired; the quorum held it back
		}
		return desc
	case op < 82:
		tok := "0.0.0.x"
		if n := len(w.tokens[i]); n > 0 {
			tok = w.tokens[i][n-1]
		}
		ttl := int64(50 + w.rng.IntN(400))
		got, err := w.st.ExtendLease(ctx, c, tok, time.Duration(ttl)*time.Millisecond)
		want, evs, werr := m.ExtendLease(w.now, tok, w.policy.LeaseExtension(ttl))
		w.events[i] = append(w.events[i], evs...)
		desc := fmt.Sprintf("extend %d %s", i, tok)
		if werr != nil {
			require.ErrorIs(w.t, err, store.ErrLeaseNotHeld, desc)
		} else {
			require.NoError(w.t, err, desc)
			require.Equal(w.t, want.Expires, got.UnixMilli(), desc)
		}
		return desc
	case op < 86:
		o := breaker.Override(w.rng.IntN(3))
		var d, u int64
		if w.rng.IntN(2) == 0 {
			d = int64(100 + w.rng.IntN(900))
			u = w.now + d
		}
		_, err := w.st.Force(ctx, c.Tenant, c.ID, o, time.Duration(d)*time.Millisecond, "alice", "test")
		require.NoError(w.t, err)
		w.events[i] = append(w.events[i], m.Force(w.now, o, u, "alice", "test")...)
		return fmt.Sprintf("force %d %d until %d", i, o, u)
	case op < 88:
		_, err := w.st.Reset(ctx, c.Tenant, c.ID, "bob", "test")
		require.NoError(w.t, err)
		w.events[i] = append(w.events[i], m.Reset(w.now, "bob", "test")...)
		return fmt.Sprintf("reset %d", i)
	default:
		d := []int64{1, 7, 49, 120, 333, 1200}[w.rng.IntN(6)]
		w.advance(d)
		return fmt.Sprintf("advance %d", d)
	}
}

// admitFirst admits both connections as candidates, in a random order,
// against the model's Admit of each in turn up to the first admitted one
// (on a Cluster their slots differ: the pipelined rounds).
func (w *world) admitFirst(ctx context.Context) string {
	order := []int{0, 1}
	if w.rng.IntN(2) == 0 {
		order = []int{1, 0}
	}
	cands := []store.Conn{w.conns[order[0]], w.conns[order[1]]}
	for j := range cands {
		cands[j].Retry = w.rng.IntN(3) == 0
	}
	idx, got, err := w.st.AdmitFirst(ctx, cands)
	require.NoError(w.t, err)
	wantIdx := 0
	var want []breaker.Verdict
	for j, i := range order {
		v, evs := w.model[i].Admit(w.policy, w.now, w.attempt(cands[j], j))
		w.events[i] = append(w.events[i], evs...)
		want = append(want, v)
		desc := fmt.Sprintf("admit first %v: candidate %d retry %v draw %d → %+v", order, j, cands[j].Retry, w.draws[j], v)
		require.Greater(w.t, len(got), j, desc)
		require.Equal(w.t, shapes(evs), shapes(got[j].Events), desc)
		w.sameVerdict(v, got[j], w.model[i], desc)
		if v.Lease != nil {
			require.Equal(w.t, v.Lease.Token, got[j].LeaseToken, desc)
			w.tokens[i] = append(w.tokens[i], got[j].LeaseToken)
		}
		if v.Decision != breaker.Deny {
			wantIdx = j
			break
		}
		if v.RetryAfter < want[wantIdx].RetryAfter {
			wantIdx = j
		}
	}
	desc := fmt.Sprintf("admit first %v → %+v", order, want)
	require.Len(w.t, got, len(want), desc)
	require.Equal(w.t, wantIdx, idx, desc)
	return desc
}

// attempt is the model's Attempt for an Admit of c, the j-th candidate,
// at this step (the store's nonce and the candidate's draw).
func (w *world) attempt(c store.Conn, j int) breaker.Attempt {
	return breaker.Attempt{Nonce: w.nonce, Retry: c.Retry, Draw: float64(w.draws[j]) / 1e6}
}

// throttle is the throttle probability in effect that the store reports
// after an operation on m: the model's, while closed with no override.
func (w *world) throttle(m *breaker.State) float64 {
	if m.Phase > breaker.Closed || m.Override != breaker.NoOverride {
		return 0
	}
	return m.ThrottleProbability(w.policy, w.now)
}

// sameVerdict requires the store's decision to be the model's verdict,
// and counts the fleet rules it shows.
func (w *world) sameVerdict(want breaker.Verdict, got store.Decision, m *breaker.State, desc string) {
	require.Equal(w.t, want.Decision, got.Decision, desc)
	require.Equal(w.t, want.Reason, got.Reason, desc)
	require.Equal(w.t, want.Revision, got.Revision, desc)
	require.Equal(w.t, want.Phase, got.Phase, desc)
	require.Equal(w.t, want.RetryAfter, got.RetryAfter, desc)
	require.Equal(w.t, want.Shadowed, got.Shadowed, desc)
	require.Equal(w.t, want.ShadowRetryAfter, got.ShadowRetryAfter, desc)
	require.Equal(w.t, w.throttle(m), got.ThrottleProbability, desc)
	for _, r := range []breaker.DenyReason{want.Reason, want.Shadowed} {
		switch r {
		case breaker.ReasonRetryBudget:
			w.seen.budget.Add(1)
		case breaker.ReasonThrottled:
			w.seen.throttled.Add(1)
		}
	}
	if want.Shadowed != breaker.ReasonNone {
		w.seen.shadowed.Add(1)
	}
	if got.ThrottleProbability > 0 {
		w.seen.counted.Add(1)
	}
}

// check compares the store's view of every connection with the model's.
// Get applies a due timed transition (and records it), so the model
// settles too: both then hold the same events.
func (w *world) check(ctx context.Context, desc string) {
	for i, c := range w.conns {
		snap, hist, err := w.st.Get(ctx, c.Tenant, c.ID, 50)
		require.NoError(w.t, err)
		m := w.model[i]
		evs := m.Settle(w.now)
		w.events[i] = append(w.events[i], evs...)
		require.Equal(w.t, shapes(evs), shapes(snap.Events), "Get of %d after %s", i, desc)
		want := cloneState(m)
		got := snap.State
		if want.Phase == 0 {
			want.Phase = breaker.Closed
		}
		slices.SortFunc(want.Leases, func(a, b breaker.Lease) int { return a.Slot - b.Slot })
		if len(want.Leases) == 0 {
			want.Leases = nil
		}
		require.Equal(w.t, want, got, "connection %d after %s", i, desc)
		all := w.events[i]
		require.Len(w.t, hist, min(len(all), 50), "history of %d after %s", i, desc)
		for j, h := range hist {
			require.Equal(w.t, all[len(all)-1-j], h.Event, "history[%d] of %d after %s", j, i, desc)
		}
		if len(all) > 0 {
			require.Equal(w.t, all[len(all)-1].Revision, got.Revision, "the revision shown is the history's newest of %d after %s", i, desc)
		}
	}
}

// pickOutcome favours the outcomes that drive the breaker itself, so that
// sequences reach trips, probes and recoveries, not only long blocks.
func pickOutcome(rng *rand.Rand) breaker.Outcome {
	weights := []struct {
		o breaker.Outcome
		w int
	}{
		{breaker.OutcomeSuccess, 37}, {breaker.OutcomeTransientFailure, 35}, {breaker.OutcomeClientError, 7},
		{breaker.OutcomeCanceled, 7}, {breaker.OutcomeRateLimited, 4}, {breaker.OutcomeOverloaded, 4},
		{breaker.OutcomeQuotaExhausted, 2}, {breaker.OutcomeAuthFailure, 4},
	}
	n := rng.IntN(100)
	for _, x := range weights {
		if n < x.w {
			return x.o
		}
		n -= x.w
	}
	return breaker.OutcomeSuccess
}

// shapes keeps what the scripts return of events: from, to, cause.
func shapes(evs []breaker.Event) []breaker.Event {
	var out []breaker.Event
	for _, e := range evs {
		out = append(out, breaker.Event{From: e.From, To: e.To, Cause: e.Cause})
	}
	return out
}

func cloneState(s *breaker.State) breaker.State {
	c := *s
	c.Leases = slices.Clone(s.Leases)
	return c
}

// seqT collects a sequence's failure for runDifferential's workers;
// FailNow ends the worker's goroutine, as testing.T's does.
type seqT struct {
	mu   sync.Mutex
	msgs []string
}

func (s *seqT) Errorf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, fmt.Sprintf(format, args...))
}

func (s *seqT) FailNow() { runtime.Goexit() }

// runDifferential runs seqs independent sequences (their own ids) on
// several workers at once on real Redis (each world has its own virtual
// clock): each sequence's steps stay in order, and the workers overlap
// their round trips. A miniredis has one clock for all: one worker.
func runDifferential(t *testing.T, rdb redis.UniversalClient, mini *miniredis.Miniredis, seqs, steps int) *fleetSeen {
	workers := 8
	if mini != nil {
		workers = 1
	}
	ctx := context.Background()
	var next atomic.Int64
	failed := &seqT{}
	seen := &fleetSeen{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				seq := int(next.Add(1) - 1)
				failed.mu.Lock()
				stop := len(failed.msgs) > 0
				failed.mu.Unlock()
				if seq >= seqs || stop {
					return
				}
				w := newWorld(failed, rdb, mini, uint64(seq)+1, "t"+strconv.Itoa(seq%3), fleetPolicy(uint64(seq)), seen)
				var trail []string
				for k := range steps {
					desc := w.step(ctx, k)
					trail = append(trail, desc)
					if len(trail) > 8 {
						trail = trail[1:]
					}
					w.check(ctx, fmt.Sprintf("seq %d step %d: %q", seq, k, trail))
				}
			}
		})
	}
	wg.Wait()
	if len(failed.msgs) > 0 {
		t.Fatal(strings.Join(failed.msgs, "\n"))
	}
	return seen
}

// sized is n sequences, or underRace under the race detector.
func sized(n, underRace int) int {
	if raceEnabled {
		return underRace
	}
	return n
}

func TestDifferentialMiniredis(t *testing.T) {
	t.Parallel()
	m, c := redistest.Mini(t)
	runDifferential(t, c, m, sized(100, 2), 60)
}

// TestDifferentialReachesTheFleetRules: the sequences do exercise every
// fleet rule (policies vary by sequence, see fleetPolicy), so that the
// differential tests compare them rather than pass by never meeting
// them: retry-budget and throttle denials, shadow allows, a trip the
// quorum held back, a throttle probability above 0.
func TestDifferentialReachesTheFleetRules(t *testing.T) {
	t.Parallel()
	c := redistest.Real(t)
	seen := runDifferential(t, c, nil, 96, 120)
	for name, n := range map[string]int64{
		"retry budget": seen.budget.Load(), "throttled": seen.throttled.Load(), "shadowed": seen.shadowed.Load(),
		"trip held by the quorum": seen.blocked.Load(), "throttle above 0": seen.counted.Load(),
	} {
		t.Logf("%s: %d", name, n)
		require.Positive(t, n, "no sequence reached: %s", name)
	}
}

func TestDifferentialRealRedis(t *testing.T) {
	t.Parallel()
	c := redistest.Real(t)
	runDifferential(t, c, nil, sized(1000, 30), 60)
}

func TestDifferentialCluster(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	runDifferential(t, c, nil, sized(200, 8), 60)
}
