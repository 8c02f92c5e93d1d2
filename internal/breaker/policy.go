package breaker

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrInvalidPolicy is wrapped by every error of [Policy.Validate].
var ErrInvalidPolicy = errors.New("breaker: invalid policy")

// Limits on policy values, so that the integer arithmetic shared with the
// Redis scripts stays exact in a float64 (Lua's only number type).
const (
	MaxWindow   = 10 * time.Minute
	MaxDuration = 7 * 24 * time.Hour
	MaxProbes   = 16
	// MaxCount caps each window counter.
	MaxCount = 100000
	// MaxReopens caps the consecutive re-open count.
	MaxReopens = 64
	// MaxQuorum caps the trip quorum (and so the reporters a state keeps).
	MaxQuorum = 16
)

// Policy holds the tunables of one connection's breaker. The zero value of
// a duration or threshold disables the rule it drives, as documented per
// field; use [DefaultPolicy] for the documented defaults.
type Policy struct {
	// ConsecutiveFailures trips the breaker after this many transient
	// failures in a row while closed. 0 disables the rule. Default 5.
	ConsecutiveFailures int
	// FailureRate trips the breaker when the failure fraction over Window
	// reaches it, once MinCalls calls are seen. Must be in (0, 1]; 0
	// disables the rule. Default 0.5.
	FailureRate float64
	// MinCalls is how many calls the window must hold before FailureRate
	// applies. Default 20.
	MinCalls int
	// Window is the sliding window of the failure-rate rule (two aligned
	// buckets, the older one weighted by its overlap). At most 10 minutes.
	// Default 60 s.
	Window time.Duration
	// OpenBase is the first breaker open's duration; each consecutive
	// re-open doubles it up to OpenMax. Default 10 s.
	OpenBase time.Duration
	// OpenMax caps breaker open durations. Default 5 min.
	OpenMax time.Duration
	// Jitter spreads breaker open durations by ±Jitter of their length
	// (capped at OpenMax). In [0, 1); 0 disables it. Default 0.1.
	Jitter float64
	// RateLimitCooldown is the shared cooldown after a 429 with no
	// Retry-After. 0: a 429 only cools down for what the server says.
	// Default 2 s.
	RateLimitCooldown time.Duration
	// OverloadFloor is the least cooldown after an overloaded answer. 0
	// disables overload cooldowns without a server delay. Default 5 s.
	OverloadFloor time.Duration
	// QuotaBlock is how long an exhausted quota blocks the connection. 0
	// disables. Default 1 h.
	QuotaBlock time.Duration
	// AuthBlock is how long a rejected credential blocks the connection. 0
	// disables. Default 5 min.
	AuthBlock time.Duration
	// MaxProbes is how many probe leases a half-open connection grants at
	// once, 1 to 16. Default 1.
	MaxProbes int
	// LeaseTTL is a probe lease's time to live unless extended. Default 30 s.
	LeaseTTL time.Duration
	// LeaseTTLMax is the longest time to live an ExtendLease gives a probe
	// lease: a longer one asked for is cut to it (see [Policy.LeaseExtension]).
	// 0: no bound but the API's (24 h). Default 10 min.
	LeaseTTLMax time.Duration

	// The fleet rules (docs/policies.md): counts over FleetWindow of every
	// process's calls, kept only while a rule that reads them is on.

	// RetryBudget caps retries on a connection at this fraction of the
	// fleet's first attempts over FleetWindow, in [0, 1]; a retry over it
	// is denied with ReasonRetryBudget. 0 disables the budget. Default 0.2.
	RetryBudget float64
	// RetryBudgetMin is how many retries per second the budget allows
	// whatever the ratio (so a quiet connection can still retry), 0 to
	// 1000. Default 3.
	RetryBudgetMin int
	// ThrottleK is the adaptive throttle's K (Google SRE's client-side
	// throttling, over the fleet): while closed, a call is rejected with
	// probability max(0, (requests − K·accepts) / (requests + 1)) over
	// FleetWindow, with ReasonThrottled. 0 disables it; otherwise in
	// [1, 10]. Default 0.
	ThrottleK float64
	// TripQuorum makes ambiguous failures (transient: timeouts, resets,
	// 5xx) trip the breaker only once this many distinct reporters saw
	// them within FleetWindow, 0 to 16; 0 and 1 mean any one reporter. An
	// explicit answer (429, overloaded, quota, auth) is authoritative from
	// one reporter whatever it is. Default 0.
	TripQuorum int
	// FleetWindow is the window of the fleet rules' counts (two aligned
	// buckets, the older one weighted by its overlap), 1 ms to 10 min.
	// Default 30 s.
	FleetWindow time.Duration
	// Shadow computes and publishes every decision and transition but
	// allows every call the policy would deny (operator overrides are
	// still enforced). Default false.
	Shadow bool
}

