package breaker

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TripRule names one of the breaker's trip rules. The numbers match the
// wire enum.
type TripRule uint8

// Trip rules.
const (
	RuleUnknown TripRule = 0
	// RuleConsecutive: Policy.ConsecutiveFailures transient failures in a row.
	RuleConsecutive TripRule = 1
	// RuleFailureRate: Policy.FailureRate over Policy.Window, once
	// Policy.MinCalls calls are seen.
	RuleFailureRate TripRule = 2
	// RuleProbeFailure: a half-open connection's probe failed.
	RuleProbeFailure TripRule = 3
)

var tripRuleNames = [...]string{"unknown", "consecutive_failures", "failure_rate", "probe_failure"}

// String returns the rule's snake_case name.
func (r TripRule) String() string { return name(tripRuleNames[:], r, "rule") }

// RuleState is one trip rule of a policy and where a closed connection
// stands against it.
type RuleState struct {
	Rule TripRule
	// Value is the consecutive failures, or the failure fraction over the
	// window (the older bucket weighted by its overlap); Threshold the
	// value at which the rule trips.
	Value, Threshold float64
	// Calls is the failure-rate window's calls (weighted), MinCalls the
	// least it needs.
	Calls    float64
	MinCalls int
	// FailuresToTrip is how many transient failures in a row trip this
	// rule by itself (the trip quorum aside); 0 when none can now (a
	// failure rate of 1 with a success in the window).
	FailuresToTrip int
}

// BudgetState is where a connection stands against its fleet retry
// budget.
type BudgetState struct {
	// Retries admitted and retries allowed over the fleet window, in calls
	// (the older bucket weighted by its overlap).
	Retries, Allowed float64
	// Left is how many more retries fit now: 0 means the next is denied.
	Left int
}

// Severity ranks, lower first: what the dashboard and cooldownctl sort by.
// Open connections rank by their cause (SeverityOpen + causeRank),
// failing ones by how close they are to a trip.
const (
	SeverityOpen       = 0
	SeverityHalfOpen   = 10
	SeverityForcedOpen = SeverityOpen + 3
	SeverityForcedShut = 20
	SeverityFleetDeny  = 30
	SeverityFailing    = 40
	SeverityHealthy    = 50
)

// Explanation is why a connection is in its state under its policy, and
// how far it is from the next rule: [State.Explain] computes it once, on
// the server, and every reader displays it.
type Explanation struct {
	// Reasons say why in words, most severe first; none for a healthy
	// connection.
	Reasons []string
	// Severity is the connection's sort rank, lower first (the Severity
	// constants).
	Severity int
	// Tripped is the rule that tripped the breaker of a connection open by
	// CauseBreaker (or, half-open, of the open it recovers from);
	// RuleUnknown when both rules are on and the trip reset the counts
	// that would tell.
	Tripped TripRule
	// Rules are the policy's trip rules that are on.
	Rules []RuleState
	// FailuresToTrip is how many transient failures in a row, each from a
	// reporter new to the trip quorum, trip the breaker now; 0 when none
	// does (not closed, an override, every rule off). 1: the next one.
	FailuresToTrip int
	// Budget is the retry budget; nil when the policy has none.
	Budget *BudgetState
	// ThrottleProbability is the adaptive throttle's rejection probability
	// now; Throttling says it applies to calls (closed, no override).
	ThrottleProbability float64
	Throttling          bool
	// QuorumReporters are the distinct reporters of transient failures
	// within the fleet window; QuorumNeeded how many trip (0: off).
	QuorumReporters, QuorumNeeded int
	// OpenedBy is, for a half-open connection, the cause of the open it
	// recovers from (CauseNone when its history no longer says).
	OpenedBy Cause
	// Actor and Reason name the operator of a forced state (or of the
	// forced open a half-open connection recovers from), from its history.
	Actor, Reason string
	// Denies is what an Admit of a first attempt is denied with now,
	// before shadow mode (ReasonNone: allowed; the throttle's draw aside).
	Denies DenyReason
}

