package breaker

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Kind is how a knob's value is written and bounded.
type Kind int

// The kinds of knob.
const (
	// Count is a whole number.
	Count Kind = iota + 1
	// Ratio is a fraction, written as a decimal such as 0.5.
	Ratio
	// Span is a duration, written as a Go duration such as 10s, in whole
	// milliseconds (the scripts' unit).
	Span
	// Switch is on or off, written as true or false; its value is 1 or 0.
	Switch
)

// Knob is one tunable of [Policy]: the one definition that the flags and
// their COOLDOWND_* variables, the policy file, [Policy.Validate], the
// scripts' policy argument, the chart's schema and the README's table are
// read or generated from.
//
// A knob's value is a float64 in its own unit: the count, the fraction, or
// for a [Span] the nanoseconds of the time.Duration (exact in a float64 up
// to 104 days, above [MaxDuration]).
type Knob struct {
	// Name is the knob's one name: the flag (--name), its environment
	// variable (COOLDOWND_NAME, dashes as underscores) and, with dashes as
	// underscores, the policy file's key ([Knob.Key]).
	Name string
	Kind Kind
	// Doc is one line, the flag's help.
	Doc string
	// Min and Max bound the value whatever the other knobs are (Max
	// excluded when MaxExclusive). Rules between knobs are in Validate.
	Min, Max     float64
	MaxExclusive bool
	// TenantOnly knobs cannot be set by a policy file's label rule.
	TenantOnly bool
	// Script is the knob's field in the scripts' policy table (P, named by
	// policy_table in internal/store/lua/schema.lua, which
	// internal/store/schema generates from this table).
	Script string

	// The knob's field in a policy: count for a Count, ratio for a Ratio,
	// span for a Span.
	count func(p *Policy) *int
	ratio func(p *Policy) *float64
	span  func(p *Policy) *time.Duration
	flag  func(p *Policy) *bool
}

// The knobs that the rules between knobs in Validate name.
var (
	knobFailureRate = &Knob{Name: "failure-rate", Kind: Ratio, Min: 0, Max: 1, Script: "rate_bp",
		Doc:   "trip when the failure rate over --window reaches this, in (0,1] (0 disables)",
		ratio: func(p *Policy) *float64 { return &p.FailureRate }}
	knobMinCalls = &Knob{Name: "min-calls", Kind: Count, Min: 0, Max: MaxCount, Script: "min_calls",
		Doc:   "calls the window must hold before --failure-rate applies (at least 1 while it is on)",
		count: func(p *Policy) *int { return &p.MinCalls }}
	knobWindow = &Knob{Name: "window", Kind: Span, Min: 0, Max: float64(MaxDuration), Script: "window",
		Doc:  "sliding window of the failure-rate rule (1ms to 10m while it is on)",
		span: func(p *Policy) *time.Duration { return &p.Window }}
	knobOpenBase = &Knob{Name: "open-base", Kind: Span, Min: 0, Max: float64(MaxDuration), Script: "open_base",
		Doc:  "first breaker open duration (positive); doubles per consecutive re-open",
		span: func(p *Policy) *time.Duration { return &p.OpenBase }}
	knobOpenMax = &Knob{Name: "open-max", Kind: Span, Min: 0, Max: float64(MaxDuration), Script: "open_max",
		Doc:  "cap of breaker open durations (at least --open-base)",
		span: func(p *Policy) *time.Duration { return &p.OpenMax }}
	knobRetryBudget = &Knob{Name: "retry-budget", Kind: Ratio, Min: 0, Max: 1, Script: "budget_bp",
		Doc:   "retries may be at most this fraction of the fleet's first attempts over --fleet-window, in [0,1] (0 disables)",
		ratio: func(p *Policy) *float64 { return &p.RetryBudget }}
	knobThrottleK = &Knob{Name: "throttle-k", Kind: Ratio, Min: 0, Max: 10, Script: "throttle_k",
		Doc:   "adaptive throttle's K while closed: reject with probability max(0, (requests-K*accepts)/(requests+1)); 0 disables, else 1 to 10",
		ratio: func(p *Policy) *float64 { return &p.ThrottleK }}
	knobTripQuorum = &Knob{Name: "trip-quorum", Kind: Count, Min: 0, Max: MaxQuorum, Script: "quorum",
		Doc:   "transient failures trip only once this many distinct reporters saw them within --fleet-window (0 or 1: any one)",
		count: func(p *Policy) *int { return &p.TripQuorum }}
	knobFleetWindow = &Knob{Name: "fleet-window", Kind: Span, Min: 0, Max: float64(MaxDuration), Script: "fleet_window",
		Doc:  "window of the fleet's counts for the retry budget, the throttle and the trip quorum (1ms to 10m while one is on)",
		span: func(p *Policy) *time.Duration { return &p.FleetWindow }}
)

