package breaker

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Policy tweaks shared by the tables.
var (
	consecutiveOnly = func(p *Policy) { p.FailureRate = 0 }
	rateOnly        = func(p *Policy) { p.ConsecutiveFailures = 0 }
	noTripRules     = func(p *Policy) { p.ConsecutiveFailures, p.FailureRate = 0, 0 }
	twoProbes       = func(p *Policy) { p.MaxProbes = 2 }
)

func accepted(changed bool) *ReportResult { return &ReportResult{Accepted: true, Changed: changed} }
func stale(changed bool) *ReportResult    { return &ReportResult{Accepted: false, Changed: changed} }

func TestClosedTripsOnConsecutiveFailures(t *testing.T) {
	t.Parallel()
	runTransitions(t, []transitionCase{
		{
			name:   "N-1 failures do not trip",
			policy: consecutiveOnly,
			given:  State{Phase: Closed, Revision: 3, Consecutive: 3, Failures: 3},
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeTransientFailure, HTTPStatus: 503, ErrorCode: "unavailable"}),
			want:   State{Phase: Closed, Revision: 3, Consecutive: 4, Failures: 4},
			result: accepted(false),
		},
		{
			name:   "the Nth failure trips for OpenBase",
			policy: consecutiveOnly,
			given:  State{Phase: Closed, Revision: 3, Consecutive: 4, Failures: 4, Successes: 7},
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeTransientFailure, HTTPStatus: 500}),
			want:   State{Phase: Open, Cause: CauseBreaker, Revision: 4, OpenUntil: n + 10_000, Reopens: 1},
			events: []Event{ev(Closed, Open, CauseBreaker, 4)},
			result: accepted(true),
		},
		{
			name:   "a success in between resets the run",
			policy: consecutiveOnly,
			given:  State{Phase: Closed, Revision: 3, Consecutive: 4, Failures: 4},
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeSuccess, HTTPStatus: 200}),
			want:   State{Phase: Closed, Revision: 3, Consecutive: 0, Failures: 4, Successes: 1},
			result: accepted(false),
		},
		{
			name:   "the first failure after a reset run does not trip",
			policy: consecutiveOnly,
			given:  State{Phase: Closed, Revision: 3, Consecutive: 0, Failures: 4, Successes: 1},
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Closed, Revision: 3, Consecutive: 1, Failures: 5, Successes: 1},
			result: accepted(false),
		},
		{
			name:   "disabled by 0",
			policy: noTripRules,
			given:  State{Phase: Closed, Revision: 3, Consecutive: 99, Failures: 99},
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Closed, Revision: 3, Consecutive: 100, Failures: 100},
			result: accepted(false),
		},
		{
			name:   "counters saturate at MaxCount",
			policy: noTripRules,
			given:  State{Phase: Closed, Revision: 3, Consecutive: MaxCount, Failures: MaxCount},
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Closed, Revision: 3, Consecutive: MaxCount, Failures: MaxCount},
			result: accepted(false),
		},
		{
			name:   "the zero state is closed at revision 0 and counts",
			policy: consecutiveOnly,
			given:  State{},
			now:    n,
			do:     reportOp(Report{Revision: 0, Outcome: OutcomeTransientFailure}),
			want:   State{Consecutive: 1, Failures: 1},
			result: accepted(false),
		},
	})
}

// TestConsecutiveRunIsBrokenBySuccess walks 4 failures, a success, 4
// failures (still closed), then the 5th failure in a row trips.
func TestConsecutiveRunIsBrokenBySuccess(t *testing.T) {
	t.Parallel()
	p := testPolicy()
	p.FailureRate = 0
	var s State
	const f, ok = OutcomeTransientFailure, OutcomeSuccess
	fail := Report{Outcome: f}
	for i, o := range []Outcome{f, f, f, f, ok, f, f, f, f} {
		_, evs := s.Report(p, n+int64(i), Report{Outcome: o}, 0)
		require.Empty(t, evs, "report %d", i)
	}
	assert.Equal(t, Phase(0), s.Phase)
	assert.Equal(t, 4, s.Consecutive)
	_, evs := s.Report(p, n+9, fail, 0)
	require.Len(t, evs, 1)
	assert.Equal(t, Open, s.Phase)
}