// Explain explains s at now under p. recent are the connection's latest
// transitions, newest first (nil when not read): they name the operator
// of a forced state, the cause of the open a half-open connection
// recovers from and whether a breaker open was a probe's failure; the
// state alone does not keep them. Explain changes nothing: it reads a
// copy of s, settled at now.
func (s *State) Explain(p Policy, now int64, recent []Event) Explanation {
	c := *s
	c.Leases, c.Reporters = slices.Clone(s.Leases), slices.Clone(s.Reporters)
	c.Settle(now)
	e := Explanation{ThrottleProbability: c.ThrottleProbability(p, now)}
	phase := c.phase()
	closed := phase == Closed && c.Override == NoOverride

	// What an Admit of a first attempt gets, from the machine itself (a
	// copy, never throttled: the throttle's share is ThrottleProbability).
	ac := c
	ac.Leases, ac.Reporters = slices.Clone(c.Leases), nil
	noShadow := p
	noShadow.Shadow = false
	if v, _ := ac.Admit(noShadow, now, Attempt{Draw: 1}); v.Decision == Deny {
		e.Denies = v.Reason
	}
	e.Throttling = closed && e.ThrottleProbability > 0

	if p.TripQuorum > 1 {
		e.QuorumNeeded, e.QuorumReporters = p.TripQuorum, c.FailureReporters(p, now)
	}
	e.Rules = c.ruleStates(p, now)
	if closed {
		e.FailuresToTrip = c.failuresToTrip(p, now, e.Rules, e.QuorumReporters)
	}
	if bp := p.RetryBudgetBasisPoints(); bp > 0 {
		e.Budget = c.budgetState(p, now, bp)
	}
	c.history(&e, recent)
	if phase == Open && c.Cause == CauseBreaker && e.Tripped == RuleUnknown {
		e.Tripped = onlyRule(p)
	}
	e.Severity = c.severity(e)
	e.Reasons = c.reasons(p, e)
	return e
}

// history reads what the state forgets from the connection's latest
// transitions (newest first): the operator of the current override, and
// the open a half-open connection recovers from. Only events of the
// current life count: an override's is at the current revision (nothing
// moves a forced connection), a half-open's open at the one before.
func (s *State) history(e *Explanation, recent []Event) {
	phase := s.phase()
	switch {
	case s.Override != NoOverride:
		for _, ev := range recent {
			if ev.Cause == CauseForced && ev.Revision == s.Revision {
				e.Actor, e.Reason = ev.Actor, ev.Reason
				break
			}
		}
	case phase == HalfOpen:
		if s.Cause == CauseForceExpired {
			e.OpenedBy = CauseForced
		}
		for _, ev := range recent {
			if ev.To == Open && ev.Revision == s.Revision-1 {
				e.OpenedBy = ev.Cause
				e.Actor, e.Reason = ev.Actor, ev.Reason
				if ev.Cause == CauseBreaker && ev.From == HalfOpen {
					e.Tripped = RuleProbeFailure
				}
				break
			}
		}
	case phase == Open && s.Cause == CauseBreaker:
		for _, ev := range recent {
			if ev.To == Open && ev.Revision == s.Revision && ev.From == HalfOpen {
				e.Tripped = RuleProbeFailure
				break
			}
		}
	}
}

// onlyRule is the policy's one trip rule that is on, RuleUnknown when
// both are (or neither).
func onlyRule(p Policy) TripRule {
	cons, rate := p.ConsecutiveFailures > 0, p.RateBasisPoints() > 0
	switch {
	case cons && !rate:
		return RuleConsecutive
	case rate && !cons:
		return RuleFailureRate
	}
	return RuleUnknown
}