// The lease knobs.
var (
	knobLeaseTTL = &Knob{Name: "lease-ttl", Kind: Span, Min: float64(time.Millisecond), Max: float64(MaxDuration), Script: "lease_ttl",
		Doc:  "probe lease time to live unless extended (at least 1ms)",
		span: func(p *Policy) *time.Duration { return &p.LeaseTTL }}
	knobLeaseTTLMax = &Knob{Name: "lease-ttl-max", Kind: Span, Min: 0, Max: float64(24 * time.Hour), Script: "lease_ttl_max",
		Doc:  "longest time to live an ExtendLease gives a probe lease; a longer one asked for is cut to it (0: the API's 24h)",
		span: func(p *Policy) *time.Duration { return &p.LeaseTTLMax }}
)

// knobs is every knob in the order of the flags, the file's keys and the
// docs. The defaults are [DefaultPolicy]'s, read through the same fields.
var knobs = []*Knob{
	{Name: "consecutive-failures", Kind: Count, Min: 0, Max: MaxCount, Script: "consecutive",
		Doc:   "trip after this many consecutive transient failures (0 disables)",
		count: func(p *Policy) *int { return &p.ConsecutiveFailures }},
	knobFailureRate,
	knobMinCalls,
	knobWindow,
	knobOpenBase,
	knobOpenMax,
	{Name: "jitter", Kind: Ratio, Min: 0, Max: 1, MaxExclusive: true, Script: "jitter",
		Doc:   "± fraction of jitter on breaker opens, in [0,1) (0 disables)",
		ratio: func(p *Policy) *float64 { return &p.Jitter }},
	{Name: "rate-limit-cooldown", Kind: Span, Min: 0, Max: float64(MaxDuration), Script: "rate_limit_default",
		Doc:  "shared cooldown after a 429 without Retry-After (0 disables)",
		span: func(p *Policy) *time.Duration { return &p.RateLimitCooldown }},
	{Name: "overload-floor", Kind: Span, Min: 0, Max: float64(MaxDuration), Script: "overload_floor",
		Doc:  "least cooldown after an overloaded answer (0 disables)",
		span: func(p *Policy) *time.Duration { return &p.OverloadFloor }},
	{Name: "quota-block", Kind: Span, Min: 0, Max: float64(MaxDuration), Script: "quota_block",
		Doc:  "block after an exhausted quota (0 disables)",
		span: func(p *Policy) *time.Duration { return &p.QuotaBlock }},
	{Name: "auth-block", Kind: Span, Min: 0, Max: float64(MaxDuration), Script: "auth_block",
		Doc:  "block after a rejected credential (0 disables)",
		span: func(p *Policy) *time.Duration { return &p.AuthBlock }},
	{Name: "max-probes", Kind: Count, Min: 1, Max: MaxProbes, TenantOnly: true, Script: "max_probes",
		Doc:   "probe leases a half-open connection grants at once (1-16)",
		count: func(p *Policy) *int { return &p.MaxProbes }},
	knobLeaseTTL,
	knobRetryBudget,
	{Name: "retry-budget-min", Kind: Count, Min: 0, Max: 1000, Script: "budget_min",
		Doc:   "retries per second the retry budget allows whatever its ratio (0-1000)",
		count: func(p *Policy) *int { return &p.RetryBudgetMin }},
	knobThrottleK,
	knobTripQuorum,
	knobFleetWindow,
	{Name: "shadow", Kind: Switch, Min: 0, Max: 1, Script: "shadow",
		Doc:  "shadow mode: compute and publish every decision, allow every call the policy would deny",
		flag: func(p *Policy) *bool { return &p.Shadow }},
	knobLeaseTTLMax,
}

// Knobs returns every knob, in the documented order. The slice is a copy;
// the knobs are shared and must not be modified.
func Knobs() []*Knob { return append([]*Knob(nil), knobs...) }

// KnobByKey returns the knob whose policy-file key ([Knob.Key]) is key.
func KnobByKey(key string) (*Knob, bool) {
	for _, k := range knobs {
		if k.Key() == key {
			return k, true
		}
	}
	return nil, false
}

// Key is the knob's key in a policy file: its name with underscores.
func (k *Knob) Key() string { return strings.ReplaceAll(k.Name, "-", "_") }

