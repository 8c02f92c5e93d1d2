package client

import (
	"errors"
	"strings"
	"time"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// Policy holds the tunables of the in-process breaker, which decides the
// calls cooldownd does not (while it is unreachable, see [FailMode]). The
// breaker is the same state machine as cooldownd's, and each field is the
// cooldownd policy knob of the same name (docs/policies.md), applied to
// this process's calls only. The zero value of a duration or threshold
// disables the rule it drives, as documented per field; start from
// [DefaultPolicy].
//
// The trip quorum is cooldownd's alone: one process is one reporter, so
// the in-process breaker trips on transient failures whatever cooldownd's
// quorum is.
type Policy struct {
	// ConsecutiveFailures trips the breaker after this many transient
	// failures in a row while closed. 0 disables the rule. Default 5.
	ConsecutiveFailures int
	// FailureRate trips the breaker when the failure fraction over Window
	// reaches it, once MinCalls calls are seen. In (0, 1]; 0 disables the
	// rule. Default 0.5.
	FailureRate float64
	// MinCalls is how many calls the window must hold before FailureRate
	// applies. Default 20.
	MinCalls int
	// Window is the sliding window of the failure-rate rule, at most 10
	// minutes. Default 60 s.
	Window time.Duration
	// OpenBase is the first breaker open's duration; each consecutive
	// re-open doubles it up to OpenMax. Default 10 s.
	OpenBase time.Duration
	// OpenMax caps breaker open durations. Default 5 min.
	OpenMax time.Duration
	// Jitter spreads breaker open durations by ±Jitter of their length
	// (capped at OpenMax). In [0, 1); 0 disables it. Default 0.1.
	Jitter float64
	// RateLimitCooldown is the cooldown after a 429 with no Retry-After.
	// 0: a 429 only cools down for what the provider says. Default 2 s.
	RateLimitCooldown time.Duration
	// OverloadFloor is the least cooldown after an overloaded answer. 0
	// disables overload cooldowns without a provider delay. Default 5 s.
	OverloadFloor time.Duration
	// QuotaBlock is how long an exhausted quota blocks the connection. 0
	// disables. Default 1 h.
	QuotaBlock time.Duration
	// AuthBlock is how long a rejected credential blocks the connection. 0
	// disables. Default 5 min.
	AuthBlock time.Duration
	// MaxProbes is how many probes a half-open connection lets through at
	// once, 1 to 16. Default 1.
	MaxProbes int
	// LeaseTTL is how long a probe holds its lease unless extended.
	// Default 30 s.
	LeaseTTL time.Duration
	// LeaseTTLMax is the longest time to live [Client.ExtendLease] gives a
	// probe's lease: a longer one asked for is cut to it. 0: no bound but
	// the API's (24 h). Default 10 min.
	LeaseTTLMax time.Duration
	// RetryBudget caps this process's retries on a connection at this
	// fraction of its first attempts over FleetWindow, in [0, 1]; a retry
	// over it is denied with [ReasonRetryBudget]. 0 disables the budget.
	// Default 0.2.
	RetryBudget float64
	// RetryBudgetMin is how many retries per second the budget allows
	// whatever the ratio, 0 to 1000. Default 3.
	RetryBudgetMin int
	// ThrottleK is the adaptive throttle's K (Google SRE's client-side
	// throttling): while closed, a call is rejected with probability
	// max(0, (requests − K·accepts) / (requests + 1)) over FleetWindow,
	// with [ReasonThrottled]. 0 disables it; otherwise in [1, 10].
	// Default 0.
	ThrottleK float64
	// FleetWindow is the window of the retry budget's and the throttle's
	// counts, 1 ms to 10 min. Default 30 s.
	FleetWindow time.Duration
	// Shadow computes every decision but allows every call the policy
	// would deny; [Admission.Shadowed] says what it would have done.
	// Default false.
	Shadow bool
}

// DefaultPolicy returns cooldownd's documented default policy: trip after 5
// consecutive failures or a 50 % failure rate over 60 s (20 calls at
// least), open 10 s doubling to 5 min, one probe with a 30 s lease.
func DefaultPolicy() Policy { return policyOf(breaker.DefaultPolicy()) }

// serverOnlyKnobs are the cooldownd policy knobs that [Policy] leaves out,
// each with the reason: the in-process breaker runs with their zero value.
// A knob added to cooldownd's policy is either a field of Policy (mapped
// in [Policy.breaker] and [policyOf]) or listed here; the client's tests
// fail until it is one or the other.
var serverOnlyKnobs = map[string]string{
	"trip-quorum": "one process is one reporter: a quorum above 1 would never trip on transient failures",
}

// breaker returns p as the in-process breaker's policy: the one place a
// Policy becomes a breaker.Policy.
func (p Policy) breaker() breaker.Policy {
	return breaker.Policy{
		ConsecutiveFailures: p.ConsecutiveFailures,
		FailureRate:         p.FailureRate,
		MinCalls:            p.MinCalls,
		Window:              p.Window,
		OpenBase:            p.OpenBase,
		OpenMax:             p.OpenMax,
		Jitter:              p.Jitter,
		RateLimitCooldown:   p.RateLimitCooldown,
		OverloadFloor:       p.OverloadFloor,
		QuotaBlock:          p.QuotaBlock,
		AuthBlock:           p.AuthBlock,
		MaxProbes:           p.MaxProbes,
		LeaseTTL:            p.LeaseTTL,
		LeaseTTLMax:         p.LeaseTTLMax,
		RetryBudget:         p.RetryBudget,
		RetryBudgetMin:      p.RetryBudgetMin,
		ThrottleK:           p.ThrottleK,
		FleetWindow:         p.FleetWindow,
		Shadow:              p.Shadow,
		// TripQuorum: cooldownd's alone (serverOnlyKnobs).
	}
}

// policyOf is the inverse of [Policy.breaker], for the defaults.
func policyOf(b breaker.Policy) Policy {
	return Policy{
		ConsecutiveFailures: b.ConsecutiveFailures,
		FailureRate:         b.FailureRate,
		MinCalls:            b.MinCalls,
		Window:              b.Window,
		OpenBase:            b.OpenBase,
		OpenMax:             b.OpenMax,
		Jitter:              b.Jitter,
		RateLimitCooldown:   b.RateLimitCooldown,
		OverloadFloor:       b.OverloadFloor,
		QuotaBlock:          b.QuotaBlock,
		AuthBlock:           b.AuthBlock,
		MaxProbes:           b.MaxProbes,
		LeaseTTL:            b.LeaseTTL,
		LeaseTTLMax:         b.LeaseTTLMax,
		RetryBudget:         b.RetryBudget,
		RetryBudgetMin:      b.RetryBudgetMin,
		ThrottleK:           b.ThrottleK,
		FleetWindow:         b.FleetWindow,
		Shadow:              b.Shadow,
	}
}

// policyField is the field of [Policy] that holds knob k: its name in
// CamelCase ("lease-ttl" is LeaseTTL).
func policyField(k *breaker.Knob) string {
	var b strings.Builder
	for w := range strings.SplitSeq(k.Name, "-") {
		if w == "ttl" {
			b.WriteString("TTL")
			continue
		}
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}

// policyError rewrites a policy validation error to name the fields of
// [Policy] ("Policy.Jitter must be in [0, 1), got 1") rather than
// cooldownd's knobs.
func policyError(err error) error {
	var pe *breaker.PolicyError
	if !errors.As(err, &pe) {
		return err
	}
	return errors.New(pe.Message(func(k *breaker.Knob) string { return "Policy." + policyField(k) }))
}