// ruleStates are the policy's trip rules that are on, as of now.
func (s *State) ruleStates(p Policy, now int64) []RuleState {
	var out []RuleState
	if cf := p.ConsecutiveFailures; cf > 0 {
		out = append(out, RuleState{Rule: RuleConsecutive, Value: float64(s.Consecutive), Threshold: float64(cf),
			FailuresToTrip: max(cf-s.Consecutive, 1)})
	}
	if bp := p.RateBasisPoints(); bp > 0 {
		// The window as a failure at now would see it: rotated.
		r := *s
		r.rotate(p, now)
		w := ms(p.Window)
		el := now - r.Window.Start
		calls := weighted(r.Window.PrevCalls, r.Window.CurCalls, w, el)
		fails := weighted(r.Window.PrevFails, r.Window.CurFails, w, el)
		rs := RuleState{Rule: RuleFailureRate, Threshold: float64(bp) / 10000, Calls: float64(calls) / float64(w),
			MinCalls: p.MinCalls}
		if calls > 0 {
			rs.Value = float64(fails) / float64(calls)
		}
		// k failures add k·w to both weighted counts: the least k with
		// calls + k·w ≥ MinCalls·w and (fails + k·w)·10000 ≥ bp·(calls + k·w).
		k := max(ceilDiv(int64(p.MinCalls)*w-calls, w), 1)
		need := bp*calls - 10000*fails
		switch {
		case need <= 0:
		case bp >= 10000:
			k = 0 // a rate of 1 with a success in the window: no failure trips it
		default:
			k = max(k, ceilDiv(need, w*(10000-bp)))
		}
		rs.FailuresToTrip = int(min(k, MaxCount))
		out = append(out, rs)
	}
	return out
}

// failuresToTrip is how many transient failures in a row, from reporters
// new to the quorum, trip a closed breaker: the first rule to trip, once
// the quorum is met (the rules only grow with each failure).
func (s *State) failuresToTrip(p Policy, now int64, rules []RuleState, reporters int) int {
	k := 0
	for _, r := range rules {
		if r.FailuresToTrip > 0 && (k == 0 || r.FailuresToTrip < k) {
			k = r.FailuresToTrip
		}
	}
	if k == 0 || p.TripQuorum <= 1 {
		return k
	}
	return max(k, p.TripQuorum-reporters)
}

// budgetState is the retry budget as of now, in the exact integers of
// budgetAllows: Left is the most retries k with
// (retries + k·w)·10000 ≤ max(min·w²·10, bp·firsts).
func (s *State) budgetState(p Policy, now, bp int64) *BudgetState {
	f, w := s.fleetAt(p, now), ms(p.FleetWindow)
	el := now - f.Start
	retries := weighted(f.PrevRetries, f.CurRetries, w, el)
	allowance := max(int64(p.RetryBudgetMin)*w*w*10, bp*weighted(f.PrevFirsts, f.CurFirsts, w, el))
	left := int64(0)
	if room := allowance - retries*10000; room > 0 {
		left = room / (w * 10000)
	}
	return &BudgetState{Retries: float64(retries) / float64(w), Allowed: float64(allowance) / float64(w*10000),
		Left: int(min(left, math.MaxInt32))}
}

// causeRank orders open causes: a broken credential or quota before a
// breaker before an operator's open before the short cooldowns.
func causeRank(c Cause) int {
	switch c {
	case CauseAuth:
		return 0
	case CauseQuota:
		return 1
	case CauseBreaker:
		return 2
	case CauseForced:
		return 3
	case CauseOverload:
		return 4
	case CauseRateLimit:
		return 5
	}
	return 6
}

