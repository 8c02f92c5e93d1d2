package breaker

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// t0 is the tests' epoch in Unix ms. It is aligned to every failure-rate
// window the tests use (1 s, 60 s), so t0 starts a bucket.
const t0 int64 = 1_800_000_000_000

// n is the "now" of most single-step cases: 1 s into the bucket at t0.
const n = t0 + 1_000

// testPolicy is DefaultPolicy without jitter, so open durations are exact:
// 5 consecutive failures, 50 % over 60 s once 20 calls are seen, opens of
// 10 s doubling to 5 min, 429 default 2 s, overload floor 5 s, quota 1 h,
// auth 5 min, 1 probe with a 30 s lease. The fleet rules are off (the
// retry budget's first-attempt count too): fleet_test.go covers them.
func testPolicy() Policy {
	p := DefaultPolicy()
	p.Jitter = 0
	p.RetryBudget = 0
	return p
}

// op is one event applied to a state: an Admit, a Report, an ExtendLease,
// a Force, a Reset or a bare Settle.
type op struct {
	kind     string
	nonce    string
	report   Report
	jitter   float64
	token    string
	ttl      int64
	override Override
	until    int64
	actor    string
	reason   string
}

func admitOp(nonce string) op             { return op{kind: "admit", nonce: nonce} }
func reportOp(r Report) op                { return op{kind: "report", report: r} }
func settleOp() op                        { return op{kind: "settle"} }
func extendOp(token string, ttl int64) op { return op{kind: "extend", token: token, ttl: ttl} }
func resetOp(actor, reason string) op {
	return op{kind: "reset", actor: actor, reason: reason}
}

// reportJ is a report whose breaker open (if it trips) uses jitter r.
func reportJ(r Report, jitter float64) op {
	return op{kind: "report", report: r, jitter: jitter}
}

func forceOp(o Override, until int64, actor, reason string) op {
	return op{kind: "force", override: o, until: until, actor: actor, reason: reason}
}

// result is everything one op returns.
type result struct {
	verdict Verdict
	report  ReportResult
	lease   Lease
	err     error
	events  []Event
}

func (o op) apply(t testing.TB, s *State, p Policy, now int64) result {
	t.Helper()
	var r result
	switch o.kind {
	case "admit":
		r.verdict, r.events = s.Admit(p, now, Attempt{Nonce: o.nonce})
	case "report":
		r.report, r.events = s.Report(p, now, o.report, o.jitter)
	case "extend":
		r.lease, r.events, r.err = s.ExtendLease(now, o.token, o.ttl)
	case "force":
		r.events = s.Force(now, o.override, o.until, o.actor, o.reason)
	case "reset":
		r.events = s.Reset(now, o.actor, o.reason)
	case "settle":
		r.events = s.Settle(now)
	default:
		t.Fatalf("unknown op %q", o.kind)
	}
	return r
}

// transitionCase is one (state, now, event) → state step.
type transitionCase struct {
	name   string
	policy func(p *Policy) // tweaks testPolicy; nil keeps it
	given  State
	now    int64
	do     op
	// want is the whole resulting state except the bookkeeping fields
	// (ChangedAt, UpdatedAt, Last*), which the harness checks by rule.
	want State
	// events are the events the step yields; At is always the step's now.
	events []Event
	// The op's own answer: verdict for admit, result for report, lease or
	// err for extend.
	verdict *Verdict
	result  *ReportResult
	lease   *Lease
	err     error
}

// ev is an event with no actor (time alone or a report caused it).
func ev(from, to Phase, cause Cause, rev uint64) Event {
	return Event{From: from, To: to, Cause: cause, Revision: rev}
}

// evAt is a timed transition, stamped with the instant it became due.
func evAt(at int64, from, to Phase, cause Cause, rev uint64) Event {
	return Event{At: at, From: from, To: to, Cause: cause, Revision: rev}
}

// evBy is an operator's event.
func evBy(from, to Phase, cause Cause, rev uint64, actor, reason string) Event {
	return Event{From: from, To: to, Cause: cause, Revision: rev, Actor: actor, Reason: reason}
}

