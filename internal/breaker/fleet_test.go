package breaker

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fleetTestPolicy is testPolicy with a 1 s fleet window (t0 starts one of
// its buckets) and the fleet rules off; each test turns its rule on.
func fleetTestPolicy() Policy {
	p := testPolicy()
	p.FleetWindow = time.Second
	p.RetryBudgetMin = 0
	return p
}

// rev0 is the revision of the tests' states.
const rev0 = uint64(t0)

// reported is a state that exists (it was reported on once) and is closed.
func reported() *State { return &State{Phase: Closed, Revision: rev0, UpdatedAt: t0} }

func TestRetryBudget(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		ratio   float64
		min     int
		firsts  int64 // first attempts reported at t0
		allowed int   // retries admitted before the first denial, at t0+500
	}{
		{"20 % of 10 first attempts", 0.2, 0, 10, 2},
		{"20 % of 14 rounds down", 0.2, 0, 14, 2},
		{"the minimum per second when quiet", 0.2, 3, 0, 3},
		{"the ratio when above the minimum", 0.5, 3, 20, 10},
		{"the minimum when above the ratio", 0.1, 4, 10, 4},
		{"no first attempts and no minimum", 0.2, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := fleetTestPolicy()
			p.RetryBudget, p.RetryBudgetMin = tt.ratio, tt.min
			require.NoError(t, p.Validate())
			s := reported()
			if tt.firsts > 0 {
				s.Report(p, t0, Report{Revision: s.Revision, Outcome: OutcomeSuccess, Count: tt.firsts}, 0)
			}
			now := t0 + 500
			for i := range tt.allowed {
				v, _ := s.Admit(p, now, Attempt{Retry: true})
				require.Equal(t, Allow, v.Decision, "retry %d", i+1)
			}
			v, _ := s.Admit(p, now, Attempt{Retry: true})
			assert.Equal(t, Deny, v.Decision)
			assert.Equal(t, ReasonRetryBudget, v.Reason)
			assert.Equal(t, int64(500), v.RetryAfter, "until the bucket ends")
			assert.Equal(t, int64(tt.allowed), s.Fleet.CurRetries, "only admitted retries are spent")
			first, _ := s.Admit(p, now, Attempt{})
			assert.Equal(t, Allow, first.Decision, "a first attempt is never charged")
		})
	}
}

func TestRetryBudgetCounts(t *testing.T) {
	t.Parallel()
	p := fleetTestPolicy()
	p.RetryBudget = 0.5
	s := reported()
	rev := s.Revision
	s.Report(p, t0, Report{Revision: rev, Outcome: OutcomeSuccess, Count: 4}, 0)
	s.Report(p, t0, Report{Revision: rev, Outcome: OutcomeSuccess, Retry: true}, 0)
	s.Report(p, t0, Report{Revision: rev, Outcome: OutcomeCanceled}, 0)
	s.Report(p, t0, Report{Revision: rev, Outcome: OutcomeTransientFailure}, 0)
	s.Report(p, t0, Report{Revision: rev + 7, Outcome: OutcomeClientError}, 0)
	assert.Equal(t, int64(6), s.Fleet.CurFirsts, "a batch of 4, a failure and a stale report; not a retry, not a cancel")

	// The older bucket weighs its overlap: at t0+1500 half of it is left.
	s.Fleet = Fleet{Start: t0, CurFirsts: 8}
	assert.Equal(t, 4.0, s.FleetCounts(p, t0+1500).FirstAttempts)
	assert.True(t, s.budgetAllows(p, t0+1500), "0.5 × 4 = 2 retries")
	s.Fleet = Fleet{Start: t0 + 1000, PrevFirsts: 8, CurRetries: 2}
	assert.False(t, s.budgetAllows(p, t0+1500), "the third retry")
	assert.False(t, s.budgetAllows(p, t0+2000), "a bucket later the spent retries weigh all and the 8 nothing")
	s.Fleet = Fleet{Start: t0 + 1000, CurFirsts: 8, CurRetries: 2}
	assert.True(t, s.budgetAllows(p, t0+2000), "in the older bucket they keep their proportion: 0.5 × 8 ≥ 3")

	// Transitions leave the fleet's counts alone.
	s.Fleet = Fleet{Start: t0, CurFirsts: 3}
	s.Reset(t0+10, "alice", "test")
	s.trip(p, t0+20, 0)
	assert.Equal(t, Fleet{Start: t0, CurFirsts: 3}, s.Fleet)
}

