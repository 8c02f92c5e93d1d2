package harness

import (
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/cooldownd/cooldownd/client"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/test/storm/fakeprovider"
	"github.com/cooldownd/cooldownd/test/storm/worker"
)

// Timing holds the durations of a storm run: the scenarios' timeline and
// the workers' call pattern.
type Timing struct {
	Warmup     time.Duration // healthy traffic before the outage
	Outage     time.Duration // how long the provider fails
	After      time.Duration // healthy traffic after the heal
	Flap       time.Duration // half period of the flapping provider
	RetryAfter time.Duration // the rate-limit storm's Retry-After
	Latency    time.Duration // the healthy provider's service time
	Think      time.Duration // mean pause between a goroutine's user calls
	// AttemptTimeout bounds one provider request (the slow provider hangs
	// until it passes); Deadline bounds one user call.
	AttemptTimeout, Deadline time.Duration
	MaxRetries               int
	BackoffBase, BackoffCap  time.Duration
	AdmitTimeout             time.Duration // the client's bound on each call to cooldownd
	Poll                     time.Duration // how often the harness reads the state from every replica
	// Capacity is how many requests per second the throttle scenario's
	// provider serves (it fails the rest).
	Capacity int
	// FleetWindow is the fleet rules' window in the retry-budget and
	// quorum scenarios; ThrottleWindow in the throttle's, short so that
	// the healthy traffic before the incident leaves the window soon.
	FleetWindow, ThrottleWindow time.Duration
}

// DefaultTiming is the benchmark's timing: about 7 s per run.
func DefaultTiming() Timing {
	return Timing{
		Warmup: time.Second, Outage: 4 * time.Second, After: 2 * time.Second,
		Flap: 500 * time.Millisecond, RetryAfter: time.Second,
		Latency: 5 * time.Millisecond, Think: 50 * time.Millisecond,
		AttemptTimeout: 300 * time.Millisecond, Deadline: 3 * time.Second,
		MaxRetries: 2, BackoffBase: 100 * time.Millisecond, BackoffCap: 800 * time.Millisecond,
		AdmitTimeout: client.DefaultAdmitTimeout, Poll: 20 * time.Millisecond,
		Capacity: 20, FleetWindow: time.Second, ThrottleWindow: 100 * time.Millisecond,
	}
}

// ShortTiming is the integration test's timing: about 4.5 s per run.
func ShortTiming() Timing {
	t := DefaultTiming()
	t.Warmup, t.Outage, t.After = 500*time.Millisecond, 2*time.Second, 2*time.Second
	t.Flap = 400 * time.Millisecond
	return t
}

// The fleet rules' settings in their scenarios.
const (
	RetryBudgetRatio = 0.05 // of first attempts
	RetryBudgetMin   = 10   // retries per second
	ThrottleK        = 2.0  // Google SRE's K
	// QuorumFailureRate is the quorum scenarios' failure-rate trip.
	QuorumFailureRate = 0.03
)

// DefaultPolicy is the sub-second policy the replicas run with (and the
// local breaker of the process-local strategy): trip after 3 consecutive
// failures, open 100 ms doubling to 400 ms with ±10 % jitter, one probe
// with a 600 ms lease (longer than a request may take).
func DefaultPolicy() breaker.Policy {
	p := breaker.DefaultPolicy()
	p.ConsecutiveFailures = 3
	p.FailureRate = 0
	p.OpenBase = 100 * time.Millisecond
	p.OpenMax = 400 * time.Millisecond
	p.Jitter = 0.1
	p.RateLimitCooldown = 500 * time.Millisecond
	p.MaxProbes = 1
	p.LeaseTTL = 600 * time.Millisecond
	return p
}

// ServerFlags returns the cooldownd flags that set policy p: one
// --name=value per knob (the fleet rules' --retry-budget,
// --retry-budget-min, --throttle-k, --trip-quorum, --fleet-window and
// --shadow included), so that a scenario's policy edits reach the replicas.
func ServerFlags(p breaker.Policy) []string {
	var out []string
	for _, k := range breaker.Knobs() {
		out = append(out, k.Flag()+"="+k.String(k.Get(p)))
	}
	return out
}

// LocalPolicy is the in-process breaker's part of the replicas' policy p,
// which the workers' clients run with: every field of [client.Policy],
// copied from the field of p of the same name (client.Policy holds the
// knobs one process applies to its own calls; the trip quorum is
// cooldownd's alone). It fails when a field of client.Policy has no
// counterpart in p, so that the two cannot drift apart unnoticed.
func LocalPolicy(p breaker.Policy) (client.Policy, error) {
	var lp client.Policy
	dst, src := reflect.ValueOf(&lp).Elem(), reflect.ValueOf(p)
	for i := range dst.NumField() {
		name := dst.Type().Field(i).Name
		f := src.FieldByName(name)
		if !f.IsValid() || f.Type() != dst.Field(i).Type() {
			return client.Policy{}, fmt.Errorf("harness: client.Policy.%s has no breaker.Policy field of its type", name)
		}
		dst.Field(i).Set(f)
	}
	return lp, nil
}