func TestClosedTripsOnFailureRate(t *testing.T) {
	t.Parallel()
	// rateOnly: 50 % over a 60 s window once 20 (weighted) calls are seen.
	const w = 60_000
	runTransitions(t, []transitionCase{
		{
			name:   "below MinCalls never trips, even at 100 %",
			policy: rateOnly,
			given:  State{Phase: Closed, Revision: 2, Window: Window{Start: t0, CurCalls: 18, CurFails: 18}},
			now:    n,
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Closed, Revision: 2, Consecutive: 1, Failures: 1, Window: Window{Start: t0, CurCalls: 19, CurFails: 19}},
			result: accepted(false),
		},
		{
			name:   "trips once MinCalls is reached at the threshold",
			policy: rateOnly,
			given:  State{Phase: Closed, Revision: 2, Window: Window{Start: t0, CurCalls: 19, CurFails: 9}},
			now:    n,
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Open, Cause: CauseBreaker, Revision: 3, OpenUntil: n + 10_000, Reopens: 1},
			events: []Event{ev(Closed, Open, CauseBreaker, 3)},
			result: accepted(true),
		},
		{
			name:   "stays closed just below the threshold",
			policy: rateOnly,
			given:  State{Phase: Closed, Revision: 2, Window: Window{Start: t0, CurCalls: 19, CurFails: 8}},
			now:    n,
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Closed, Revision: 2, Consecutive: 1, Failures: 1, Window: Window{Start: t0, CurCalls: 20, CurFails: 9}},
			result: accepted(false),
		},
		{
			name:   "a success is counted in the window",
			policy: rateOnly,
			given:  State{Phase: Closed, Revision: 2},
			now:    n,
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeSuccess}),
			want:   State{Phase: Closed, Revision: 2, Successes: 1, Window: Window{Start: t0, CurCalls: 1}},
			result: accepted(false),
		},
		{
			name:   "the current bucket rotates into the previous one",
			policy: rateOnly,
			given:  State{Phase: Closed, Revision: 2, Window: Window{Start: t0, CurCalls: 30, CurFails: 10}},
			now:    t0 + w + 30_000, // previous weighs 1/2: 15 + 1 calls < 20
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeTransientFailure}),
			want: State{Phase: Closed, Revision: 2, Consecutive: 1, Failures: 1,
				Window: Window{Start: t0 + w, PrevCalls: 30, PrevFails: 10, CurCalls: 1, CurFails: 1}},
			result: accepted(false),
		},
		{
			name:   "the previous bucket counts in full at the start of a bucket",
			policy: rateOnly,
			given:  State{Phase: Closed, Revision: 2, Window: Window{Start: t0, CurCalls: 30, CurFails: 20}},
			now:    t0 + w, // 31 calls, 21 failures
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Open, Cause: CauseBreaker, Revision: 3, OpenUntil: t0 + w + 10_000, Reopens: 1},
			events: []Event{ev(Closed, Open, CauseBreaker, 3)},
			result: accepted(true),
		},
		{
			name:   "the previous bucket weighted 3/4 trips",
			policy: rateOnly,
			given:  State{Phase: Closed, Revision: 2, Window: Window{Start: t0 + w, PrevCalls: 20, PrevFails: 20, CurCalls: 4}},
			now:    t0 + w + 15_000, // 20·¾ + 5 = 20 calls, 20·¾ + 1 = 16 failures
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Open, Cause: CauseBreaker, Revision: 3, OpenUntil: t0 + w + 25_000, Reopens: 1},
			events: []Event{ev(Closed, Open, CauseBreaker, 3)},
			result: accepted(true),
		},
		{
			name:   "the same previous bucket weighted 1/4 is below MinCalls",
			policy: rateOnly,
			given:  State{Phase: Closed, Revision: 2, Window: Window{Start: t0 + w, PrevCalls: 20, PrevFails: 20, CurCalls: 4}},
			now:    t0 + w + 45_000, // 20·¼ + 5 = 10 calls < 20
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeTransientFailure}),
			want: State{Phase: Closed, Revision: 2, Consecutive: 1, Failures: 1,
				Window: Window{Start: t0 + w, PrevCalls: 20, PrevFails: 20, CurCalls: 5, CurFails: 1}},
			result: accepted(false),
		},
		{
			name:   "old successes weigh in full at the start of a bucket",
			policy: func(p *Policy) { rateOnly(p); p.MinCalls = 10 },
			given:  State{Phase: Closed, Revision: 2, Window: Window{Start: t0 + w, PrevCalls: 20, CurCalls: 11, CurFails: 11}},
			now:    t0 + w, // 20 + 12 calls, 12 failures: 37.5 %
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeTransientFailure}),
			want: State{Phase: Closed, Revision: 2, Consecutive: 1, Failures: 1,
				Window: Window{Start: t0 + w, PrevCalls: 20, CurCalls: 12, CurFails: 12}},
			result: accepted(false),
		},
		{
			name:   "old successes fade with their overlap",
			policy: func(p *Policy) { rateOnly(p); p.MinCalls = 10 },
			given:  State{Phase: Closed, Revision: 2, Window: Window{Start: t0 + w, PrevCalls: 20, CurCalls: 11, CurFails: 11}},
			now:    t0 + w + 45_000, // 20·¼ + 12 = 17 calls, 12 failures: 70 %
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Open, Cause: CauseBreaker, Revision: 3, OpenUntil: t0 + w + 55_000, Reopens: 1},
			events: []Event{ev(Closed, Open, CauseBreaker, 3)},
			result: accepted(true),
		},
		{
			name:   "old failures weigh in full at the start of a bucket",
			policy: func(p *Policy) { rateOnly(p); p.MinCalls = 10 },
			given:  State{Phase: Closed, Revision: 2, Window: Window{Start: t0 + w, PrevCalls: 20, PrevFails: 20, CurCalls: 19}},
			now:    t0 + w, // 20 + 20 calls, 20 + 1 failures: 52.5 %
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Open, Cause: CauseBreaker, Revision: 3, OpenUntil: t0 + w + 10_000, Reopens: 1},
			events: []Event{ev(Closed, Open, CauseBreaker, 3)},
			result: accepted(true),
		},
		{
			name:   "old failures fade with their overlap",
			policy: func(p *Policy) { rateOnly(p); p.MinCalls = 10 },
			given:  State{Phase: Closed, Revision: 2, Window: Window{Start: t0 + w, PrevCalls: 20, PrevFails: 20, CurCalls: 19}},
			now:    t0 + w + 45_000, // 20·¼ + 20 = 25 calls, 20·¼ + 1 = 6 failures: 24 %
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeTransientFailure}),
			want: State{Phase: Closed, Revision: 2, Consecutive: 1, Failures: 1,
				Window: Window{Start: t0 + w, PrevCalls: 20, PrevFails: 20, CurCalls: 20, CurFails: 1}},
			result: accepted(false),
		},
		{
			name:   "a bucket two windows old is forgotten",
			policy: rateOnly,
			given:  State{Phase: Closed, Revision: 2, Window: Window{Start: t0, CurCalls: 40, CurFails: 40}},
			now:    t0 + 2*w,
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Closed, Revision: 2, Consecutive: 1, Failures: 1, Window: Window{Start: t0 + 2*w, CurCalls: 1, CurFails: 1}},
			result: accepted(false),
		},
		{
			name:   "rotation drops the bucket before the previous one",
			policy: rateOnly,
			given:  State{Phase: Closed, Revision: 2, Window: Window{Start: t0, PrevCalls: 50, PrevFails: 50}},
			now:    t0 + w,
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Closed, Revision: 2, Consecutive: 1, Failures: 1, Window: Window{Start: t0 + w, CurCalls: 1, CurFails: 1}},
			result: accepted(false),
		},
		{
			name:   "window counters saturate at MaxCount",
			policy: func(p *Policy) { p.ConsecutiveFailures, p.FailureRate, p.MinCalls = 0, 1, MaxCount },
			given:  State{Phase: Closed, Revision: 2, Window: Window{Start: t0, CurCalls: MaxCount, CurFails: MaxCount - 1}},
			now:    n,
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Open, Cause: CauseBreaker, Revision: 3, OpenUntil: n + 10_000, Reopens: 1},
			events: []Event{ev(Closed, Open, CauseBreaker, 3)},
			result: accepted(true),
		},
		{
			name:   "disabled by 0: nothing is counted",
			policy: noTripRules,
			given:  State{Phase: Closed, Revision: 2, Window: Window{Start: t0, CurCalls: 19, CurFails: 19}},
			now:    n,
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Closed, Revision: 2, Consecutive: 1, Failures: 1, Window: Window{Start: t0, CurCalls: 19, CurFails: 19}},
			result: accepted(false),
		},
	})
}

func TestBreakerOpenGrows(t *testing.T) {
	t.Parallel()
	// A probe failure re-opens for the next duration of 10 s, 20 s, 40 s, …
	// capped at 5 min; the re-open count saturates at MaxReopens.
	growth := []struct {
		name        string
		reopens     int
		wantMs      int64
		wantReopens int
	}{
		{"1st open 10s", 0, 10_000, 1},
		{"2nd open 20s", 1, 20_000, 2},
		{"3rd open 40s", 2, 40_000, 3},
		{"4th open 80s", 3, 80_000, 4},
		{"5th open 160s", 4, 160_000, 5},
		{"6th open capped at OpenMax", 5, 300_000, 6},
		{"7th open stays at OpenMax", 6, 300_000, 7},
		{"re-open count saturates at MaxReopens", MaxReopens, 300_000, MaxReopens},
	}
	var cases []transitionCase
	for _, g := range growth {
		l := lease(10, 0, t0)
		cases = append(cases, transitionCase{
			name:   g.name,
			given:  State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 10, Reopens: g.reopens, Leases: []Lease{l}},
			now:    n,
			do:     reportOp(Report{Revision: 10, LeaseToken: l.Token, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Open, Cause: CauseBreaker, Revision: 11, OpenUntil: n + g.wantMs, Reopens: g.wantReopens},
			events: []Event{ev(HalfOpen, Open, CauseBreaker, 11)},
			result: accepted(true),
		})
	}
	l := lease(10, 0, t0)
	cases = append(cases,
		transitionCase{
			name:   "a probe success resets the growth",
			given:  State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 10, Reopens: 4, Leases: []Lease{l}},
			now:    n,
			do:     reportOp(Report{Revision: 10, LeaseToken: l.Token, Outcome: OutcomeSuccess}),
			want:   State{Phase: Closed, Cause: CauseProbeSuccess, Revision: 11},
			events: []Event{ev(HalfOpen, Closed, CauseProbeSuccess, 11)},
			result: accepted(true),
		},
		transitionCase{
			name:   "the next trip after a recovery opens for OpenBase again",
			policy: consecutiveOnly,
			given:  State{Phase: Closed, Cause: CauseProbeSuccess, Revision: 11, Consecutive: 4, Failures: 4},
			now:    n,
			do:     reportOp(Report{Revision: 11, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Open, Cause: CauseBreaker, Revision: 12, OpenUntil: n + 10_000, Reopens: 1},
			events: []Event{ev(Closed, Open, CauseBreaker, 12)},
			result: accepted(true),
		},
		transitionCase{
			name:   "a cooldown open does not count as a re-open",
			given:  State{Phase: Closed, Revision: 11, Reopens: 2},
			now:    n,
			do:     reportOp(Report{Revision: 11, Outcome: OutcomeRateLimited, RetryAfter: 1_000}),
			want:   State{Phase: Open, Cause: CauseRateLimit, Revision: 12, OpenUntil: n + 1_000, Reopens: 2},
			events: []Event{ev(Closed, Open, CauseRateLimit, 12)},
			result: accepted(true),
		},
	)
	runTransitions(t, cases)
}