// DefaultPolicy returns the documented defaults (DESIGN.md, with jitter
// 0.1; see docs/decisions).
func DefaultPolicy() Policy {
	return Policy{
		ConsecutiveFailures: 5,
		FailureRate:         0.5,
		MinCalls:            20,
		Window:              time.Minute,
		OpenBase:            10 * time.Second,
		OpenMax:             5 * time.Minute,
		Jitter:              0.1,
		RateLimitCooldown:   2 * time.Second,
		OverloadFloor:       5 * time.Second,
		QuotaBlock:          time.Hour,
		AuthBlock:           5 * time.Minute,
		MaxProbes:           1,
		LeaseTTL:            30 * time.Second,
		LeaseTTLMax:         10 * time.Minute,
		RetryBudget:         0.2,
		RetryBudgetMin:      3,
		FleetWindow:         30 * time.Second,
	}
}

// Validate reports the first nonsensical value as a [*PolicyError],
// wrapping [ErrInvalidPolicy]: each knob's own bounds first, in the order
// of [Knobs], then the rules between knobs.
func (p Policy) Validate() error {
	for _, k := range knobs {
		if err := k.check(p); err != nil {
			return err
		}
	}
	rate, minCalls, window, openBase, openMax := knobFailureRate, knobMinCalls, knobWindow, knobOpenBase, knobOpenMax
	on := func(name func(*Knob) string) string { return " while " + name(rate) + " is on" }
	switch {
	case p.FailureRate > 0 && p.RateBasisPoints() == 0:
		return rate.errorf("must be at least 0.0001 (one basis point) or 0 to disable, got %v", p.FailureRate)
	case p.FailureRate > 0 && p.MinCalls < 1:
		return &PolicyError{Knob: minCalls, say: func(name func(*Knob) string) string {
			return fmt.Sprintf("%s must be in [1, %d]%s, got %d", name(minCalls), MaxCount, on(name), p.MinCalls)
		}}
	case p.FailureRate > 0 && (p.Window < time.Millisecond || p.Window > MaxWindow):
		return &PolicyError{Knob: window, say: func(name func(*Knob) string) string {
			return fmt.Sprintf("%s must be in [1ms, %s]%s, got %s", name(window), MaxWindow, on(name), p.Window)
		}}
	case p.OpenBase <= 0:
		return openBase.errorf("must be positive, got %s", p.OpenBase)
	case p.OpenMax < p.OpenBase:
		return &PolicyError{Knob: openMax, say: func(name func(*Knob) string) string {
			return fmt.Sprintf("%s (%s) must be at least %s (%s)", name(openMax), p.OpenMax, name(openBase), p.OpenBase)
		}}
	case p.RetryBudget > 0 && p.RetryBudgetBasisPoints() == 0:
		return knobRetryBudget.errorf("must be at least 0.0001 (one basis point) or 0 to disable, got %v", p.RetryBudget)
	case p.ThrottleK > 0 && p.ThrottleK < 1:
		return knobThrottleK.errorf("must be 0 (off) or in [1, 10], got %v", p.ThrottleK)
	case p.fleetRules() && (p.FleetWindow < time.Millisecond || p.FleetWindow > MaxWindow):
		fw := knobFleetWindow
		return &PolicyError{Knob: fw, say: func(name func(*Knob) string) string {
			return fmt.Sprintf("%s must be in [1ms, %s] while %s, %s or %s is on, got %s", name(fw), MaxWindow,
				name(knobRetryBudget), name(knobThrottleK), name(knobTripQuorum), p.FleetWindow)
		}}
	}
	return nil
}

// LeaseExtension is the time to live, in ms, that an ExtendLease asking for
// ttl ms gives a lease: the policy's LeaseTTL for 0 or less, cut to
// LeaseTTLMax when that is set (lua/extend.lua does the same).
func (p Policy) LeaseExtension(ttl int64) int64 {
	if ttl <= 0 {
		ttl = ms(p.LeaseTTL)
	}
	if m := ms(p.LeaseTTLMax); m > 0 {
		ttl = min(ttl, m)
	}
	return ttl
}

// fleetRules says whether a rule that reads the fleet window is on.
func (p Policy) fleetRules() bool { return p.RetryBudget > 0 || p.ThrottleK > 0 || p.TripQuorum > 1 }

// RetryBudgetBasisPoints is RetryBudget in basis points (1..10000), 0 when
// disabled: the integer form the Redis scripts compare with.
func (p Policy) RetryBudgetBasisPoints() int64 { return int64(math.Round(p.RetryBudget * 10000)) }

// RateBasisPoints is FailureRate in basis points (1..10000), 0 when
// disabled: the integer form the Redis scripts compare with.
func (p Policy) RateBasisPoints() int64 { return int64(math.Round(p.FailureRate * 10000)) }

// openDuration is the breaker open duration after the given consecutive
// re-open count (≥ 1), with jitter r in [0, 1).
func (p Policy) openDuration(reopens int, r float64) int64 {
	base, maxD := ms(p.OpenBase), ms(p.OpenMax)
	d := base
	for i := 1; i < reopens && d < maxD; i++ {
		d *= 2
	}
	d = min(d, maxD)
	if p.Jitter > 0 {
		d += int64(math.Floor(float64(d) * p.Jitter * (2*r - 1)))
	}
	return max(min(d, maxD), 1)
}

func ms(d time.Duration) int64 { return d.Milliseconds() }