// Scenario is one scripted provider incident.
type Scenario struct {
	Name  string
	Title string
	// Script is the provider's timeline, from the run's start.
	Script fakeprovider.Script
	// Duration is the run's length: calls still running then are cut.
	Duration time.Duration
	// OutageFrom and OutageTo bound the primary key's failures. Heals
	// says the primary is healthy from OutageTo on; without it, it fails
	// to the end.
	OutageFrom, OutageTo time.Duration
	Heals                bool
	// Fallback makes the workers call [primary, fallback] with DoFallback.
	Fallback bool
	// Kill makes the harness SIGKILL the first process seen holding a
	// probe (any in-flight request when there are no probes) at or after
	// KillFrom.
	Kill     bool
	KillFrom time.Duration
	// Rule is the fleet rule the scenario shows (RuleRetryBudget, …): its
	// property is checked (see [Check]). Empty for the breaker scenarios.
	Rule string
	// Policy edits the harness's policy for this scenario: the replicas
	// run with it (see [ServerFlags]) and so does the local breaker. Nil
	// keeps the harness's policy.
	Policy func(*breaker.Policy)
	// Strategies are the strategies the scenario makes sense for; nil:
	// every one.
	Strategies []worker.Strategy
	// Broken lists the worker processes whose path to the provider is
	// broken: the script fails only their requests.
	Broken []int
}

// Fleet rules the scenarios show (issue 18), and the control run of the
// quorum (the same broken path with the quorum off).
const (
	RuleRetryBudget = "retry-budget"
	RuleThrottle    = "throttle"
	RuleQuorum      = "quorum"
	RuleQuorumOff   = "quorum-off"
	RuleShadow      = "shadow"
)

// PolicyFor is the policy scenario sc runs with, from the harness's base.
func (sc Scenario) PolicyFor(base breaker.Policy) breaker.Policy {
	if sc.Policy != nil {
		sc.Policy(&base)
	}
	return base
}

// Runs reports whether the scenario makes sense for strategy st.
func (sc Scenario) Runs(st worker.Strategy) bool {
	return sc.Strategies == nil || slices.Contains(sc.Strategies, st)
}