func TestBreakerOpenJitter(t *testing.T) {
	t.Parallel()
	jitter := []struct {
		name    string
		policy  func(p *Policy)
		reopens int     // before the trip
		r       float64 // the report's jitter draw
		wantMs  int64
	}{
		{"jitter 0 is exact whatever the draw", nil, 0, 0.999, 10_000},
		{"draw 0 is the lower bound -Jitter", func(p *Policy) { p.Jitter = 0.1 }, 0, 0, 9_000},
		{"draw 0.5 is the nominal duration", func(p *Policy) { p.Jitter = 0.1 }, 0, 0.5, 10_000},
		{"a draw near 1 stays below +Jitter", func(p *Policy) { p.Jitter = 0.1 }, 0, 0.99999, 10_999},
		{"jitter at the cap never exceeds OpenMax", func(p *Policy) { p.Jitter = 0.1 }, 5, 0.99999, 300_000},
		{"jitter at the cap still spreads downward", func(p *Policy) { p.Jitter = 0.1 }, 5, 0, 270_000},
		{"a large jitter stays positive", func(p *Policy) { p.Jitter = 0.9 }, 0, 0, 1_000},
		{"an open never lasts less than 1 ms", func(p *Policy) { p.OpenBase, p.OpenMax, p.Jitter = time.Millisecond, time.Millisecond, 0.5 }, 0, 0, 1},
	}
	var cases []transitionCase
	for _, j := range jitter {
		cases = append(cases, transitionCase{
			name: j.name,
			policy: func(p *Policy) {
				consecutiveOnly(p)
				if j.policy != nil {
					j.policy(p)
				}
			},
			given:  State{Phase: Closed, Revision: 3, Consecutive: 4, Reopens: j.reopens},
			now:    n,
			do:     reportJ(Report{Revision: 3, Outcome: OutcomeTransientFailure}, j.r),
			want:   State{Phase: Open, Cause: CauseBreaker, Revision: 4, OpenUntil: n + j.wantMs, Reopens: j.reopens + 1},
			events: []Event{ev(Closed, Open, CauseBreaker, 4)},
			result: accepted(true),
		})
	}
	runTransitions(t, cases)
}

// TestBreakerOpenJitterBounds draws many jitters: an open lasts within
// ±Jitter of its nominal duration, at least 1 ms and never above OpenMax.
func TestBreakerOpenJitterBounds(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20_000 {
		p := testPolicy()
		p.FailureRate = 0
		p.ConsecutiveFailures = 1
		p.OpenBase = time.Duration(1+rng.IntN(20_000)) * time.Millisecond
		p.OpenMax = p.OpenBase * time.Duration(1+rng.IntN(40))
		p.Jitter = []float64{0, 0.1, 0.5, 0.999, rng.Float64()}[rng.IntN(5)]
		require.NoError(t, p.Validate())
		reopens := rng.IntN(10)
		r := rng.Float64()

		nominal := p.OpenBase.Milliseconds()
		for range reopens {
			nominal = min(2*nominal, p.OpenMax.Milliseconds())
		}
		spread := float64(nominal) * p.Jitter
		lo := max(nominal-int64(math.Ceil(spread)), 1)
		hi := min(nominal+int64(spread), p.OpenMax.Milliseconds())

		s := State{Phase: Closed, Reopens: reopens}
		_, evs := s.Report(p, n, Report{Outcome: OutcomeTransientFailure}, r)
		require.Len(t, evs, 1)
		d := s.OpenUntil - n
		require.GreaterOrEqual(t, d, lo, "draw %d: %+v reopens %d r %v", i, p, reopens, r)
		require.LessOrEqual(t, d, hi, "draw %d: %+v reopens %d r %v", i, p, reopens, r)
		if p.Jitter == 0 {
			require.Equal(t, nominal, d, "draw %d: jitter 0 is exact", i)
		}
	}
}

func TestHalfOpen(t *testing.T) {
	t.Parallel()
	openUntil := t0 + 10_000
	open := State{Phase: Open, Cause: CauseBreaker, Revision: 4, OpenUntil: openUntil, Reopens: 1}
	probe := func(rev uint64, slot int, at int64, nonce string) Lease {
		return Lease{Slot: slot, Token: LeaseToken(rev, slot, at, nonce), Granted: at, Expires: at + 30_000}
	}
	l0 := lease(5, 0, t0)
	runTransitions(t, []transitionCase{
		{
			name:  "open turns half-open when OpenUntil passes, and the Admit probes",
			given: open,
			now:   openUntil + 1,
			do:    admitOp("n1"),
			want:  State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Reopens: 1, Leases: []Lease{probe(5, 0, openUntil+1, "n1")}},
			// Stamped at the open's end, not at the Admit that saw it.
			events:  []Event{evAt(openUntil, Open, HalfOpen, CauseOpenExpired, 5)},
			verdict: &Verdict{Decision: AllowProbe, Revision: 5, Phase: HalfOpen, Lease: new(probe(5, 0, openUntil+1, "n1"))},
		},
		{
			name:    "open turns half-open at exactly OpenUntil",
			given:   open,
			now:     openUntil,
			do:      admitOp("n1"),
			want:    State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Reopens: 1, Leases: []Lease{probe(5, 0, openUntil, "n1")}},
			events:  []Event{ev(Open, HalfOpen, CauseOpenExpired, 5)},
			verdict: &Verdict{Decision: AllowProbe, Revision: 5, Phase: HalfOpen, Lease: new(probe(5, 0, openUntil, "n1"))},
		},
		{
			name:    "1 ms before OpenUntil it is still open",
			given:   open,
			now:     openUntil - 1,
			do:      admitOp("n1"),
			want:    open,
			verdict: &Verdict{Decision: Deny, Reason: ReasonOpen, RetryAfter: 1, Revision: 4, Phase: Open},
		},
		{
			name:   "Settle alone turns it half-open",
			given:  open,
			now:    openUntil,
			do:     settleOp(),
			want:   State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Reopens: 1},
			events: []Event{ev(Open, HalfOpen, CauseOpenExpired, 5)},
		},
		{
			name:    "with MaxProbes 2 a second caller probes too",
			policy:  twoProbes,
			given:   State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Leases: []Lease{l0}},
			now:     n,
			do:      admitOp("n2"),
			want:    State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Leases: []Lease{l0, probe(5, 1, n, "n2")}},
			verdict: &Verdict{Decision: AllowProbe, Revision: 5, Phase: HalfOpen, Lease: new(probe(5, 1, n, "n2"))},
		},
		{
			name:   "then PROBE_IN_FLIGHT until the earliest lease expiry",
			policy: twoProbes,
			given: State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Leases: []Lease{
				{Slot: 0, Token: "5.0.a", Granted: t0, Expires: t0 + 40_000},
				{Slot: 1, Token: "5.1.b", Granted: t0, Expires: t0 + 35_000},
			}},
			now: t0 + 20_000,
			do:  admitOp("n3"),
			want: State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Leases: []Lease{
				{Slot: 0, Token: "5.0.a", Granted: t0, Expires: t0 + 40_000},
				{Slot: 1, Token: "5.1.b", Granted: t0, Expires: t0 + 35_000},
			}},
			verdict: &Verdict{Decision: Deny, Reason: ReasonProbeInFlight, RetryAfter: 15_000, Revision: 5, Phase: HalfOpen},
		},
		{
			name:    "one probe by default",
			given:   State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Leases: []Lease{l0}},
			now:     t0 + 10_000,
			do:      admitOp("n2"),
			want:    State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Leases: []Lease{l0}},
			verdict: &Verdict{Decision: Deny, Reason: ReasonProbeInFlight, RetryAfter: 20_000, Revision: 5, Phase: HalfOpen},
		},
		{
			name:    "an expired lease frees its slot: the next Admit probes",
			given:   State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Leases: []Lease{l0}},
			now:     l0.Expires,
			do:      admitOp("n2"),
			want:    State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Leases: []Lease{probe(5, 0, l0.Expires, "n2")}},
			verdict: &Verdict{Decision: AllowProbe, Revision: 5, Phase: HalfOpen, Lease: new(probe(5, 0, l0.Expires, "n2"))},
		},
		{
			name:    "the lowest free slot is granted",
			policy:  func(p *Policy) { p.MaxProbes = 3 },
			given:   State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Leases: []Lease{lease(5, 1, t0)}},
			now:     n,
			do:      admitOp("n2"),
			want:    State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Leases: []Lease{lease(5, 1, t0), probe(5, 0, n, "n2")}},
			verdict: &Verdict{Decision: AllowProbe, Revision: 5, Phase: HalfOpen, Lease: new(probe(5, 0, n, "n2"))},
		},
		{
			name:   "probe SUCCESS closes and forgets counts and growth",
			given:  State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Reopens: 3, Consecutive: 2, Window: Window{Start: t0, CurCalls: 3, CurFails: 2}, Leases: []Lease{l0}},
			now:    n,
			do:     reportOp(Report{Revision: 5, LeaseToken: l0.Token, Outcome: OutcomeSuccess, HTTPStatus: 200}),
			want:   State{Phase: Closed, Cause: CauseProbeSuccess, Revision: 6},
			events: []Event{ev(HalfOpen, Closed, CauseProbeSuccess, 6)},
			result: accepted(true),
		},
		{
			name:   "probe CLIENT_ERROR closes: the provider answered",
			given:  State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Reopens: 3, Leases: []Lease{l0}},
			now:    n,
			do:     reportOp(Report{Revision: 5, LeaseToken: l0.Token, Outcome: OutcomeClientError, HTTPStatus: 400, ErrorCode: "invalid_request"}),
			want:   State{Phase: Closed, Cause: CauseProbeSuccess, Revision: 6},
			events: []Event{ev(HalfOpen, Closed, CauseProbeSuccess, 6)},
			result: accepted(true),
		},
		{
			name:   "probe TRANSIENT re-opens for longer",
			given:  State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Reopens: 1, Leases: []Lease{l0}},
			now:    n,
			do:     reportOp(Report{Revision: 5, LeaseToken: l0.Token, Outcome: OutcomeTransientFailure, HTTPStatus: 502}),
			want:   State{Phase: Open, Cause: CauseBreaker, Revision: 6, OpenUntil: n + 20_000, Reopens: 2},
			events: []Event{ev(HalfOpen, Open, CauseBreaker, 6)},
			result: accepted(true),
		},
		{
			name:   "probe CANCELED releases the lease without verdict",
			given:  State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Reopens: 1, Leases: []Lease{l0}},
			now:    n,
			do:     reportOp(Report{Revision: 5, LeaseToken: l0.Token, Outcome: OutcomeCanceled}),
			want:   State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Reopens: 1},
			result: accepted(false),
		},
		{
			name:   "probe CANCELED ignores a retry_after",
			given:  State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Reopens: 1, Leases: []Lease{l0}},
			now:    n,
			do:     reportOp(Report{Revision: 5, LeaseToken: l0.Token, Outcome: OutcomeCanceled, RetryAfter: 60_000}),
			want:   State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Reopens: 1},
			result: accepted(false),
		},
		{
			name:   "probe RATE_LIMITED re-opens as a cooldown, not a breaker re-open",
			given:  State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Reopens: 1, Leases: []Lease{l0}},
			now:    n,
			do:     reportOp(Report{Revision: 5, LeaseToken: l0.Token, Outcome: OutcomeRateLimited, RetryAfter: 30_000, HTTPStatus: 429}),
			want:   State{Phase: Open, Cause: CauseRateLimit, Revision: 6, OpenUntil: n + 30_000, Reopens: 1},
			events: []Event{ev(HalfOpen, Open, CauseRateLimit, 6)},
			result: accepted(true),
		},
		{
			name:   "probe SUCCESS with a retry_after closes, then cools down",
			given:  State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Reopens: 1, Leases: []Lease{l0}},
			now:    n,
			do:     reportOp(Report{Revision: 5, LeaseToken: l0.Token, Outcome: OutcomeSuccess, RetryAfter: 15_000}),
			want:   State{Phase: Open, Cause: CauseRateLimit, Revision: 7, OpenUntil: n + 15_000},
			events: []Event{ev(HalfOpen, Closed, CauseProbeSuccess, 6), ev(Closed, Open, CauseRateLimit, 7)},
			result: accepted(true),
		},
		{
			name:   "a report while open changes nothing",
			given:  State{Phase: Open, Cause: CauseBreaker, Revision: 4, OpenUntil: openUntil, Reopens: 1},
			now:    n,
			do:     reportOp(Report{Revision: 4, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Open, Cause: CauseBreaker, Revision: 4, OpenUntil: openUntil, Reopens: 1},
			result: accepted(false),
		},
		{
			name:   "a success while open changes nothing",
			given:  State{Phase: Open, Cause: CauseBreaker, Revision: 4, OpenUntil: openUntil, Reopens: 1},
			now:    n,
			do:     reportOp(Report{Revision: 4, Outcome: OutcomeSuccess}),
			want:   State{Phase: Open, Cause: CauseBreaker, Revision: 4, OpenUntil: openUntil, Reopens: 1},
			result: accepted(false),
		},
	})
}

