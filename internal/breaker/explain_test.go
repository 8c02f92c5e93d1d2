package breaker

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExplain(t *testing.T) {
	t.Parallel()
	withBudget := func(p Policy) Policy {
		p.RetryBudget, p.RetryBudgetMin, p.FleetWindow = 0.5, 0, time.Second
		return p
	}
	withQuorum := func(p Policy) Policy {
		p.TripQuorum, p.FleetWindow = 3, time.Second
		return p
	}
	onlyConsecutive := func(p Policy) Policy {
		p.FailureRate = 0
		return p
	}
	tests := []struct {
		name   string
		policy func(Policy) Policy
		state  State
		recent []Event
		check  func(t *testing.T, e Explanation)
	}{
		{
			name:  "healthy",
			state: State{Phase: Closed, Revision: rev0, UpdatedAt: t0},
			check: func(t *testing.T, e Explanation) {
				assert.Empty(t, e.Reasons)
				assert.Equal(t, SeverityHealthy, e.Severity)
				assert.Equal(t, ReasonNone, e.Denies)
				assert.Equal(t, 5, e.FailuresToTrip, "5 consecutive failures, or 20 calls at 50 %: 5 first")
			},
		},
		{
			name:  "closed, four of five consecutive failures: the next trips",
			state: State{Phase: Closed, Revision: rev0, Consecutive: 4, Failures: 4, UpdatedAt: n},
			check: func(t *testing.T, e Explanation) {
				assert.Equal(t, 1, e.FailuresToTrip)
				require.Len(t, e.Rules, 2)
				assert.Equal(t, RuleState{Rule: RuleConsecutive, Value: 4, Threshold: 5, FailuresToTrip: 1}, e.Rules[0])
				assert.Equal(t, SeverityFailing, e.Severity)
				assert.Equal(t, []string{"4 of 5 consecutive failures, the next failure trips the breaker"}, e.Reasons)
			},
		},
		{
			name: "closed, failure rate: the window's calls need min_calls first",
			// 10 calls, 6 failed, in the current bucket: 10 more failures
			// reach 20 calls (16 failed, 80 %), and 60 % already trips the rate.
			state: State{Phase: Closed, Revision: rev0, Consecutive: 0, Failures: 6,
				Window: Window{Start: t0, CurCalls: 10, CurFails: 6}},
			policy: func(p Policy) Policy {
				p.ConsecutiveFailures = 0
				return p
			},
			check: func(t *testing.T, e Explanation) {
				require.Len(t, e.Rules, 1)
				r := e.Rules[0]
				assert.Equal(t, RuleFailureRate, r.Rule)
				assert.InDelta(t, 0.6, r.Value, 1e-9)
				assert.InDelta(t, 10, r.Calls, 1e-9)
				assert.Equal(t, 10, r.FailuresToTrip)
				assert.Equal(t, 10, e.FailuresToTrip)
				assert.Equal(t, SeverityFailing+9, e.Severity)
			},
		},
		{
			name:   "closed, the trip quorum holds the trip back",
			policy: withQuorum,
			state: State{Phase: Closed, Revision: rev0, Consecutive: 7, Failures: 7,
				Reporters: []Reporter{{ID: "a", At: n - 10}}},
			check: func(t *testing.T, e Explanation) {
				assert.Equal(t, 1, e.QuorumReporters)
				assert.Equal(t, 3, e.QuorumNeeded)
				assert.Equal(t, 2, e.FailuresToTrip, "the consecutive rule is met: two more reporters are not")
				assert.Contains(t, e.Reasons[0], "1 of 3 reporters (trip quorum)")
				assert.Contains(t, e.Reasons[0], "2 more failures trip the breaker")
			},
		},
		{
			name:   "open by the breaker, one rule on: that rule tripped",
			policy: onlyConsecutive,
			state:  State{Phase: Open, Cause: CauseBreaker, Revision: rev0, Reopens: 1, ChangedAt: n, OpenUntil: n + 10_000},
			check: func(t *testing.T, e Explanation) {
				assert.Equal(t, RuleConsecutive, e.Tripped)
				assert.Equal(t, []string{"5 consecutive failures tripped the breaker, open for 10s"}, e.Reasons)
				assert.Equal(t, SeverityOpen+2, e.Severity)
				assert.Equal(t, ReasonOpen, e.Denies)
				assert.Zero(t, e.FailuresToTrip)
			},
		},
		{
			name:  "open by the breaker, both rules on: unknown unless a probe failed",
			state: State{Phase: Open, Cause: CauseBreaker, Revision: rev0, Reopens: 1, ChangedAt: n, OpenUntil: n + 10_000},
			check: func(t *testing.T, e Explanation) {
				assert.Equal(t, RuleUnknown, e.Tripped)
				assert.Equal(t, "5 consecutive failures or a failure rate of 50% over 1m tripped the breaker, open for 10s", e.Reasons[0])
			},
		},
		{
			name:   "open by a probe's failure",
			state:  State{Phase: Open, Cause: CauseBreaker, Revision: rev0 + 2, Reopens: 2, ChangedAt: n, OpenUntil: n + 20_000},
			recent: []Event{{At: n, From: HalfOpen, To: Open, Cause: CauseBreaker, Revision: rev0 + 2}},
			check: func(t *testing.T, e Explanation) {
				assert.Equal(t, RuleProbeFailure, e.Tripped)
				assert.Equal(t, "the probe failed: the breaker re-opened, open for 20s (re-open 2)", e.Reasons[0])
			},
		},
		{
			name: "forced open: the operator and reason from the history",
			state: State{Phase: Open, Cause: CauseForced, Revision: rev0 + 1, Override: ForcedOpen, ChangedAt: n,
				OpenUntil: n + 60_000, OverrideUntil: n + 60_000},
			recent: []Event{{At: n, From: Closed, To: Open, Cause: CauseForced, Revision: rev0 + 1, Actor: "alice", Reason: "provider incident"}},
			check: func(t *testing.T, e Explanation) {
				assert.Equal(t, "alice", e.Actor)
				assert.Equal(t, "provider incident", e.Reason)
				assert.Equal(t, []string{"forced open by alice: provider incident"}, e.Reasons)
				assert.Equal(t, SeverityForcedOpen, e.Severity)
				assert.Less(t, e.Severity, SeverityHalfOpen, "forced open sorts with the open ones")
				assert.Equal(t, ReasonForcedOpen, e.Denies)
			},
		},
		{
			name:   "forced open: an older force's actor is not this one's",
			state:  State{Phase: Open, Cause: CauseForced, Revision: rev0 + 3, Override: ForcedOpen, ChangedAt: n},
			recent: []Event{{At: n - 5, From: Closed, To: Open, Cause: CauseForced, Revision: rev0 + 1, Actor: "alice", Reason: "old"}},
			check: func(t *testing.T, e Explanation) {
				assert.Empty(t, e.Actor)
				assert.Equal(t, []string{"forced open by an operator"}, e.Reasons)
			},
		},
		{
			name:   "forced closed",
			state:  State{Phase: Closed, Cause: CauseForced, Revision: rev0 + 1, Override: ForcedClosed, Consecutive: 3},
			recent: []Event{{At: n, From: Open, To: Closed, Cause: CauseForced, Revision: rev0 + 1, Actor: "bob"}},
			check: func(t *testing.T, e Explanation) {
				assert.Equal(t, []string{"forced closed by bob; calls admitted, failures ignored"}, e.Reasons)
				assert.Equal(t, SeverityForcedShut, e.Severity)
				assert.Zero(t, e.FailuresToTrip, "an override ignores failures")
			},
		},
		{
			name:  "half-open after a rate-limit cooldown",
			state: State{Phase: HalfOpen, Cause: CauseOpenExpired, Revision: rev0 + 2, ChangedAt: n},
			recent: []Event{
				{At: n, From: Open, To: HalfOpen, Cause: CauseOpenExpired, Revision: rev0 + 2},
				{At: n - 2000, From: Closed, To: Open, Cause: CauseRateLimit, Revision: rev0 + 1},
			},
			check: func(t *testing.T, e Explanation) {
				assert.Equal(t, CauseRateLimit, e.OpenedBy)
				assert.Equal(t, []string{"recovering from a rate-limit cooldown: the next call probes"}, e.Reasons)
				assert.Equal(t, SeverityHalfOpen, e.Severity)
			},
		},
		{
			name:  "half-open after a forced open ended",
			state: State{Phase: HalfOpen, Cause: CauseForceExpired, Revision: rev0 + 2, ChangedAt: n, Leases: []Lease{lease(rev0+2, 0, n)}},
			recent: []Event{
				{At: n, From: Open, To: HalfOpen, Cause: CauseForceExpired, Revision: rev0 + 2},
				{At: n - 2000, From: Closed, To: Open, Cause: CauseForced, Revision: rev0 + 1, Actor: "alice", Reason: "drill"},
			},
			check: func(t *testing.T, e Explanation) {
				assert.Equal(t, CauseForced, e.OpenedBy)
				assert.Equal(t, "alice", e.Actor)
				assert.Equal(t, []string{"recovering from a forced open by alice: drill: 1 probe lease out"}, e.Reasons)
				assert.Equal(t, ReasonProbeInFlight, e.Denies)
			},
		},
		{
			name:  "half-open without its history still knows a forced open",
			state: State{Phase: HalfOpen, Cause: CauseForceExpired, Revision: rev0 + 2, ChangedAt: n},
			check: func(t *testing.T, e Explanation) {
				assert.Equal(t, CauseForced, e.OpenedBy)
				assert.Equal(t, []string{"recovering from a forced open: the next call probes"}, e.Reasons)
			},
		},
		{
			name:   "an open that has ended is explained as the half-open it is",
			state:  State{Phase: Open, Cause: CauseAuth, Revision: rev0 + 1, ChangedAt: n - 5000, OpenUntil: n - 1},
			recent: []Event{{At: n - 5000, From: Closed, To: Open, Cause: CauseAuth, Revision: rev0 + 1}},
			check: func(t *testing.T, e Explanation) {
				assert.Equal(t, CauseAuth, e.OpenedBy)
				assert.Equal(t, []string{"recovering from a rejected credential: the next call probes"}, e.Reasons)
			},
		},
		{
			name: "auth before quota before breaker before overload before a cooldown",
			check: func(t *testing.T, _ Explanation) {
				p := testPolicy()
				var last int
				for i, c := range []Cause{CauseAuth, CauseQuota, CauseBreaker, CauseForced, CauseOverload, CauseRateLimit} {
					s := State{Phase: Open, Cause: c, Revision: rev0, OpenUntil: n + 1000, ChangedAt: n}
					if c == CauseForced {
						s.Override = ForcedOpen
					}
					sev := s.Explain(p, n, nil).Severity
					if i > 0 {
						assert.Greater(t, sev, last, "%s", c)
					}
					assert.Less(t, sev, SeverityHalfOpen, "%s", c)
					last = sev
				}
			},
		},
		{
			name:   "retry budget spent",
			policy: withBudget,
			// 4 first attempts allow 2 retries; 2 were admitted.
			state: State{Phase: Closed, Revision: rev0, Fleet: Fleet{Start: t0 + 1000, CurFirsts: 4, CurRetries: 2}},
			check: func(t *testing.T, e Explanation) {
				require.NotNil(t, e.Budget)
				assert.Equal(t, BudgetState{Retries: 2, Allowed: 2, Left: 0}, *e.Budget)
				assert.Equal(t, SeverityFleetDeny, e.Severity)
				assert.Equal(t, []string{"retry budget spent (2 of 2 retries over 1s): retries are denied (retry_budget)"}, e.Reasons)
			},
		},
		{
			name:   "retry budget with room",
			policy: withBudget,
			state:  State{Phase: Closed, Revision: rev0, Fleet: Fleet{Start: t0 + 1000, CurFirsts: 9, CurRetries: 1}},
			check: func(t *testing.T, e Explanation) {
				require.NotNil(t, e.Budget)
				assert.Equal(t, 3, e.Budget.Left, "4.5 allowed, 1 spent")
				assert.Empty(t, e.Reasons)
			},
		},
		{
			name: "the throttle applies while closed",
			policy: func(p Policy) Policy {
				p.ThrottleK, p.FleetWindow = 2, time.Second
				return p
			},
			state: State{Phase: Closed, Revision: rev0, Fleet: Fleet{Start: t0 + 1000, CurRequests: 9, CurAccepts: 1}},
			check: func(t *testing.T, e Explanation) {
				assert.InDelta(t, 0.7, e.ThrottleProbability, 1e-9)
				assert.True(t, e.Throttling)
				assert.Equal(t, []string{"throttling 70% of calls (throttled)"}, e.Reasons)
			},
		},
		{
			name: "shadow mode says so",
			policy: func(p Policy) Policy {
				p.Shadow = true
				return p
			},
			state: State{Phase: Open, Cause: CauseQuota, Revision: rev0, LastStatus: 429, LastErrorCode: "insufficient_quota", ChangedAt: n, OpenUntil: n + 3_600_000},
			check: func(t *testing.T, e Explanation) {
				assert.Equal(t, []string{"quota exhausted (429) insufficient_quota: blocked for 1h",
					"shadow mode: the policy's denials are not enforced, calls are allowed"}, e.Reasons)
				assert.Equal(t, ReasonQuota, e.Denies, "before shadow mode")
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := testPolicy()
			if tc.policy != nil {
				p = tc.policy(p)
			}
			require.NoError(t, p.Validate())
			s := clone(tc.state)
			e := s.Explain(p, n, tc.recent)
			assert.Equal(t, tc.state, s, "Explain changes nothing")
			tc.check(t, e)
		})
	}
}