// Scenarios returns every scenario for t.
func Scenarios(t Timing) []Scenario {
	w, o := t.Warmup, t.Outage
	end := w + o + t.After
	script := func(ph ...fakeprovider.Phase) fakeprovider.Script {
		return fakeprovider.Script{Phases: ph, Latency: t.Latency, MaxHang: 2 * t.Deadline}
	}
	var flaps []fakeprovider.Phase
	heal := w
	for from := w; from+t.Flap <= w+o; from += 2 * t.Flap {
		flaps = append(flaps, fakeprovider.Phase{Key: worker.KeyPrimary, From: from, To: from + t.Flap, Kind: fakeprovider.Error})
		heal = from + t.Flap
	}
	split := w + o*3/10
	outage := func(kind fakeprovider.Kind) fakeprovider.Phase {
		return fakeprovider.Phase{Key: worker.KeyPrimary, From: w, To: w + o, Kind: kind}
	}
	noTrips := func(p *breaker.Policy) { p.ConsecutiveFailures, p.FailureRate = 0, 0 }
	fw := t.FleetWindow
	capacity := outage(fakeprovider.Capacity)
	capacity.Capacity = t.Capacity
	broken := outage(fakeprovider.Error)
	broken.Workers = []int{0}
	guarded := []worker.Strategy{worker.Local, worker.Cooldownd}
	// One process's failures are a small part of the fleet's reports: a
	// consecutive-failure count is reset by the others' successes, so the
	// quorum scenarios add a sensitive failure-rate rule that one broken
	// process does trip without the quorum (see the control).
	quorum := func(n int) func(*breaker.Policy) {
		return func(p *breaker.Policy) {
			p.FailureRate, p.MinCalls, p.Window = QuorumFailureRate, 20, fw
			p.TripQuorum, p.FleetWindow = n, fw
		}
	}
	fleet := []Scenario{
		{
			Name: RuleRetryBudget, Rule: RuleRetryBudget,
			Title: fmt.Sprintf("every request fails with 500 for %s, the breaker's trip rules off: only the retry budget (%g of first attempts, at least %d/s, over %s) holds retries back",
				o, RetryBudgetRatio, RetryBudgetMin, fw),
			Script: script(outage(fakeprovider.Error)), Duration: end, OutageFrom: w, OutageTo: w + o, Heals: true,
			Policy: func(p *breaker.Policy) {
				noTrips(p)
				p.RetryBudget, p.RetryBudgetMin, p.FleetWindow = RetryBudgetRatio, RetryBudgetMin, fw
			},
		},
		{
			Name: RuleThrottle, Rule: RuleThrottle,
			Title: fmt.Sprintf("for %s the provider serves %d requests/s and fails the rest with 500; adaptive throttle K=%g over %s, trip rules and retry budget off",
				o, t.Capacity, ThrottleK, t.ThrottleWindow),
			Script: script(capacity), Duration: end, OutageFrom: w, OutageTo: w + o, Heals: true,
			Policy: func(p *breaker.Policy) {
				noTrips(p)
				p.RetryBudget, p.ThrottleK, p.FleetWindow = 0, ThrottleK, t.ThrottleWindow
			},
		},
		{
			Name: RuleQuorum, Rule: RuleQuorum,
			Title:  fmt.Sprintf("worker 0's path to the provider is broken (every request of it fails with 500) for %s; trip quorum 2 over %s", o, fw),
			Script: script(broken), Duration: end, OutageFrom: w, OutageTo: w + o, Heals: true, Broken: broken.Workers,
			Policy: quorum(2), Strategies: guarded,
		},
		{
			Name: RuleQuorumOff, Rule: RuleQuorumOff,
			Title:  "the quorum scenario's control: the same broken path, trip quorum 0 (off)",
			Script: script(broken), Duration: end, OutageFrom: w, OutageTo: w + o, Heals: true, Broken: broken.Workers,
			Policy: quorum(0), Strategies: []worker.Strategy{worker.Cooldownd},
		},
		{
			Name: RuleShadow, Rule: RuleShadow,
			Title:  fmt.Sprintf("every request fails with 500 for %s, then healthy; the policy is in shadow mode", o),
			Script: script(outage(fakeprovider.Error)), Duration: end, OutageFrom: w, OutageTo: w + o, Heals: true,
			Policy: func(p *breaker.Policy) { p.Shadow = true }, Strategies: []worker.Strategy{worker.Cooldownd},
		},
	}
	return append([]Scenario{
		{
			Name: "hard-outage", Title: fmt.Sprintf("every request fails with 500 for %s, then healthy", o),
			Script:   script(fakeprovider.Phase{Key: worker.KeyPrimary, From: w, To: w + o, Kind: fakeprovider.Error}),
			Duration: end, OutageFrom: w, OutageTo: w + o, Heals: true,
		},
		{
			Name: "rate-limit", Title: fmt.Sprintf("429 with Retry-After %s for %s, then healthy", t.RetryAfter, o),
			Script: script(fakeprovider.Phase{Key: worker.KeyPrimary, From: w, To: w + o, Kind: fakeprovider.RateLimit,
				RetryAfter: t.RetryAfter}),
			Duration: end, OutageFrom: w, OutageTo: w + o, Heals: true,
		},
		{
			Name: "quota-fallback", Title: fmt.Sprintf("the primary key's quota runs out after %s; the fallback key stays healthy", w),
			Script:   script(fakeprovider.Phase{Key: worker.KeyPrimary, From: w, To: end + time.Hour, Kind: fakeprovider.Quota}),
			Duration: end, OutageFrom: w, OutageTo: end, Fallback: true,
		},
		{
			Name: "flapping", Title: fmt.Sprintf("500 and healthy alternate every %s for %s, then healthy", t.Flap, heal-w),
			Script:   script(flaps...),
			Duration: end, OutageFrom: w, OutageTo: heal, Heals: true,
		},
		{
			Name: "slow", Title: fmt.Sprintf("requests hang until the %s request timeout for %s, then healthy", t.AttemptTimeout, o),
			Script:   script(fakeprovider.Phase{Key: worker.KeyPrimary, From: w, To: w + o, Kind: fakeprovider.Hang}),
			Duration: end, OutageFrom: w, OutageTo: w + o, Heals: true,
		},
		{
			Name: "probe-killed", Title: fmt.Sprintf("500 for %s, then hangs; the first probe's process is SIGKILLed; healthy after %s", split-w, o),
			Script: script(
				fakeprovider.Phase{Key: worker.KeyPrimary, From: w, To: split, Kind: fakeprovider.Error},
				fakeprovider.Phase{Key: worker.KeyPrimary, From: split, To: w + o, Kind: fakeprovider.Hang}),
			Duration: end, OutageFrom: w, OutageTo: w + o, Heals: true, Kill: true, KillFrom: split,
		},
	}, fleet...)
}