func TestExtendLease(t *testing.T) {
	t.Parallel()
	l0 := lease(5, 0, t0)
	half := State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Leases: []Lease{l0}}
	extended := l0
	extended.Expires = n + 60_000
	runTransitions(t, []transitionCase{
		{
			name:  "a live lease moves to now+ttl",
			given: half,
			now:   n,
			do:    extendOp(l0.Token, 60_000),
			want:  State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Leases: []Lease{extended}},
			lease: &extended,
		},
		{
			name:  "an unknown token is not held",
			given: half,
			now:   n,
			do:    extendOp("5.0.1.someone-else", 60_000),
			want:  half,
			err:   ErrLeaseNotHeld,
		},
		{
			name:  "an empty token is not held",
			given: half,
			now:   n,
			do:    extendOp("", 60_000),
			want:  half,
			err:   ErrLeaseNotHeld,
		},
		{
			name:  "an expired lease is not held and lapses",
			given: half,
			now:   l0.Expires,
			do:    extendOp(l0.Token, 60_000),
			want:  State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5},
			err:   ErrLeaseNotHeld,
		},
	})
}

func TestCooldowns(t *testing.T) {
	t.Parallel()
	closed := State{Phase: Closed, Revision: 3}
	runTransitions(t, []transitionCase{
		{
			name:   "RATE_LIMITED with retry_after cools down for it",
			given:  closed,
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeRateLimited, RetryAfter: 30_000, HTTPStatus: 429}),
			want:   State{Phase: Open, Cause: CauseRateLimit, Revision: 4, OpenUntil: n + 30_000},
			events: []Event{ev(Closed, Open, CauseRateLimit, 4)},
			result: accepted(true),
		},
		{
			name:   "RATE_LIMITED without retry_after uses the policy default",
			given:  closed,
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeRateLimited, HTTPStatus: 429}),
			want:   State{Phase: Open, Cause: CauseRateLimit, Revision: 4, OpenUntil: n + 2_000},
			events: []Event{ev(Closed, Open, CauseRateLimit, 4)},
			result: accepted(true),
		},
		{
			name:   "RATE_LIMITED without retry_after and a 0 default does nothing",
			policy: func(p *Policy) { p.RateLimitCooldown = 0 },
			given:  closed,
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeRateLimited}),
			want:   closed,
			result: accepted(false),
		},
		{
			name:   "RATE_LIMITED does not count toward tripping",
			policy: consecutiveOnly,
			given:  State{Phase: Closed, Revision: 3, Consecutive: 4},
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeRateLimited, RetryAfter: 1_000}),
			want:   State{Phase: Open, Cause: CauseRateLimit, Revision: 4, OpenUntil: n + 1_000, Consecutive: 4},
			events: []Event{ev(Closed, Open, CauseRateLimit, 4)},
			result: accepted(true),
		},
		{
			name:   "OVERLOADED below the floor cools down for the floor",
			given:  closed,
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeOverloaded, RetryAfter: 1_000, HTTPStatus: 529}),
			want:   State{Phase: Open, Cause: CauseOverload, Revision: 4, OpenUntil: n + 5_000},
			events: []Event{ev(Closed, Open, CauseOverload, 4)},
			result: accepted(true),
		},
		{
			name:   "OVERLOADED above the floor keeps the server's value",
			given:  closed,
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeOverloaded, RetryAfter: 8_000}),
			want:   State{Phase: Open, Cause: CauseOverload, Revision: 4, OpenUntil: n + 8_000},
			events: []Event{ev(Closed, Open, CauseOverload, 4)},
			result: accepted(true),
		},
		{
			name:   "OVERLOADED with floor 0 and no retry_after does nothing",
			policy: func(p *Policy) { p.OverloadFloor = 0 },
			given:  closed,
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeOverloaded}),
			want:   closed,
			result: accepted(false),
		},
		{
			name:   "QUOTA_EXHAUSTED blocks for QuotaBlock",
			given:  closed,
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeQuotaExhausted, HTTPStatus: 429, ErrorCode: "insufficient_quota"}),
			want:   State{Phase: Open, Cause: CauseQuota, Revision: 4, OpenUntil: n + 3_600_000},
			events: []Event{ev(Closed, Open, CauseQuota, 4)},
			result: accepted(true),
		},
		{
			name:   "QUOTA_EXHAUSTED with a longer retry_after blocks for it",
			given:  closed,
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeQuotaExhausted, RetryAfter: 7_200_000}),
			want:   State{Phase: Open, Cause: CauseQuota, Revision: 4, OpenUntil: n + 7_200_000},
			events: []Event{ev(Closed, Open, CauseQuota, 4)},
			result: accepted(true),
		},
		{
			name:   "QUOTA_EXHAUSTED with QuotaBlock 0 does nothing",
			policy: func(p *Policy) { p.QuotaBlock = 0 },
			given:  closed,
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeQuotaExhausted}),
			want:   closed,
			result: accepted(false),
		},
		{
			name:   "AUTH_FAILURE blocks for AuthBlock",
			given:  closed,
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeAuthFailure, HTTPStatus: 401, ErrorCode: "invalid_api_key"}),
			want:   State{Phase: Open, Cause: CauseAuth, Revision: 4, OpenUntil: n + 300_000},
			events: []Event{ev(Closed, Open, CauseAuth, 4)},
			result: accepted(true),
		},
		{
			name:   "AUTH_FAILURE with AuthBlock 0 does nothing",
			policy: func(p *Policy) { p.AuthBlock = 0 },
			given:  closed,
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeAuthFailure}),
			want:   closed,
			result: accepted(false),
		},
		{
			name:   "a shorter hint never shortens an open",
			given:  State{Phase: Open, Cause: CauseRateLimit, Revision: 4, OpenUntil: n + 30_000},
			now:    n,
			do:     reportOp(Report{Revision: 4, Outcome: OutcomeRateLimited, RetryAfter: 10_000}),
			want:   State{Phase: Open, Cause: CauseRateLimit, Revision: 4, OpenUntil: n + 30_000},
			result: accepted(false),
		},
		{
			name:   "an equal hint changes nothing",
			given:  State{Phase: Open, Cause: CauseRateLimit, Revision: 4, OpenUntil: n + 30_000},
			now:    n,
			do:     reportOp(Report{Revision: 4, Outcome: OutcomeRateLimited, RetryAfter: 30_000}),
			want:   State{Phase: Open, Cause: CauseRateLimit, Revision: 4, OpenUntil: n + 30_000},
			result: accepted(false),
		},
		{
			name:   "a longer hint extends the open: open→open, revision bump",
			given:  State{Phase: Open, Cause: CauseRateLimit, Revision: 4, OpenUntil: n + 30_000},
			now:    n,
			do:     reportOp(Report{Revision: 4, Outcome: OutcomeRateLimited, RetryAfter: 60_000}),
			want:   State{Phase: Open, Cause: CauseRateLimit, Revision: 5, OpenUntil: n + 60_000},
			events: []Event{ev(Open, Open, CauseRateLimit, 5)},
			result: accepted(true),
		},
		{
			name:   "a hint 1 ms longer extends the open",
			given:  State{Phase: Open, Cause: CauseOverload, Revision: 4, OpenUntil: n + 30_000},
			now:    n,
			do:     reportOp(Report{Revision: 4, Outcome: OutcomeRateLimited, RetryAfter: 30_001}),
			want:   State{Phase: Open, Cause: CauseRateLimit, Revision: 5, OpenUntil: n + 30_001},
			events: []Event{ev(Open, Open, CauseRateLimit, 5)},
			result: accepted(true),
		},
		{
			name:   "a longer block extends a breaker open and takes over its cause",
			given:  State{Phase: Open, Cause: CauseBreaker, Revision: 4, OpenUntil: n + 10_000, Reopens: 2},
			now:    n,
			do:     reportOp(Report{Revision: 4, Outcome: OutcomeQuotaExhausted}),
			want:   State{Phase: Open, Cause: CauseQuota, Revision: 5, OpenUntil: n + 3_600_000, Reopens: 2},
			events: []Event{ev(Open, Open, CauseQuota, 5)},
			result: accepted(true),
		},
		{
			name:   "an overload floor shorter than a quota block leaves it",
			given:  State{Phase: Open, Cause: CauseQuota, Revision: 4, OpenUntil: n + 3_600_000},
			now:    n,
			do:     reportOp(Report{Revision: 1, Outcome: OutcomeOverloaded}),
			want:   State{Phase: Open, Cause: CauseQuota, Revision: 4, OpenUntil: n + 3_600_000},
			result: stale(false),
		},
		{
			name:   "a SUCCESS with retry_after cools down proactively",
			given:  State{Phase: Closed, Revision: 3, Consecutive: 2},
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeSuccess, RetryAfter: 15_000, HTTPStatus: 200}),
			want:   State{Phase: Open, Cause: CauseRateLimit, Revision: 4, OpenUntil: n + 15_000, Window: Window{Start: t0, CurCalls: 1}},
			events: []Event{ev(Closed, Open, CauseRateLimit, 4)},
			result: accepted(true),
		},
		{
			name:   "CLIENT_ERROR is neutral while closed",
			given:  State{Phase: Closed, Revision: 3, Consecutive: 3, Failures: 3, Successes: 1, Window: Window{Start: t0, CurCalls: 10, CurFails: 3}},
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeClientError, HTTPStatus: 400}),
			want:   State{Phase: Closed, Revision: 3, Consecutive: 3, Failures: 3, Successes: 1, Window: Window{Start: t0, CurCalls: 10, CurFails: 3}},
			result: accepted(false),
		},
		{
			name:   "a TRANSIENT_FAILURE with retry_after counts and cools down",
			given:  State{Phase: Closed, Revision: 3},
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeTransientFailure, RetryAfter: 20_000, HTTPStatus: 503}),
			want:   State{Phase: Open, Cause: CauseRateLimit, Revision: 4, OpenUntil: n + 20_000, Consecutive: 1, Window: Window{Start: t0, CurCalls: 1, CurFails: 1}},
			events: []Event{ev(Closed, Open, CauseRateLimit, 4)},
			result: accepted(true),
		},
		{
			name:   "a trip and a longer hint in one report: two events",
			policy: consecutiveOnly,
			given:  State{Phase: Closed, Revision: 3, Consecutive: 4},
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeTransientFailure, RetryAfter: 60_000}),
			want:   State{Phase: Open, Cause: CauseRateLimit, Revision: 5, OpenUntil: n + 60_000, Reopens: 1},
			events: []Event{ev(Closed, Open, CauseBreaker, 4), ev(Open, Open, CauseRateLimit, 5)},
			result: accepted(true),
		},
		{
			name:   "a trip and a shorter hint in one report: one event",
			policy: consecutiveOnly,
			given:  State{Phase: Closed, Revision: 3, Consecutive: 4},
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeTransientFailure, RetryAfter: 5_000}),
			want:   State{Phase: Open, Cause: CauseBreaker, Revision: 4, OpenUntil: n + 10_000, Reopens: 1},
			events: []Event{ev(Closed, Open, CauseBreaker, 4)},
			result: accepted(true),
		},
		{
			name:   "a negative retry_after is no hint",
			given:  closed,
			now:    n,
			do:     reportOp(Report{Revision: 3, Outcome: OutcomeClientError, RetryAfter: -5}),
			want:   closed,
			result: accepted(false),
		},
	})
}