// TestExplainAgreesWithTheMachine drives random states through the machine
// and checks each explanation against what the machine does next: the
// FailuresToTrip-th failure opens it and none before; Budget.Left retries
// are admitted and the next is denied; Denies is Admit's answer; OpenedBy
// and Actor are the transitions that led here.
func TestExplainAgreesWithTheMachine(t *testing.T) {
	t.Parallel()
	const (
		seeds     = 4
		sequences = 40
		steps     = 80
	)
	for seed := range uint64(seeds) {
		t.Run("seed "+strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 0xe8a1))
			for seq := range sequences {
				explainSequence(t, rng, fmt.Sprintf("seed %d seq %d", seed, seq), steps)
			}
		})
	}
}

func explainSequence(t *testing.T, rng *rand.Rand, name string, steps int) {
	t.Helper()
	p := randomPolicy(rng)
	p.FleetWindow = time.Duration([]int{100, 1000}[rng.IntN(2)]) * time.Millisecond
	p.RetryBudget = []float64{0, 0.2, 1}[rng.IntN(3)]
	p.RetryBudgetMin = rng.IntN(3)
	p.ThrottleK = []float64{0, 0, 1.5}[rng.IntN(3)]
	p.TripQuorum = []int{0, 0, 2, 3}[rng.IntN(4)]
	p.Shadow = rng.IntN(5) == 0
	require.NoError(t, p.Validate(), name)
	var (
		s      State
		now    = t0 + rng.Int64N(1_000_000)
		recent []Event // newest first
		actor  string  // of the last Force
	)
	reporters := []string{"a", "b", "c", "d"}
	for k := range steps {
		var evs []Event
		switch x := rng.IntN(100); {
		case x < 15:
			now += []int64{1, 7, 49, 120, 333, 1200}[rng.IntN(6)]
		case x < 40:
			_, evs = s.Admit(p, now, Attempt{Nonce: "n" + strconv.Itoa(k), Retry: rng.IntN(3) == 0, Draw: rng.Float64()})
		case x < 90:
			r := Report{Outcome: randomOutcome(rng), HTTPStatus: 500, Revision: s.Revision,
				Retry: rng.IntN(4) == 0, Reporter: reporters[rng.IntN(len(reporters))]}
			if len(s.Leases) > 0 && rng.IntN(2) == 0 {
				r.LeaseToken = s.Leases[0].Token
			}
			_, evs = s.Report(p, now, r, rng.Float64())
		case x < 96:
			var until int64
			if rng.IntN(2) == 0 {
				until = now + int64(1+rng.IntN(1000))
			}
			actor = "op" + strconv.Itoa(k)
			evs = s.Force(now, Override(rng.IntN(3)), until, actor, "why "+actor)
		default:
			evs = s.Reset(now, "bob", "reset")
		}
		for _, ev := range evs {
			recent = slices.Insert(recent, 0, ev)
		}
		checkExplanation(t, fmt.Sprintf("%s step %d", name, k), p, s, now, recent, actor)
	}
}

