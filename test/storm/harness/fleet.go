package harness

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/test/storm/fakeprovider"
	"github.com/cooldownd/cooldownd/test/storm/worker"
)

// Properties of the fleet rules' scenarios (docs/storm.md).
const (
	PropRetryBudget = "retry-budget" // retries reaching the provider stay within the fleet's budget
	PropThrottle    = "throttle"     // the provider receives at most K × what it accepts, plus the window's slack
	PropQuorum      = "quorum"       // one process's broken path opens the connection for no one
	PropControl     = "control"      // the quorum's control run (quorum off) did open it: the quorum check is live
	PropShadow      = "shadow"       // a shadow policy denies nothing, and still publishes its transitions
)

// Denial reasons as the workers' wire counts name them.
const (
	reasonRetryBudget = "DENY_REASON_RETRY_BUDGET"
	reasonThrottled   = "DENY_REASON_THROTTLED"
)

// BudgetFigures are the retry-budget scenario's figures, from the
// provider's log (with cooldownd, of the primary's requests that the
// client's in-process breaker did not decide: those bypass the budget).
type BudgetFigures struct {
	// Retries counts the requests that were retries (the worker had sent
	// the call to the primary before); Span is from the first one's send
	// to the last one's.
	Retries int
	Span    time.Duration
	// FirstAttempts counts the first attempts sent from 2 fleet windows
	// before the first retry to the last retry: every first attempt the
	// budget of those retries can have counted.
	FirstAttempts int
	// Fleet is the fleet's budget over the span as the model (breaker)
	// computes it: the retries it admits from the first retry's send to
	// the last's, asked as often as it admits them, with the first
	// attempts reported at their sends; PerProcess the same with P times
	// the minimum, what P processes would allow each with its own.
	Fleet, PerProcess float64
	// Slack is what the window's weighting can add: a bucket's retries may
	// lean on the previous bucket's first attempts (ratio × FirstAttempts
	// again) and the span touches up to Span/window + 2 buckets, each with
	// its minimum (min × 2 windows).
	Slack float64
	// Denied counts the RETRY_BUDGET answers the workers received,
	// RetryAdmits the Admits that marked a retry.
	Denied, RetryAdmits int
}

// Bound is the most retries the fleet's budget lets reach the provider.
func (b BudgetFigures) Bound() float64 { return b.Fleet + b.Slack }

// Budget computes the retry-budget figures of r.
func (r *Result) Budget() BudgetFigures {
	p, o := r.Options.Policy, r.Options
	var b BudgetFigures
	var first, last int64
	counted := func(a fakeprovider.Arrival) bool {
		return a.Key == worker.KeyPrimary && (!a.Local || r.Strategy != worker.Cooldownd)
	}
	for _, a := range r.Arrivals {
		if !counted(a) || !a.Retry {
			continue
		}
		b.Retries++
		if first == 0 || a.SentAt < first {
			first = a.SentAt
		}
		last = max(last, a.SentAt)
	}
	w := p.FleetWindow
	if b.Retries > 0 {
		b.Span = time.Duration(last - first)
		for _, a := range r.Arrivals {
			if counted(a) && !a.Retry && a.SentAt >= first-2*int64(w) && a.SentAt <= last {
				b.FirstAttempts++
			}
		}
	}
	var firsts []int64 // ms, in send order
	for _, a := range r.Arrivals {
		if counted(a) && !a.Retry {
			firsts = append(firsts, a.SentAt/int64(time.Millisecond))
		}
	}
	slices.Sort(firsts)
	from, to := first/int64(time.Millisecond), last/int64(time.Millisecond)
	b.Fleet = float64(budgetAllows(p, firsts, from, to))
	perProcess := p
	perProcess.RetryBudgetMin = min(p.RetryBudgetMin*o.P, 1000)
	b.PerProcess = float64(budgetAllows(perProcess, firsts, from, to))
	ratio, minimum := p.RetryBudget, float64(p.RetryBudgetMin)
	b.Slack = ratio*float64(b.FirstAttempts) + minimum*2*w.Seconds()
	for _, wr := range r.Workers {
		if wr != nil {
			b.Denied += wr.Wire.Denies[reasonRetryBudget]
			b.RetryAdmits += wr.Wire.RetryAdmits
		}
	}
	return b
}