func TestAdmitDenyReasonFollowsCause(t *testing.T) {
	t.Parallel()
	reasons := []struct {
		name  string
		cause Cause
		want  DenyReason
	}{
		{"breaker open", CauseBreaker, ReasonOpen},
		{"rate limit cooldown", CauseRateLimit, ReasonCooldown},
		{"overload cooldown", CauseOverload, ReasonOverloaded},
		{"quota block", CauseQuota, ReasonQuota},
		{"auth block", CauseAuth, ReasonAuth},
	}
	var cases []transitionCase
	for _, r := range reasons {
		st := State{Phase: Open, Cause: r.cause, Revision: 4, OpenUntil: n + 12_345}
		cases = append(cases, transitionCase{
			name:    r.name,
			given:   st,
			now:     n,
			do:      admitOp("x"),
			want:    st,
			verdict: &Verdict{Decision: Deny, Reason: r.want, RetryAfter: 12_345, Revision: 4, Phase: Open},
		})
	}
	cases = append(cases,
		transitionCase{
			name:    "closed allows",
			given:   State{Phase: Closed, Revision: 9},
			now:     n,
			do:      admitOp("x"),
			want:    State{Phase: Closed, Revision: 9},
			verdict: &Verdict{Decision: Allow, Revision: 9, Phase: Closed},
		},
		transitionCase{
			name:    "a connection never seen allows at revision 0",
			given:   State{},
			now:     n,
			do:      admitOp("x"),
			want:    State{},
			verdict: &Verdict{Decision: Allow, Revision: 0, Phase: Closed},
		},
	)
	runTransitions(t, cases)
}