func checkExplanation(t *testing.T, name string, p Policy, s State, now int64, recent []Event, actor string) {
	t.Helper()
	before := clone(s)
	before.Reporters = slices.Clone(s.Reporters)
	e := s.Explain(p, now, recent)
	if !reflect.DeepEqual(before, s) {
		require.Equal(t, before, s, "%s: Explain changed the state", name)
	}
	// What the machine sees: s settled at now, with every timed event.
	c := clone(s)
	c.Reporters = slices.Clone(s.Reporters)
	for _, ev := range c.Settle(now) {
		recent = slices.Insert(recent, 0, ev)
	}
	strict := p
	strict.Shadow = false

	// Denies is Admit's answer to a first attempt the throttle lets by.
	a := clone(c)
	v, _ := a.Admit(strict, now, Attempt{Draw: 1})
	want := ReasonNone
	if v.Decision == Deny {
		want = v.Reason
	}
	require.Equal(t, want, e.Denies, "%s: Denies", name)

	// The FailuresToTrip-th failure from new reporters opens it, and no
	// failure before it does.
	tries := e.FailuresToTrip
	if tries == 0 {
		tries = 30
	}
	if tries <= 200 {
		f := clone(c)
		f.Reporters = slices.Clone(c.Reporters)
		opened := 0
		for i := 1; i <= tries && opened == 0; i++ {
			f.Report(strict, now, Report{Outcome: OutcomeTransientFailure, Revision: f.Revision, Reporter: "new" + strconv.Itoa(i)}, 0)
			if f.phase() == Open && c.phase() != Open {
				opened = i
			}
		}
		require.Equal(t, e.FailuresToTrip, opened, "%s: FailuresToTrip %d, the machine opened after %d (state %+v)",
			name, e.FailuresToTrip, opened, c)
	}

	// Budget.Left retries are admitted by the budget, the next is not (a
	// connection never seen counts no Admit).
	if e.Budget != nil && e.Budget.Left <= 100 && c.Override == NoOverride && c.phase() == Closed && c.seen() {
		b := clone(c)
		for i := range e.Budget.Left + 1 {
			v, _ := b.Admit(strict, now, Attempt{Retry: true, Draw: 1})
			denied := v.Decision == Deny && v.Reason == ReasonRetryBudget
			require.Equal(t, i == e.Budget.Left, denied, "%s: retry %d of Left %d", name, i+1, e.Budget.Left)
		}
	}
	require.Equal(t, p.RetryBudget > 0, e.Budget != nil, "%s: Budget", name)

	// The throttle applies while closed, without an override.
	require.Equal(t, c.phase() == Closed && c.Override == NoOverride && e.ThrottleProbability > 0, e.Throttling, "%s", name)
	if e.Throttling {
		th := clone(c)
		v, _ := th.Admit(strict, now, Attempt{Draw: e.ThrottleProbability / 2})
		require.Equal(t, ReasonThrottled, v.Reason, "%s: a draw under the probability is throttled", name)
	}

	// The history's facts: the open a half-open connection recovers from,
	// the operator of an override.
	if c.phase() == HalfOpen {
		var cause Cause
		for _, ev := range recent {
			if ev.To == Open {
				cause = ev.Cause
				break
			}
		}
		require.Equal(t, cause, e.OpenedBy, "%s: OpenedBy", name)
	}
	if c.Override != NoOverride {
		require.Equal(t, actor, e.Actor, "%s: Actor", name)
	}

	// Open (forced open too) sorts before half-open, before the rest.
	switch {
	case c.Override == ForcedOpen || (c.phase() == Open && c.Override == NoOverride):
		require.Less(t, e.Severity, SeverityHalfOpen, "%s", name)
	case c.phase() == HalfOpen && c.Override == NoOverride:
		require.Equal(t, SeverityHalfOpen, e.Severity, "%s", name)
	default:
		require.Greater(t, e.Severity, SeverityHalfOpen, "%s", name)
	}
	require.Equal(t, e.Severity == SeverityHealthy, len(e.Reasons) == 0 || (p.Shadow && len(e.Reasons) == 1),
		"%s: a healthy connection has no reasons (%q)", name, e.Reasons)
}