func (s *State) severity(e Explanation) int {
	switch {
	case s.Override == ForcedOpen:
		return SeverityForcedOpen
	case s.Override == ForcedClosed:
		return SeverityForcedShut
	case s.phase() == Open:
		return SeverityOpen + causeRank(s.Cause)
	case s.phase() == HalfOpen:
		return SeverityHalfOpen
	case e.Throttling || (e.Budget != nil && e.Budget.Left == 0):
		return SeverityFleetDeny
	case s.Consecutive > 0 || s.Failures > 0:
		if e.FailuresToTrip > 0 {
			return SeverityFailing + min(e.FailuresToTrip-1, 9)
		}
		return SeverityFailing + 9
	}
	return SeverityHealthy
}

// reasons puts e in words, most severe first.
func (s *State) reasons(p Policy, e Explanation) []string {
	var out []string
	add := func(parts ...string) { out = append(out, strings.Join(parts, "")) }
	phase := s.phase()
	by := func(actor, reason string) string {
		who := "an operator"
		if actor != "" {
			who = actor
		}
		if reason != "" {
			return who + ": " + reason
		}
		return who
	}
	openFor := ""
	if phase == Open && s.OpenUntil > s.ChangedAt && s.ChangedAt > 0 {
		openFor = span(s.OpenUntil - s.ChangedAt)
	}
	from := ""
	if s.LastStatus != 0 {
		from = " (" + strconv.Itoa(s.LastStatus) + ")"
	}
	switch {
	case s.Override == ForcedOpen:
		add("forced open by ", by(e.Actor, e.Reason))
	case s.Override == ForcedClosed:
		add("forced closed by ", by(e.Actor, e.Reason), "; calls admitted, failures ignored")
	case phase == Open:
		switch s.Cause {
		case CauseAuth:
			add("credential rejected", from, orEmpty(": blocked for ", openFor))
		case CauseQuota:
			code := ""
			if s.LastErrorCode != "" {
				code = " " + s.LastErrorCode
			}
			add("quota exhausted", from, code, orEmpty(": blocked for ", openFor))
		case CauseBreaker:
			add(tripText(p, e.Tripped), orEmpty(", open for ", openFor), reopen(s.Reopens))
		case CauseOverload:
			floor := ""
			if p.OverloadFloor > 0 {
				floor = " (floor " + span(ms(p.OverloadFloor)) + ")"
			}
			add("overloaded", from, orEmpty(": cooling down for ", openFor), floor)
		case CauseRateLimit:
			if openFor != "" && s.OpenUntil-s.ChangedAt == ms(p.RateLimitCooldown) && s.LastStatus == 429 {
				add("rate limited", from, ": the policy's ", openFor, " cooldown after a 429 without Retry-After")
			} else {
				add("rate limited", from, orEmpty(": Retry-After ", openFor))
			}
		default:
			add("open (", s.Cause.String(), ")")
		}
	case phase == HalfOpen:
		what := "recovering"
		if o := openedText(p, e); o != "" {
			what += " from " + o
		}
		if n := len(s.Leases); n > 0 {
			add(what, ": ", strconv.Itoa(n), plural(n, " probe lease", " probe leases"), " out")
		} else {
			add(what, ": the next call probes")
		}
	}
	if e.Throttling {
		add(shadowed(p, "throttling ", "would throttle "), pct(e.ThrottleProbability), " of calls (throttled)")
	}
	if b := e.Budget; b != nil && b.Left == 0 && phase != Open && s.Override == NoOverride {
		add("retry budget spent (", num(b.Retries), " of ", num(b.Allowed), " retries over ", span(ms(p.FleetWindow)),
			"): retries ", shadowed(p, "are denied (retry_budget)", "would be denied (retry_budget)"))
	}
	if phase == Closed && s.Override == NoOverride {
		var parts []string
		for _, r := range e.Rules {
			switch {
			case r.Rule == RuleConsecutive && r.Value > 0:
				parts = append(parts, num(r.Value)+" of "+num(r.Threshold)+" consecutive failures")
			case r.Rule == RuleFailureRate && r.Value > 0:
				parts = append(parts, "failure rate "+pct(r.Value)+" of "+num(r.Calls)+" calls over "+span(ms(p.Window))+
					" (trips at "+pct(r.Threshold)+" of "+strconv.Itoa(r.MinCalls)+"+ calls)")
			}
		}
		if len(parts) == 0 && s.Failures > 0 {
			parts = append(parts, strconv.FormatInt(s.Failures, 10)+plural(int(s.Failures), " failure", " failures")+" since the last change")
		}
		if e.QuorumNeeded > 0 && e.QuorumReporters > 0 {
			parts = append(parts, strconv.Itoa(e.QuorumReporters)+" of "+strconv.Itoa(e.QuorumNeeded)+" reporters (trip quorum)")
		}
		if len(parts) > 0 {
			switch k := e.FailuresToTrip; {
			case k == 1:
				parts = append(parts, "the next failure trips the breaker")
			case k > 1:
				parts = append(parts, strconv.Itoa(k)+" more failures trip the breaker")
			}
			add(strings.Join(parts, ", "))
		}
	}
	if p.Shadow {
		if s.Override != NoOverride {
			add("shadow mode: the policy is not enforced; the override is")
		} else {
			add("shadow mode: the policy's denials are not enforced, calls are allowed")
		}
	}
	return out
}