func TestRetryBudgetHalfOpen(t *testing.T) {
	t.Parallel()
	p := fleetTestPolicy()
	p.RetryBudget = 0.2
	s := &State{Phase: HalfOpen, Revision: rev0, UpdatedAt: t0}
	v, _ := s.Admit(p, n, Attempt{Retry: true, Nonce: "r"})
	assert.Equal(t, ReasonRetryBudget, v.Reason)
	assert.Nil(t, v.Lease)
	assert.Empty(t, s.Leases, "a retry over the budget takes no probe lease")
	v, _ = s.Admit(p, n, Attempt{Nonce: "f"})
	assert.Equal(t, AllowProbe, v.Decision, "the probe goes to a first attempt")

	// An Admit never creates a state: a connection never reported counts
	// nothing, even for a retry it admits.
	p.RetryBudgetMin = 5
	fresh := &State{}
	v, _ = fresh.Admit(p, n, Attempt{Retry: true})
	assert.Equal(t, Allow, v.Decision)
	assert.Equal(t, State{}, *fresh)
}

func TestThrottle(t *testing.T) {
	t.Parallel()
	p := fleetTestPolicy()
	p.ThrottleK, p.ConsecutiveFailures, p.FailureRate = 2, 0, 0 // the breaker never trips here
	require.NoError(t, p.Validate())
	s := reported()
	rev := s.Revision
	for i := range 10 {
		o := OutcomeTransientFailure
		if i < 2 {
			o = OutcomeSuccess
		}
		s.Report(p, t0, Report{Revision: rev, Outcome: o, Reporter: strconv.Itoa(i)}, 0)
	}
	// 10 requests, 2 accepts: (10 − 2·2) / (10 + 1) = 6/11, in units of
	// one request per window.
	prob := s.ThrottleProbability(p, t0+100)
	assert.InDelta(t, 6.0/11, prob, 1e-12)

	v, _ := s.Admit(p, t0+100, Attempt{Draw: prob + 0.01})
	assert.Equal(t, Allow, v.Decision, "a draw above the probability goes")
	assert.Equal(t, int64(10), s.Fleet.CurRequests, "an allowed call counts when reported")
	v, _ = s.Admit(p, t0+100, Attempt{Draw: prob - 0.01})
	assert.Equal(t, Deny, v.Decision)
	assert.Equal(t, ReasonThrottled, v.Reason)
	assert.Equal(t, int64(ThrottleRetryAfter), v.RetryAfter)
	assert.Equal(t, int64(11), s.Fleet.CurRequests, "a rejected call is one of the requests")
	assert.Greater(t, s.ThrottleProbability(p, t0+100), prob, "rejections raise the probability")

	s.Report(p, t0+200, Report{Revision: rev, Outcome: OutcomeClientError}, 0)
	assert.Equal(t, int64(3), s.Fleet.CurAccepts, "a client error is an accept")

	healthy := reported()
	for range 5 {
		healthy.Report(p, t0, Report{Revision: rev, Outcome: OutcomeSuccess}, 0)
	}
	assert.Zero(t, healthy.ThrottleProbability(p, t0+100), "healthy: no rejection")
	v, _ = healthy.Admit(p, t0+100, Attempt{Draw: 0})
	assert.Equal(t, Allow, v.Decision, "probability 0 rejects nothing, even a zero draw")

	off := fleetTestPolicy()
	assert.Zero(t, s.ThrottleProbability(off, t0+100), "off")

	forced := *s
	forced.Override = ForcedClosed
	v, _ = forced.Admit(p, t0+100, Attempt{})
	assert.Equal(t, Allow, v.Decision, "forced closed admits every call")

	open := *s
	open.Phase, open.OpenUntil = Open, t0+5_000
	v, _ = open.Admit(p, t0+100, Attempt{})
	assert.Equal(t, ReasonOpen, v.Reason, "open: the breaker's reason, not the throttle's")
}