func TestRevisions(t *testing.T) {
	t.Parallel()
	l0 := lease(5, 0, t0)
	half := State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Reopens: 1, Leases: []Lease{l0}}
	recovered := State{Phase: Closed, Cause: CauseProbeSuccess, Revision: 9}
	runTransitions(t, []transitionCase{
		{
			name:   "a stale success never clears a newer failure",
			given:  State{Phase: Open, Cause: CauseBreaker, Revision: 7, OpenUntil: n + 10_000, Reopens: 1},
			now:    n,
			do:     reportOp(Report{Revision: 6, Outcome: OutcomeSuccess, HTTPStatus: 200}),
			want:   State{Phase: Open, Cause: CauseBreaker, Revision: 7, OpenUntil: n + 10_000, Reopens: 1},
			result: stale(false),
		},
		{
			name:   "a stale success never closes a half-open connection",
			given:  State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 8, Reopens: 1},
			now:    n,
			do:     reportOp(Report{Revision: 7, Outcome: OutcomeSuccess}),
			want:   State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 8, Reopens: 1},
			result: stale(false),
		},
		{
			name:   "a stale failure never re-opens a recovered connection",
			given:  recovered,
			now:    n,
			do:     reportOp(Report{Revision: 7, Outcome: OutcomeTransientFailure}),
			want:   recovered,
			result: stale(false),
		},
		{
			name:   "a stale failure is not counted",
			given:  State{Phase: Closed, Revision: 9, Consecutive: 4, Failures: 4, Window: Window{Start: t0, CurCalls: 19, CurFails: 19}},
			now:    n,
			do:     reportOp(Report{Revision: 8, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Closed, Revision: 9, Consecutive: 4, Failures: 4, Window: Window{Start: t0, CurCalls: 19, CurFails: 19}},
			result: stale(false),
		},
		{
			name:   "a stale probe's failure never re-opens a recovered connection",
			given:  recovered,
			now:    n,
			do:     reportOp(Report{Revision: 8, LeaseToken: lease(8, 0, t0).Token, Outcome: OutcomeTransientFailure}),
			want:   recovered,
			result: stale(false),
		},
		{
			name:   "a stale success is not counted",
			given:  State{Phase: Closed, Revision: 9, Consecutive: 4},
			now:    n,
			do:     reportOp(Report{Revision: 8, Outcome: OutcomeSuccess}),
			want:   State{Phase: Closed, Revision: 9, Consecutive: 4},
			result: stale(false),
		},
		{
			name:   "a report from a future revision is not accepted",
			given:  recovered,
			now:    n,
			do:     reportOp(Report{Revision: 10, Outcome: OutcomeTransientFailure}),
			want:   recovered,
			result: stale(false),
		},
		{
			name:   "a hint with a stale revision still applies",
			given:  recovered,
			now:    n,
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeRateLimited, RetryAfter: 30_000}),
			want:   State{Phase: Open, Cause: CauseRateLimit, Revision: 10, OpenUntil: n + 30_000},
			events: []Event{ev(Closed, Open, CauseRateLimit, 10)},
			result: stale(true),
		},
		{
			name:   "a stale success's proactive cooldown still applies",
			given:  recovered,
			now:    n,
			do:     reportOp(Report{Revision: 2, Outcome: OutcomeSuccess, RetryAfter: 30_000}),
			want:   State{Phase: Open, Cause: CauseRateLimit, Revision: 10, OpenUntil: n + 30_000},
			events: []Event{ev(Closed, Open, CauseRateLimit, 10)},
			result: stale(true),
		},
		{
			name:   "a live lease token with a wrong revision is accepted",
			given:  half,
			now:    n,
			do:     reportOp(Report{Revision: 3, LeaseToken: l0.Token, Outcome: OutcomeSuccess}),
			want:   State{Phase: Closed, Cause: CauseProbeSuccess, Revision: 6},
			events: []Event{ev(HalfOpen, Closed, CauseProbeSuccess, 6)},
			result: accepted(true),
		},
		{
			name:   "an unknown token with a wrong revision is not accepted",
			given:  half,
			now:    n,
			do:     reportOp(Report{Revision: 3, LeaseToken: "5.0.1.someone-else", Outcome: OutcomeSuccess}),
			want:   half,
			result: stale(false),
		},
		{
			// Half-open, only a live lease carries the verdict.
			name:   "half-open, an unknown token with the current revision is not accepted",
			given:  half,
			now:    n,
			do:     reportOp(Report{Revision: 5, LeaseToken: "bogus", Outcome: OutcomeTransientFailure}),
			want:   half,
			result: stale(false),
		},
		{
			name:   "an expired lease with the current revision is not accepted",
			given:  half,
			now:    l0.Expires,
			do:     reportOp(Report{Revision: 5, LeaseToken: l0.Token, Outcome: OutcomeSuccess}),
			want:   State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Reopens: 1},
			result: stale(false),
		},
		{
			name:   "an expired lease with a wrong revision is not accepted",
			given:  half,
			now:    l0.Expires,
			do:     reportOp(Report{Revision: 4, LeaseToken: l0.Token, Outcome: OutcomeSuccess}),
			want:   State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Reopens: 1},
			result: stale(false),
		},
		{
			name:   "a canceled report with a wrong revision and no lease is not accepted",
			given:  half,
			now:    n,
			do:     reportOp(Report{Revision: 4, Outcome: OutcomeCanceled}),
			want:   half,
			result: stale(false),
		},
	})
}