// tripText names what tripped a breaker.
func tripText(p Policy, r TripRule) string {
	cons := strconv.Itoa(p.ConsecutiveFailures) + " consecutive failures"
	rate := "a failure rate of " + pct(float64(p.RateBasisPoints())/10000) + " over " + span(ms(p.Window))
	switch r {
	case RuleConsecutive:
		return cons + " tripped the breaker"
	case RuleFailureRate:
		return rate + " tripped the breaker"
	case RuleProbeFailure:
		return "the probe failed: the breaker re-opened"
	}
	return cons + " or " + rate + " tripped the breaker"
}

// openedText names the open a half-open connection recovers from.
func openedText(p Policy, e Explanation) string {
	switch e.OpenedBy {
	case CauseBreaker:
		return "a breaker trip (" + strings.TrimSuffix(tripText(p, e.Tripped), " tripped the breaker") + ")"
	case CauseRateLimit:
		return "a rate-limit cooldown"
	case CauseOverload:
		return "an overload"
	case CauseQuota:
		return "an exhausted quota"
	case CauseAuth:
		return "a rejected credential"
	case CauseForced:
		if e.Actor == "" && e.Reason == "" {
			return "a forced open"
		}
		who := e.Actor
		if who == "" {
			who = "an operator"
		}
		if e.Reason != "" {
			who += ": " + e.Reason
		}
		return "a forced open by " + who
	}
	return ""
}

func reopen(n int) string {
	if n > 1 {
		return " (re-open " + strconv.Itoa(n) + ")"
	}
	return ""
}

func shadowed(p Policy, enforced, shadow string) string {
	if p.Shadow {
		return shadow
	}
	return enforced
}

func orEmpty(prefix, v string) string {
	if v == "" {
		return ""
	}
	return prefix + v
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// span writes a length of time as a policy states it: 500ms, 10s, 1m30s, 1h.
func span(msv int64) string {
	d := time.Duration(msv) * time.Millisecond
	switch {
	case d >= time.Minute:
		d = d.Round(time.Second)
	case d >= time.Second:
		d = d.Round(100 * time.Millisecond)
	}
	s := d.String()
	for _, zero := range []string{"m0s", "h0m"} {
		if strings.HasSuffix(s, zero) {
			s = s[:len(s)-2]
		}
	}
	return s
}

// pct writes a fraction as a percentage with at most one decimal.
func pct(v float64) string { return strconv.FormatFloat(math.Round(v*1000)/10, 'f', -1, 64) + "%" }

// num writes a (weighted) count with at most one decimal.
func num(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

// ceilDiv is ⌈a/b⌉ for b > 0, 0 for a ≤ 0.
func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}