// budgetAllows is how many retries the model's retry budget under p
// admits from ms from to ms to (Unix), asked for one each millisecond
// until it denies, the first attempts (firsts, Unix ms, sorted) reported
// when they were sent: the budget itself, not a formula of it. 0 when
// the span is empty or the policy has no budget.
func budgetAllows(p breaker.Policy, firsts []int64, from, to int64) int {
	if p.RetryBudget <= 0 || to < from || len(firsts) == 0 {
		return 0
	}
	// Only the budget: the breaker and the other fleet rules stay out.
	q := breaker.Policy{RetryBudget: p.RetryBudget, RetryBudgetMin: p.RetryBudgetMin, FleetWindow: p.FleetWindow,
		MaxProbes: 1, OpenBase: time.Second, OpenMax: time.Second}
	var s breaker.State
	admitted, i := 0, 0
	report := func(now int64) {
		for ; i < len(firsts) && firsts[i] <= now; i++ {
			s.Report(q, firsts[i], breaker.Report{Revision: s.Revision, Outcome: breaker.OutcomeSuccess}, 0)
		}
	}
	// The model counts nothing for a connection never reported on: a
	// report that counts nothing makes it one.
	s.Report(q, min(from, firsts[0]), breaker.Report{Outcome: breaker.OutcomeCanceled}, 0)
	report(from - 1)
	for now := from; now <= to; now++ {
		report(now)
		for range 1000 { // at most this many a millisecond
			v, _ := s.Admit(q, now, breaker.Attempt{Retry: true, Draw: 1})
			if v.Decision == breaker.Deny {
				break
			}
			admitted++
		}
	}
	return admitted
}

// ThrottleFigures are the throttle scenario's figures: the primary's
// requests that arrived at the provider during the incident.
type ThrottleFigures struct {
	Requests, Accepts int // arrived, and answered 200
	// Carried counts the requests accepted in the 2 fleet windows before
	// the incident: the window still holds them when it starts, and they
	// let K − 1 times as many more through before the throttle rejects.
	Carried int
	// Windows is how many fleet windows the incident lasts.
	Windows float64
	K       float64
	// Rejected counts the THROTTLED answers the workers received.
	Rejected int
}

// Expected is what the throttle lets reach the provider: K × what it
// accepted, plus (K − 1) × the accepts the window carried in, plus one
// request per window. A window of R requests and A accepts sends
// (1 − p)·R = (K·A + 1)·R/(R + 1) of them: the formula's + 1 lets one
// more through per window.
func (t ThrottleFigures) Expected() float64 {
	return t.K*float64(t.Accepts) + (t.K-1)*float64(t.Carried) + t.Windows
}

// Spread is the slack for the throttle's draws: each call goes with
// probability 1 − p, so the requests sent are a sum of independent draws
// whose standard deviation is at most √Expected; 3 of them.
func (t ThrottleFigures) Spread() float64 { return 3 * math.Sqrt(t.Expected()) }

// Bound is the most requests the throttle lets reach the provider,
// Expected plus Spread.
func (t ThrottleFigures) Bound() float64 { return t.Expected() + t.Spread() }

// Throttle computes the throttle figures of r.
func (r *Result) Throttle() ThrottleFigures {
	p := r.Options.Policy
	t := ThrottleFigures{K: p.ThrottleK}
	if t.K == 0 {
		t.K = ThrottleK // the strategies without cooldownd are judged by the scenario's K
	}
	from, to := r.T0.Add(r.Scenario.OutageFrom).UnixNano(), r.T0.Add(r.Scenario.OutageTo).UnixNano()
	before := from - 2*int64(p.FleetWindow)
	if p.FleetWindow > 0 {
		t.Windows = float64(to-from) / float64(p.FleetWindow)
	}
	for _, a := range r.Arrivals {
		if a.Key != worker.KeyPrimary {
			continue
		}
		switch {
		case a.At >= from && a.At < to:
			t.Requests++
			if a.Status == 200 {
				t.Accepts++
			}
		case a.At >= before && a.At < from && a.Status == 200:
			t.Carried++
		}
	}
	for _, wr := range r.Workers {
		if wr != nil {
			t.Rejected += wr.Wire.Denies[reasonThrottled]
		}
	}
	return t
}