func TestOverrides(t *testing.T) {
	t.Parallel()
	forcedOpen := func(rev uint64, until int64) State {
		return State{Phase: Open, Cause: CauseForced, Revision: rev, OpenUntil: until, Override: ForcedOpen, OverrideUntil: until}
	}
	forcedClosed := func(rev uint64, until int64) State {
		return State{Phase: Closed, Cause: CauseForced, Revision: rev, Override: ForcedClosed, OverrideUntil: until}
	}
	until := n + 60_000
	l0 := lease(5, 0, t0)
	runTransitions(t, []transitionCase{
		{
			name:   "force open without expiry",
			given:  State{Phase: Closed, Revision: 3, Consecutive: 2},
			now:    n,
			do:     forceOp(ForcedOpen, 0, "alice", "incident 42"),
			want:   State{Phase: Open, Cause: CauseForced, Revision: 4, Override: ForcedOpen, Consecutive: 2},
			events: []Event{evBy(Closed, Open, CauseForced, 4, "alice", "incident 42")},
		},
		{
			name:   "force open with an expiry",
			given:  State{Phase: Closed, Revision: 3},
			now:    n,
			do:     forceOp(ForcedOpen, until, "alice", ""),
			want:   forcedOpen(4, until),
			events: []Event{evBy(Closed, Open, CauseForced, 4, "alice", "")},
		},
		{
			name:   "force open drops probe leases",
			given:  State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Leases: []Lease{l0}},
			now:    n,
			do:     forceOp(ForcedOpen, until, "alice", ""),
			want:   forcedOpen(6, until),
			events: []Event{evBy(HalfOpen, Open, CauseForced, 6, "alice", "")},
		},
		{
			name:   "forcing open again moves the expiry: open→open",
			given:  forcedOpen(4, until),
			now:    n,
			do:     forceOp(ForcedOpen, until+60_000, "bob", ""),
			want:   forcedOpen(5, until+60_000),
			events: []Event{evBy(Open, Open, CauseForced, 5, "bob", "")},
		},
		{
			name:    "forced open without expiry denies FORCED_OPEN for OpenMax",
			given:   forcedOpen(4, 0),
			now:     n,
			do:      admitOp("x"),
			want:    forcedOpen(4, 0),
			verdict: &Verdict{Decision: Deny, Reason: ReasonForcedOpen, RetryAfter: 300_000, Revision: 4, Phase: Open},
		},
		{
			name:    "forced open with expiry denies FORCED_OPEN until it ends",
			given:   forcedOpen(4, until),
			now:     n,
			do:      admitOp("x"),
			want:    forcedOpen(4, until),
			verdict: &Verdict{Decision: Deny, Reason: ReasonForcedOpen, RetryAfter: 60_000, Revision: 4, Phase: Open},
		},
		{
			name:   "forced open ignores failures",
			given:  forcedOpen(4, until),
			now:    n,
			do:     reportOp(Report{Revision: 4, Outcome: OutcomeTransientFailure}),
			want:   forcedOpen(4, until),
			result: accepted(false),
		},
		{
			name:   "forced open ignores successes",
			given:  forcedOpen(4, until),
			now:    n,
			do:     reportOp(Report{Revision: 4, Outcome: OutcomeSuccess}),
			want:   forcedOpen(4, until),
			result: accepted(false),
		},
		{
			name:   "forced open ignores hints",
			given:  forcedOpen(4, until),
			now:    n,
			do:     reportOp(Report{Revision: 1, Outcome: OutcomeQuotaExhausted, RetryAfter: 7_200_000}),
			want:   forcedOpen(4, until),
			result: stale(false),
		},
		{
			name:  "forced open without expiry never ends by itself",
			given: forcedOpen(4, 0),
			now:   n + 365*24*3_600_000,
			do:    settleOp(),
			want:  forcedOpen(4, 0),
		},
		{
			name:   "forced open expires by itself to half-open",
			given:  forcedOpen(4, until),
			now:    until,
			do:     settleOp(),
			want:   State{Phase: HalfOpen, Cause: CauseForceExpired, Revision: 5},
			events: []Event{ev(Open, HalfOpen, CauseForceExpired, 5)},
		},
		{
			name:    "after a forced open expires the next Admit probes",
			given:   forcedOpen(4, until),
			now:     until + 1,
			do:      admitOp("p"),
			want:    State{Phase: HalfOpen, Cause: CauseForceExpired, Revision: 5, Leases: []Lease{{Slot: 0, Token: LeaseToken(5, 0, until+1, "p"), Granted: until + 1, Expires: until + 30_001}}},
			events:  []Event{evAt(until, Open, HalfOpen, CauseForceExpired, 5)},
			verdict: &Verdict{Decision: AllowProbe, Revision: 5, Phase: HalfOpen, Lease: &Lease{Slot: 0, Token: LeaseToken(5, 0, until+1, "p"), Granted: until + 1, Expires: until + 30_001}},
		},
		{
			name:   "force closed from open resets counts, not growth",
			given:  State{Phase: Open, Cause: CauseBreaker, Revision: 4, OpenUntil: n + 10_000, Reopens: 2, Consecutive: 3, Window: Window{Start: t0, CurCalls: 4}},
			now:    n,
			do:     forceOp(ForcedClosed, until, "alice", "false alarm"),
			want:   State{Phase: Closed, Cause: CauseForced, Revision: 5, Override: ForcedClosed, OverrideUntil: until, Reopens: 2},
			events: []Event{evBy(Open, Closed, CauseForced, 5, "alice", "false alarm")},
		},
		{
			name:    "forced closed allows everything",
			given:   forcedClosed(5, until),
			now:     n,
			do:      admitOp("x"),
			want:    forcedClosed(5, until),
			verdict: &Verdict{Decision: Allow, Revision: 5, Phase: Closed},
		},
		{
			name:   "forced closed ignores failures",
			policy: consecutiveOnly,
			given:  forcedClosed(5, until),
			now:    n,
			do:     reportOp(Report{Revision: 5, Outcome: OutcomeTransientFailure}),
			want:   forcedClosed(5, until),
			result: accepted(false),
		},
		{
			name:   "forced closed ignores cooldowns",
			given:  forcedClosed(5, until),
			now:    n,
			do:     reportOp(Report{Revision: 5, Outcome: OutcomeRateLimited, RetryAfter: 30_000}),
			want:   forcedClosed(5, until),
			result: accepted(false),
		},
		{
			name: "forced closed expires to closed with fresh counts",
			given: func() State {
				s := forcedClosed(5, until)
				s.Consecutive, s.Window = 2, Window{Start: t0, CurCalls: 3}
				return s
			}(),
			now:    until,
			do:     settleOp(),
			want:   State{Phase: Closed, Cause: CauseForceExpired, Revision: 6},
			events: []Event{ev(Closed, Closed, CauseForceExpired, 6)},
		},
		{
			name:   "clearing an override closes",
			given:  forcedOpen(4, 0),
			now:    n,
			do:     forceOp(NoOverride, until, "bob", "done"),
			want:   State{Phase: Closed, Cause: CauseOverrideCleared, Revision: 5},
			events: []Event{evBy(Open, Closed, CauseOverrideCleared, 5, "bob", "done")},
		},
		{
			name:  "clearing no override changes nothing",
			given: State{Phase: Open, Cause: CauseRateLimit, Revision: 4, OpenUntil: until, Consecutive: 2},
			now:   n,
			do:    forceOp(NoOverride, 0, "bob", "nothing to clear"),
			want:  State{Phase: Open, Cause: CauseRateLimit, Revision: 4, OpenUntil: until, Consecutive: 2},
		},
		{
			name:   "clearing an override that ended by itself adds nothing to its end",
			given:  forcedClosed(4, n),
			now:    n,
			do:     forceOp(NoOverride, 0, "bob", ""),
			want:   State{Phase: Closed, Cause: CauseForceExpired, Revision: 5},
			events: []Event{ev(Closed, Closed, CauseForceExpired, 5)},
		},
		{
			name:   "an expired override settles before a new force",
			given:  forcedOpen(4, n),
			now:    n,
			do:     forceOp(ForcedClosed, 0, "bob", ""),
			want:   State{Phase: Closed, Cause: CauseForced, Revision: 6, Override: ForcedClosed},
			events: []Event{ev(Open, HalfOpen, CauseForceExpired, 5), evBy(HalfOpen, Closed, CauseForced, 6, "bob", "")},
		},
	})
}

func TestReset(t *testing.T) {
	t.Parallel()
	runTransitions(t, []transitionCase{
		{
			name:   "reset closes and zeroes counters",
			given:  State{Phase: Closed, Revision: 7, Reopens: 3, Consecutive: 4, Failures: 4, Successes: 9, Window: Window{Start: t0, PrevCalls: 2, CurCalls: 10, CurFails: 4}},
			now:    n,
			do:     resetOp("bob", "runbook"),
			want:   State{Phase: Closed, Cause: CauseReset, Revision: 8},
			events: []Event{evBy(Closed, Closed, CauseReset, 8, "bob", "runbook")},
		},
		{
			name:   "reset closes an open connection",
			given:  State{Phase: Open, Cause: CauseQuota, Revision: 7, OpenUntil: n + 3_600_000, Reopens: 3},
			now:    n,
			do:     resetOp("bob", ""),
			want:   State{Phase: Closed, Cause: CauseReset, Revision: 8},
			events: []Event{evBy(Open, Closed, CauseReset, 8, "bob", "")},
		},
		{
			name:   "reset drops probe leases",
			given:  State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 7, Reopens: 3, Leases: []Lease{lease(7, 0, t0)}},
			now:    n,
			do:     resetOp("bob", ""),
			want:   State{Phase: Closed, Cause: CauseReset, Revision: 8},
			events: []Event{evBy(HalfOpen, Closed, CauseReset, 8, "bob", "")},
		},
		{
			name:   "reset clears an override",
			given:  State{Phase: Open, Cause: CauseForced, Revision: 7, Override: ForcedOpen},
			now:    n,
			do:     resetOp("bob", ""),
			want:   State{Phase: Closed, Cause: CauseReset, Revision: 8},
			events: []Event{evBy(Open, Closed, CauseReset, 8, "bob", "")},
		},
		{
			name:   "a report with the pre-reset revision is stale",
			policy: consecutiveOnly,
			given:  State{Phase: Closed, Cause: CauseReset, Revision: 8, Consecutive: 4},
			now:    n,
			do:     reportOp(Report{Revision: 7, Outcome: OutcomeTransientFailure}),
			want:   State{Phase: Closed, Cause: CauseReset, Revision: 8, Consecutive: 4},
			result: stale(false),
		},
	})
}

