package harness

import (
	"fmt"
	"time"

	"github.com/cooldownd/cooldownd/client"
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
	}
}

// ShortTiming is the integration test's timing: about 4.5 s per run.
func ShortTiming() Timing {
	t := DefaultTiming()
	t.Warmup, t.Outage, t.After = 500*time.Millisecond, 2*time.Second, 2*time.Second
	t.Flap = 400 * time.Millisecond
	return t
}

// DefaultPolicy is the sub-second policy the replicas run with (and the
// local breaker of the process-local strategy): trip after 3 consecutive
// failures, open 100 ms doubling to 400 ms with ±10 % jitter, one probe
// with a 600 ms lease (longer than a request may take).
func DefaultPolicy() client.Policy {
	p := client.DefaultPolicy()
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

// ServerFlags returns the cooldownd flags that set policy p.
func ServerFlags(p client.Policy) []string {
	return []string{
		"--consecutive-failures", fmt.Sprint(p.ConsecutiveFailures),
		"--failure-rate", fmt.Sprint(p.FailureRate),
		"--min-calls", fmt.Sprint(max(p.MinCalls, 1)),
		"--window", p.Window.String(),
		"--open-base", p.OpenBase.String(),
		"--open-max", p.OpenMax.String(),
		"--jitter", fmt.Sprint(p.Jitter),
		"--rate-limit-cooldown", p.RateLimitCooldown.String(),
		"--overload-floor", p.OverloadFloor.String(),
		"--quota-block", p.QuotaBlock.String(),
		"--auth-block", p.AuthBlock.String(),
		"--max-probes", fmt.Sprint(p.MaxProbes),
		"--lease-ttl", p.LeaseTTL.String(),
	}
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
	return []Scenario{
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
	}
}