func TestTripQuorum(t *testing.T) {
	t.Parallel()
	p := fleetTestPolicy()
	p.TripQuorum, p.ConsecutiveFailures, p.FailureRate = 2, 3, 0
	fail := func(s *State, at int64, who string) []Event {
		_, evs := s.Report(p, at, Report{Revision: s.Revision, Outcome: OutcomeTransientFailure, Reporter: who}, 0)
		return evs
	}
	t.Run("one reporter cannot trip", func(t *testing.T) {
		t.Parallel()
		s := reported()
		for i := range 10 {
			require.Empty(t, fail(s, t0+int64(i), "broken-pod"))
		}
		assert.Equal(t, Closed, s.phase())
		assert.Equal(t, 10, s.Consecutive, "the rule fired; the quorum held it")
		assert.Equal(t, 1, s.FailureReporters(p, t0+10))
		evs := fail(s, t0+20, "other-pod")
		require.Len(t, evs, 1, "a second reporter makes the quorum")
		assert.Equal(t, CauseBreaker, evs[0].Cause)
		assert.Empty(t, s.Reporters, "a trip forgets the reporters")
	})
	t.Run("reporters outside the window are forgotten", func(t *testing.T) {
		t.Parallel()
		s := reported()
		fail(s, t0, "a")
		fail(s, t0+1, "a")
		assert.Empty(t, fail(s, t0+1001, "b"), "a's failures are a window old")
		assert.Equal(t, []Reporter{{ID: "b", At: t0 + 1001}}, s.Reporters)
		assert.NotEmpty(t, fail(s, t0+1500, "c"))
	})
	t.Run("reports without a reporter are one reporter", func(t *testing.T) {
		t.Parallel()
		s := reported()
		for i := range 5 {
			fail(s, t0+int64(i), "")
		}
		assert.Equal(t, Closed, s.phase())
		assert.NotEmpty(t, fail(s, t0+9, "x"))
	})
	t.Run("only the quorum's latest are kept", func(t *testing.T) {
		t.Parallel()
		q := p
		q.TripQuorum, q.ConsecutiveFailures = 3, 100
		s := reported()
		for i, who := range []string{"a", "b", "a", "c", "d"} {
			s.Report(q, t0+int64(i), Report{Revision: s.Revision, Outcome: OutcomeTransientFailure, Reporter: who}, 0)
		}
		assert.Equal(t, []Reporter{{"a", t0 + 2}, {"c", t0 + 3}, {"d", t0 + 4}}, s.Reporters)
	})
	t.Run("explicit answers stay authoritative from one reporter", func(t *testing.T) {
		t.Parallel()
		for _, o := range []Outcome{OutcomeRateLimited, OutcomeOverloaded, OutcomeQuotaExhausted, OutcomeAuthFailure} {
			s := reported()
			_, evs := s.Report(p, t0, Report{Revision: s.Revision, Outcome: o, RetryAfter: 1000, Reporter: "one"}, 0)
			require.Len(t, evs, 1, "%s", o)
			assert.Equal(t, Open, s.phase(), "%s", o)
		}
	})
	t.Run("a half-open probe's failure re-opens from one reporter", func(t *testing.T) {
		t.Parallel()
		s := &State{Phase: HalfOpen, Revision: rev0, UpdatedAt: t0}
		v, _ := s.Admit(p, n, Attempt{Nonce: "p"})
		_, evs := s.Report(p, n+1, Report{Revision: s.Revision, LeaseToken: v.Lease.Token,
			Outcome: OutcomeTransientFailure, Reporter: "one"}, 0)
		require.Len(t, evs, 1)
		assert.Equal(t, Open, s.phase())
	})
}