// QuorumFigures are the quorum scenarios' figures.
type QuorumFigures struct {
	// BrokenFailed counts the failed requests of the broken workers.
	BrokenFailed int
	// HealthyCalls, HealthyFailed and HealthyDenied count the user calls
	// of the other workers, those that failed, and the denials their
	// clients received from cooldownd.
	HealthyCalls, HealthyFailed, HealthyDenied int
	// NotClosed counts the poll rounds in which a replica said the
	// primary was not closed; Opens the published transitions to open;
	// Reporters the most failure reporters a replica counted.
	NotClosed, Opens, Reporters int
}

// Quorum computes the quorum figures of r.
func (r *Result) Quorum() QuorumFigures {
	var q QuorumFigures
	broken := r.Scenario.Broken
	for _, a := range r.Arrivals {
		if a.Key == worker.KeyPrimary && slices.Contains(broken, a.Worker) && a.Failing() {
			q.BrokenFailed++
		}
	}
	for i, wr := range r.Workers {
		if wr == nil || slices.Contains(broken, i) {
			continue
		}
		for _, c := range wr.Calls {
			if c.Cut {
				continue
			}
			q.HealthyCalls++
			if !c.OK {
				q.HealthyFailed++
			}
		}
		q.HealthyDenied += wr.Wire.Denied()
	}
	if s := r.Seen[worker.KeyPrimary]; s != nil {
		q.NotClosed, q.Reporters = s.NotClosed, s.MaxReporters
	}
	if f := r.Final[worker.KeyPrimary]; f != nil {
		q.Opens = f.Opens
	}
	return q
}

// ShadowFigures are the shadow scenario's figures.
type ShadowFigures struct {
	// Denied counts the denials the workers' clients received, DeniedCalls
	// the user calls that failed with one; Shadowed the answers that
	// allowed a call the policy would have denied.
	Denied, DeniedCalls, Shadowed int
	// OpenSeen counts the poll rounds in which every replica said open,
	// ShadowSeen those in which a replica marked the connection shadow.
	OpenSeen, ShadowSeen int
	// Transitions, ShadowTransitions and Opens are the published history's
	// transitions, those marked shadow, and those to open.
	Transitions, ShadowTransitions, Opens int
}

// Shadow computes the shadow figures of r.
func (r *Result) Shadow() ShadowFigures {
	var s ShadowFigures
	for _, wr := range r.Workers {
		if wr == nil {
			continue
		}
		s.Denied += wr.Wire.Denied()
		for _, n := range wr.Wire.Shadowed {
			s.Shadowed += n
		}
		for _, c := range wr.Calls {
			if !c.Cut && strings.HasPrefix(c.Err, "denied:") {
				s.DeniedCalls++
			}
		}
	}
	s.OpenSeen = len(r.Open[worker.KeyPrimary])
	if sn := r.Seen[worker.KeyPrimary]; sn != nil {
		s.ShadowSeen = sn.Shadow
	}
	if f := r.Final[worker.KeyPrimary]; f != nil {
		s.Transitions, s.ShadowTransitions, s.Opens = f.Transitions, f.ShadowTransitions, f.Opens
	}
	return s
}