// TestSettleOnACopy checks that a reader settling a (shallow) copy of a
// state, as Settle's doc invites, never changes the original.
func TestSettleOnACopy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		given State
		now   int64
	}{
		{
			name: "an expired lease before a live one",
			given: State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Leases: []Lease{
				{Slot: 0, Token: "5.0.a", Granted: t0, Expires: t0 + 1_000},
				{Slot: 1, Token: "5.1.b", Granted: t0, Expires: t0 + 5_000},
			}},
			now: t0 + 2_000,
		},
		{
			name:  "every lease expired",
			given: State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Leases: []Lease{lease(5, 0, t0), lease(5, 1, t0)}},
			now:   t0 + 60_000,
		},
		{
			name:  "an open that ended",
			given: State{Phase: Open, Cause: CauseBreaker, Revision: 4, OpenUntil: n, Reopens: 1},
			now:   n,
		},
		{
			name:  "an override that ended",
			given: State{Phase: Open, Cause: CauseForced, Revision: 4, OpenUntil: n, Override: ForcedOpen, OverrideUntil: n},
			now:   n,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			orig := clone(tt.given)
			read := orig // what a reader does: copy, then settle the copy
			evs := read.Settle(tt.now)
			assert.Equal(t, tt.given, orig, "the original is unchanged")
			assert.Equal(t, tt.given.Revision+uint64(len(evs)), read.Revision)
		})
	}
}

// TestEventLog walks one connection through every kind of transition and
// checks the whole event log: exactly one event per transition, with its
// from, to, cause, revision, time and actor, each chained to the previous.
func TestEventLog(t *testing.T) {
	t.Parallel()
	p := testPolicy()
	p.FailureRate = 0
	var s State
	type step struct {
		at   int64
		do   op
		want []Event // At is the step's time unless stated
	}
	fail := Report{Outcome: OutcomeTransientFailure}
	// The first transition's revision is its time; later ones add one.
	r := uint64(n)
	steps := []step{
		{at: n, do: reportOp(fail)},
		{at: n, do: reportOp(fail)},
		{at: n, do: reportOp(fail)},
		{at: n, do: reportOp(fail)},
		{at: n + 1, do: reportOp(fail), want: []Event{ev(Closed, Open, CauseBreaker, r+1)}},
		{at: n + 11_001, do: admitOp("a"), want: []Event{evAt(n+10_001, Open, HalfOpen, CauseOpenExpired, r+2)}},
		{at: n + 11_002, do: reportOp(Report{Revision: r + 2, LeaseToken: LeaseToken(r+2, 0, n+11_001, "a"), Outcome: OutcomeTransientFailure}), want: []Event{ev(HalfOpen, Open, CauseBreaker, r+3)}},
		{at: n + 31_002, do: settleOp(), want: []Event{ev(Open, HalfOpen, CauseOpenExpired, r+4)}},
		{at: n + 31_003, do: admitOp("b")},
		{at: n + 31_004, do: reportOp(Report{Revision: r + 4, LeaseToken: LeaseToken(r+4, 0, n+31_003, "b"), Outcome: OutcomeSuccess}), want: []Event{ev(HalfOpen, Closed, CauseProbeSuccess, r+5)}},
		{at: n + 31_005, do: reportOp(Report{Revision: r + 1, Outcome: OutcomeRateLimited, RetryAfter: 1_000}), want: []Event{ev(Closed, Open, CauseRateLimit, r+6)}},
		{at: n + 31_006, do: reportOp(Report{Revision: r + 6, Outcome: OutcomeAuthFailure}), want: []Event{ev(Open, Open, CauseAuth, r+7)}},
		{at: n + 31_007, do: forceOp(ForcedClosed, n+40_000, "alice", "key rotated"), want: []Event{evBy(Open, Closed, CauseForced, r+8, "alice", "key rotated")}},
		{at: n + 40_000, do: settleOp(), want: []Event{ev(Closed, Closed, CauseForceExpired, r+9)}},
		{at: n + 40_001, do: forceOp(ForcedOpen, n+50_000, "alice", "maintenance"), want: []Event{evBy(Closed, Open, CauseForced, r+10, "alice", "maintenance")}},
		{at: n + 50_000, do: admitOp("c"), want: []Event{ev(Open, HalfOpen, CauseForceExpired, r+11)}},
		{at: n + 50_001, do: forceOp(ForcedOpen, 0, "carol", ""), want: []Event{evBy(HalfOpen, Open, CauseForced, r+12, "carol", "")}},
		{at: n + 50_002, do: forceOp(NoOverride, 0, "carol", ""), want: []Event{evBy(Open, Closed, CauseOverrideCleared, r+13, "carol", "")}},
		{at: n + 50_003, do: resetOp("dave", "cleanup"), want: []Event{evBy(Closed, Closed, CauseReset, r+14, "dave", "cleanup")}},
	}
	var log []Event
	for i, st := range steps {
		if st.do.kind == "report" && st.do.report.Revision == 0 && st.do.report.LeaseToken == "" {
			st.do.report.Revision = s.Revision
		}
		res := st.do.apply(t, &s, p, st.at)
		want := make([]Event, len(st.want))
		for j, e := range st.want {
			if e.At == 0 {
				e.At = st.at
			}
			want[j] = e
		}
		if len(want) == 0 {
			require.Empty(t, res.events, "step %d", i)
		} else {
			require.Equal(t, want, res.events, "step %d", i)
		}
		log = append(log, res.events...)
	}
	require.Len(t, log, 14)
	for i := 1; i < len(log); i++ {
		assert.Equal(t, log[i-1].To, log[i].From, "event %d chains", i)
		assert.Equal(t, log[i-1].Revision+1, log[i].Revision, "event %d revision", i)
		assert.LessOrEqual(t, log[i-1].At, log[i].At, "event %d time", i)
	}
	assert.Equal(t, s.Revision, log[len(log)-1].Revision)
}

// TestOneVerdictPerLease is issue 12's sequence: a probe reports CANCELED,
// another caller is granted the probe, and the first caller's late failure
// (same admission, same revision) must not re-open the connection or make
// the new probe's success stale.
func TestOneVerdictPerLease(t *testing.T) {
	t.Parallel()
	p := testPolicy()
	s := State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: 5, Reopens: 1}
	first, _ := s.Admit(p, n, Attempt{Nonce: "a"})
	require.Equal(t, AllowProbe, first.Decision)
	res, _ := s.Report(p, n+1, Report{Revision: first.Revision, LeaseToken: first.Lease.Token, Outcome: OutcomeCanceled}, 0)
	require.True(t, res.Accepted)
	second, _ := s.Admit(p, n+2, Attempt{Nonce: "b"})
	require.Equal(t, AllowProbe, second.Decision)
	late, evs := s.Report(p, n+3, Report{Revision: first.Revision, LeaseToken: first.Lease.Token, Outcome: OutcomeTransientFailure}, 0)
	assert.False(t, late.Accepted, "the canceled probe gave up its verdict")
	assert.Empty(t, evs)
	ok, evs := s.Report(p, n+4, Report{Revision: second.Revision, LeaseToken: second.Lease.Token, Outcome: OutcomeSuccess}, 0)
	assert.True(t, ok.Accepted)
	assert.Equal(t, []Event{{At: n + 4, From: HalfOpen, To: Closed, Cause: CauseProbeSuccess, Revision: 6}}, evs)
}

// TestRevisionsOfANewLifeNeverRepeat: a connection that expired idle comes
// back as a zero State; its first transition's revision is its time, above
// every revision of the previous life, so a report held across the gap is
// stale.
func TestRevisionsOfANewLifeNeverRepeat(t *testing.T) {
	t.Parallel()
	p := testPolicy()
	var old State
	for i := range 3 {
		old.Report(p, n+int64(i), Report{Revision: old.Revision, Outcome: OutcomeRateLimited, RetryAfter: 10}, 0)
	}
	held := old.Revision
	var life State // the state expired; the next report starts a new life
	now := n + 24*3600_000
	life.Report(p, now, Report{Outcome: OutcomeRateLimited, RetryAfter: 10}, 0)
	assert.Greater(t, life.Revision, held)
	res, _ := life.Report(p, now+1, Report{Revision: held, Outcome: OutcomeSuccess}, 0)
	assert.False(t, res.Accepted, "a report from the previous life is stale")
}