// Flag is the knob's command-line flag, --name.
func (k *Knob) Flag() string { return "--" + k.Name }

// Get returns the knob's value in p.
func (k *Knob) Get(p Policy) float64 {
	switch k.Kind {
	case Count:
		return float64(*k.count(&p))
	case Ratio:
		return *k.ratio(&p)
	case Switch:
		if *k.flag(&p) {
			return 1
		}
		return 0
	default:
		return float64(*k.span(&p))
	}
}

// Set sets the knob's value in p. A Count or Span value is truncated to a
// whole number.
func (k *Knob) Set(p *Policy, v float64) {
	switch k.Kind {
	case Count:
		*k.count(p) = int(v)
	case Ratio:
		*k.ratio(p) = v
	case Switch:
		*k.flag(p) = v != 0
	default:
		*k.span(p) = time.Duration(v)
	}
}

// Parse reads a value as an operator writes it: an integer, a decimal or
// a Go duration, as the knob's kind says. It checks the syntax, not the
// bounds (see [Policy.Validate]).
func (k *Knob) Parse(s string) (float64, error) {
	switch k.Kind {
	case Count:
		n, err := strconv.ParseInt(s, 0, strconv.IntSize)
		if err != nil {
			return 0, fmt.Errorf("%q is not %s", s, k.Format())
		}
		return float64(n), nil
	case Ratio:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not %s", s, k.Format())
		}
		return f, nil
	case Switch:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return 0, fmt.Errorf("%q is not %s", s, k.Format())
		}
		if b {
			return 1, nil
		}
		return 0, nil
	default:
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("%q is not %s", s, k.Format())
		}
		return float64(d), nil
	}
}

// Format describes what Parse accepts, for error messages.
func (k *Knob) Format() string {
	switch k.Kind {
	case Count:
		return "an integer"
	case Ratio:
		return "a number such as 0.5"
	case Switch:
		return "true or false"
	default:
		return "a duration such as 250ms, 30s, 5m or 1h"
	}
}

// String writes v as Parse reads it (a Span as time.Duration writes it).
func (k *Knob) String(v float64) string {
	switch k.Kind {
	case Count:
		return strconv.FormatInt(int64(v), 10)
	case Ratio:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case Switch:
		return strconv.FormatBool(v != 0)
	default:
		return time.Duration(v).String()
	}
}

// Bounds writes the knob's own bounds as an interval, such as [0, 1), or
// "true or false" for a Switch.
func (k *Knob) Bounds() string {
	if k.Kind == Switch {
		return k.Format()
	}
	closing := "]"
	if k.MaxExclusive {
		closing = ")"
	}
	return "[" + k.String(k.Min) + ", " + k.String(k.Max) + closing
}

// check reports a value outside the knob's own bounds.
func (k *Knob) check(p Policy) *PolicyError {
	v := k.Get(p)
	switch {
	case math.IsNaN(v):
		return k.errorf("must be in %s, got NaN", k.Bounds())
	case k.Kind == Span && v < 0:
		return k.errorf("must not be negative, got %s", k.String(v))
	case v < k.Min || v > k.Max || (k.MaxExclusive && v == k.Max):
		return k.errorf("must be in %s, got %s", k.Bounds(), k.String(v))
	case k.Kind == Span && time.Duration(v)%time.Millisecond != 0:
		return k.errorf("must be whole milliseconds, got %s", k.String(v))
	}
	return nil
}

// errorf is an error about k alone.
func (k *Knob) errorf(format string, args ...any) *PolicyError {
	text := fmt.Sprintf(format, args...)
	return &PolicyError{Knob: k, say: func(name func(*Knob) string) string { return name(k) + " " + text }}
}

// PolicyError is a [Policy.Validate] error: the first knob whose value is
// refused. It wraps [ErrInvalidPolicy]; its Error names knobs by their
// policy-file keys, and [PolicyError.Message] names them as the caller
// wants (flags, chart values).
type PolicyError struct {
	// Knob is the knob refused.
	Knob *Knob
	say  func(name func(*Knob) string) string
}

// Message is the problem with each knob it mentions named by name, without
// the ErrInvalidPolicy prefix: "--jitter must be in [0, 1), got 1".
func (e *PolicyError) Message(name func(*Knob) string) string { return e.say(name) }

func (e *PolicyError) Error() string {
	return ErrInvalidPolicy.Error() + ": " + e.say((*Knob).Key)
}

func (e *PolicyError) Unwrap() error { return ErrInvalidPolicy }