// checkRule checks the property of the fleet rule r's scenario shows.
func (r *Result) checkRule() []Violation {
	var out []Violation
	add := func(prop string, n int, format string, args ...any) {
		if n > 0 {
			out = append(out, Violation{Property: prop, Count: n, Detail: fmt.Sprintf(format, args...)})
		}
	}
	cd := r.Strategy == worker.Cooldownd
	switch r.Scenario.Rule {
	case RuleRetryBudget:
		b := r.Budget()
		if over := float64(b.Retries) - b.Bound(); over > 0 {
			add(PropRetryBudget, int(over+0.999), "%d retries reached the provider over %s, the fleet's budget allows %.0f (%.0f + %.0f slack)",
				b.Retries, b.Span.Round(time.Millisecond), b.Bound(), b.Fleet, b.Slack)
		}
	case RuleThrottle:
		t := r.Throttle()
		if over := float64(t.Requests) - t.Bound(); over > 0 {
			add(PropThrottle, int(over+0.999), "%d requests reached the provider during the incident for %d accepted (%d carried in): more than K=%g allows (%.0f)",
				t.Requests, t.Accepts, t.Carried, t.K, t.Bound())
		}
	case RuleQuorum, RuleQuorumOff:
		q := r.Quorum()
		p := r.Options.Policy
		if q.BrokenFailed < p.ConsecutiveFailures {
			add(PropHarness, 1, "the broken worker had %d failed requests, fewer than the %d that trip", q.BrokenFailed, p.ConsecutiveFailures)
		}
		if r.Scenario.Rule == RuleQuorumOff {
			if cd && q.NotClosed == 0 {
				add(PropControl, 1, "with the quorum off, the broken worker's %d failures never opened the connection: the quorum scenario shows nothing", q.BrokenFailed)
			}
			break
		}
		add(PropQuorum, q.HealthyFailed, "%d of the healthy workers' %d calls failed", q.HealthyFailed, q.HealthyCalls)
		if cd {
			add(PropQuorum, q.HealthyDenied, "the healthy workers were denied %d times", q.HealthyDenied)
			add(PropQuorum, q.NotClosed, "in %d poll rounds a replica said the connection was not closed", q.NotClosed)
			add(PropQuorum, q.Opens, "the published history holds %d transitions to open", q.Opens)
		}
	case RuleShadow:
		s := r.Shadow()
		add(PropShadow, s.DeniedCalls, "%d user calls failed with a denial", s.DeniedCalls)
		if cd {
			add(PropShadow, s.Denied, "cooldownd denied %d admissions", s.Denied)
			if s.OpenSeen == 0 {
				add(PropShadow, 1, "the replicas were never seen to agree the connection was open")
			}
			if s.ShadowSeen == 0 {
				add(PropShadow, 1, "no replica marked the connection shadow")
			}
			if s.Opens == 0 {
				add(PropShadow, 1, "the published history holds no transition to open")
			}
			add(PropShadow, s.Transitions-s.ShadowTransitions, "%d of %d published transitions are not marked shadow",
				s.Transitions-s.ShadowTransitions, s.Transitions)
		}
	}
	return out
}

// RuleSummary describes the figures of a fleet rule's run in a sentence,
// "" for the breaker scenarios.
func (r *Result) RuleSummary() string {
	st := Title(r.Strategy)
	switch r.Scenario.Rule {
	case RuleRetryBudget:
		b := r.Budget()
		return fmt.Sprintf("%s: %d retries reached the provider over %s for %d first attempts; fleet budget %.0f (+ %.0f slack = %.0f), "+
			"the sum of per-process budgets %.0f; %d RETRY_BUDGET denials, %d Admits marked a retry",
			st, b.Retries, fmtDur(b.Span), b.FirstAttempts, b.Fleet, b.Slack, b.Bound(), b.PerProcess, b.Denied, b.RetryAdmits)
	case RuleThrottle:
		t := r.Throttle()
		return fmt.Sprintf("%s: the provider received %d requests during the incident and accepted %d (%.0f%% failed); K × accepted + (K − 1) × %d carried in + %.0f windows = %.0f, + %.0f for the draws' spread = %.0f; %d THROTTLED denials",
			st, t.Requests, t.Accepts, pct(t.Requests-t.Accepts, t.Requests), t.Carried, t.Windows, t.Expected(), t.Spread(), t.Bound(), t.Rejected)
	case RuleQuorum, RuleQuorumOff:
		q := r.Quorum()
		return fmt.Sprintf("%s: the broken worker had %d failed requests; the healthy workers made %d calls, %d failed, %d denials; "+
			"a replica said not closed in %d polls, %d transitions to open published, at most %d failure reporters counted",
			st, q.BrokenFailed, q.HealthyCalls, q.HealthyFailed, q.HealthyDenied, q.NotClosed, q.Opens, q.Reporters)
	case RuleShadow:
		s := r.Shadow()
		return fmt.Sprintf("%s: %d denials, %d user calls denied, %d answers shadow-denied; every replica open in %d polls, shadow seen in %d; "+
			"%d transitions published (%d marked shadow, %d to open)",
			st, s.Denied, s.DeniedCalls, s.Shadowed, s.OpenSeen, s.ShadowSeen, s.Transitions, s.ShadowTransitions, s.Opens)
	}
	return ""
}