func TestShadow(t *testing.T) {
	t.Parallel()
	p := fleetTestPolicy()
	p.Shadow, p.ThrottleK, p.RetryBudget = true, 2, 0.2
	tests := []struct {
		name   string
		state  State
		a      Attempt
		reason DenyReason
		after  int64
	}{
		{"open", State{Phase: Open, Cause: CauseBreaker, Revision: rev0, OpenUntil: n + 4000}, Attempt{}, ReasonOpen, 4000},
		{"cooling down", State{Phase: Open, Cause: CauseRateLimit, Revision: rev0, OpenUntil: n + 700}, Attempt{}, ReasonCooldown, 700},
		{"probe in flight", State{Phase: HalfOpen, Revision: rev0, Leases: []Lease{{Token: "x", Expires: n + 30}}}, Attempt{},
			ReasonProbeInFlight, 30},
		{"throttled", State{Phase: Closed, Revision: rev0, UpdatedAt: t0, Fleet: Fleet{Start: t0, CurRequests: 9}}, Attempt{},
			ReasonThrottled, ThrottleRetryAfter},
		{"retry over budget", State{Phase: Closed, Revision: rev0, UpdatedAt: t0}, Attempt{Retry: true, Draw: 0.999},
			ReasonRetryBudget, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := tt.state
			v, _ := s.Admit(p, n, tt.a)
			assert.Equal(t, Allow, v.Decision, "shadow allows what it would deny")
			assert.Equal(t, ReasonNone, v.Reason)
			assert.Equal(t, tt.reason, v.Shadowed)
			if tt.after > 0 {
				assert.Equal(t, tt.after, v.ShadowRetryAfter)
			}
			assert.Equal(t, int64(0), s.Fleet.CurRequests-tt.state.Fleet.CurRequests,
				"a call shadow allows is counted when it is reported, not as a rejection")
		})
	}
	t.Run("transitions are still computed", func(t *testing.T) {
		t.Parallel()
		s := reported()
		var evs []Event
		for range 5 {
			_, e := s.Report(p, n, Report{Revision: s.Revision, Outcome: OutcomeTransientFailure}, 0)
			evs = append(evs, e...)
		}
		require.Len(t, evs, 1)
		assert.Equal(t, Open, s.phase())
	})
	t.Run("operator overrides are enforced", func(t *testing.T) {
		t.Parallel()
		s := reported()
		s.Force(n, ForcedOpen, 0, "alice", "incident")
		v, _ := s.Admit(p, n+1, Attempt{})
		assert.Equal(t, Deny, v.Decision)
		assert.Equal(t, ReasonForcedOpen, v.Reason)
		assert.Equal(t, ReasonNone, v.Shadowed)
	})
}

func TestFleetPolicyValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(p *Policy)
		want string // "" accepts
	}{
		{"defaults", func(*Policy) {}, ""},
		{"throttle K 2", func(p *Policy) { p.ThrottleK = 2 }, ""},
		{"throttle K below 1", func(p *Policy) { p.ThrottleK = 0.5 }, "throttle_k must be 0 (off) or in [1, 10], got 0.5"},
		{"throttle K above 10", func(p *Policy) { p.ThrottleK = 11 }, "throttle_k must be in [0, 10], got 11"},
		{"budget above 1", func(p *Policy) { p.RetryBudget = 1.5 }, "retry_budget must be in [0, 1], got 1.5"},
		{"budget below a basis point", func(p *Policy) { p.RetryBudget = 0.00001 }, "retry_budget must be at least 0.0001"},
		{"quorum above 16", func(p *Policy) { p.TripQuorum = 17 }, "trip_quorum must be in [0, 16], got 17"},
		{"no fleet window while a rule is on", func(p *Policy) { p.FleetWindow = 0 },
			"fleet_window must be in [1ms, 10m0s] while retry_budget, throttle_k or trip_quorum is on, got 0s"},
		{"no fleet window with every rule off", func(p *Policy) { p.FleetWindow, p.RetryBudget = 0, 0 }, ""},
		{"a quorum of 1 reads no window", func(p *Policy) { p.FleetWindow, p.RetryBudget, p.TripQuorum = 0, 0, 1 }, ""},
		{"fleet window above 10m", func(p *Policy) { p.FleetWindow = 11 * time.Minute },
			"fleet_window must be in [1ms, 10m0s] while"},
		{"minimum above 1000", func(p *Policy) { p.RetryBudgetMin = 1001 }, "retry_budget_min must be in [0, 1000], got 1001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := DefaultPolicy()
			tt.edit(&p)
			err := p.Validate()
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidPolicy)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestSwitchKnob(t *testing.T) {
	t.Parallel()
	k, ok := KnobByKey("shadow")
	require.True(t, ok)
	assert.Equal(t, Switch, k.Kind)
	for in, want := range map[string]float64{"true": 1, "false": 0, "1": 1, "0": 0} {
		v, err := k.Parse(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, v, in)
	}
	_, err := k.Parse("yes please")
	assert.ErrorContains(t, err, "is not true or false")
	p := DefaultPolicy()
	k.Set(&p, 1)
	assert.True(t, p.Shadow)
	assert.Equal(t, 1.0, k.Get(p))
	assert.Equal(t, "true", k.String(1))
	assert.Equal(t, "true or false", k.Bounds())
}