// lease is a probe lease of the default policy (30 s TTL) with nonce "n".
func lease(rev uint64, slot int, granted int64) Lease {
	return Lease{Slot: slot, Token: LeaseToken(rev, slot, granted, "n"), Granted: granted, Expires: granted + 30_000}
}

// clone deep-copies a state, so that a case's given state is never aliased.
func clone(s State) State {
	s.Leases = slices.Clone(s.Leases)
	return s
}

func runTransitions(t *testing.T, cases []transitionCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := testPolicy()
			if tc.policy != nil {
				tc.policy(&p)
			}
			require.NoError(t, p.Validate())
			got := clone(tc.given)
			res := tc.do.apply(t, &got, p, tc.now)
			checkStep(t, tc, got, res)
		})
	}
}

func checkStep(t *testing.T, tc transitionCase, got State, res result) {
	t.Helper()

	// The op's own answer.
	switch tc.do.kind {
	case "admit":
		require.NotNil(t, tc.verdict, "an admit case states its verdict")
		assert.Equal(t, *tc.verdict, res.verdict, "verdict")
	case "report":
		require.NotNil(t, tc.result, "a report case states its result")
		assert.Equal(t, *tc.result, res.report, "report result")
	case "extend":
		if tc.err != nil {
			require.ErrorIs(t, res.err, tc.err)
		} else {
			require.NoError(t, res.err)
			require.NotNil(t, tc.lease, "a successful extend case states the lease")
			assert.Equal(t, *tc.lease, res.lease, "extended lease")
		}
	}

	// Events: exactly the expected ones, at now unless stated (timed
	// transitions are stamped with the instant they became due).
	want := make([]Event, len(tc.events))
	for i, e := range tc.events {
		if e.At == 0 {
			e.At = tc.now
		}
		want[i] = e
	}
	if len(want) == 0 {
		assert.Empty(t, res.events, "events")
	} else {
		assert.Equal(t, want, res.events, "events")
	}

	// Bookkeeping rules every op obeys.
	if tc.given.Revision > 0 || len(res.events) == 0 {
		assert.Equal(t, tc.given.Revision+uint64(len(res.events)), got.Revision, "revision grows by one per event")
	}
	if len(res.events) > 0 {
		assert.Equal(t, res.events[len(res.events)-1].At, got.ChangedAt, "ChangedAt is the last transition's time")
	} else {
		assert.Equal(t, tc.given.ChangedAt, got.ChangedAt, "ChangedAt without a transition")
	}
	if tc.do.kind == "report" {
		r := tc.do.report
		assert.Equal(t, tc.now, got.UpdatedAt, "UpdatedAt")
		assert.Equal(t, r.HTTPStatus, got.LastStatus, "LastStatus")
		assert.Equal(t, r.Outcome, got.LastOutcome, "LastOutcome")
		assert.Equal(t, r.ErrorCode, got.LastErrorCode, "LastErrorCode")
	} else {
		assert.Equal(t, tc.given.UpdatedAt, got.UpdatedAt, "UpdatedAt")
		assert.Equal(t, tc.given.LastStatus, got.LastStatus, "LastStatus")
		assert.Equal(t, tc.given.LastOutcome, got.LastOutcome, "LastOutcome")
		assert.Equal(t, tc.given.LastErrorCode, got.LastErrorCode, "LastErrorCode")
	}

	// The rest of the state, exactly.
	wantState := tc.want
	wantState.ChangedAt, wantState.UpdatedAt = got.ChangedAt, got.UpdatedAt
	wantState.LastStatus, wantState.LastOutcome, wantState.LastErrorCode = got.LastStatus, got.LastOutcome, got.LastErrorCode
	assert.Equal(t, normalize(wantState), normalize(got), "state")
}

// normalize makes an empty lease list nil: releasing the last lease leaves
// an empty slice, which means the same.
func normalize(s State) State {
	if len(s.Leases) == 0 {
		s.Leases = nil
	}
	return s
}
