package harness

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cooldownd/cooldownd/test/storm/fakeprovider"
	"github.com/cooldownd/cooldownd/test/storm/worker"
)

// Metrics are a run's figures.
type Metrics struct {
	// Reached counts the requests the provider received for the primary
	// while it was failing it.
	Reached int
	// AfterFirst counts those of them sent after the provider had answered
	// the first failing request: the ones a coordinated fleet could have
	// known not to send. (A slow provider's first answer is the first
	// request timeout, so every call made before it is in Reached only.)
	AfterFirst int
	// WastedPerProc is Reached per client process.
	WastedPerProc float64
	// Steady is the failing request rate after the outage's first 500 ms
	// (once it is discovered), per second.
	Steady float64
	// Probes counts the failing requests admitted as probes.
	Probes int
	// Recovery is the time from the heal until every surviving process
	// had a request succeed (Recovered false: one never did).
	Recovery  time.Duration
	Recovered bool
	// Calls and Failed count user calls (those cut by the end of the run
	// are left out); Failed ones ended with an error.
	Calls, Failed int
	// P99Added is the 99th percentile of the latency the strategy added
	// to successful user calls: their duration minus the successful
	// request's.
	P99Added time.Duration
	// Local counts requests the client's in-process breaker admitted
	// (with cooldownd: because it did not answer in time).
	Local int
}

// WorkerRecovery is one process's recovery after the heal.
type WorkerRecovery struct {
	Worker    int
	Recovered bool
	After     time.Duration
}

func (w WorkerRecovery) String() string {
	if !w.Recovered {
		return fmt.Sprintf("worker %d: never", w.Worker)
	}
	return fmt.Sprintf("worker %d: %s", w.Worker, w.After.Round(time.Millisecond))
}

// RecoveryResult is every surviving process's recovery.
type RecoveryResult struct {
	Workers   []WorkerRecovery
	Max       time.Duration
	Recovered bool // every surviving process recovered
}

// Recovery measures, for every process that was not killed, how long after
// the heal its first request succeeded at the provider.
func (r *Result) Recovery() RecoveryResult {
	heal := r.T0.Add(r.Scenario.OutageTo).UnixNano()
	first := make(map[int]int64)
	for _, a := range r.Arrivals {
		if a.Key == worker.KeyPrimary && a.Status == 200 && a.At >= heal {
			if t, ok := first[a.Worker]; !ok || a.At < t {
				first[a.Worker] = a.At
			}
		}
	}
	out := RecoveryResult{Recovered: true}
	for i := range r.Options.P {
		if r.Kill != nil && r.Kill.Worker == i {
			continue
		}
		t, ok := first[i]
		w := WorkerRecovery{Worker: i, Recovered: ok}
		if ok {
			w.After = time.Duration(t - heal)
			out.Max = max(out.Max, w.After)
		}
		out.Recovered = out.Recovered && ok
		out.Workers = append(out.Workers, w)
	}
	return out
}

// RecoverySteps splits the recovery after the heal: Wait until the first
// successful probe reached the provider (the rest of the open period in
// force at the heal, or a probe still hanging), its round trip RTT, and
// Rest, from the probe's answer until every surviving process had a
// success. ok is false without a successful probe after the heal.
func (r *Result) RecoverySteps() (wait, rtt, rest time.Duration, ok bool) {
	heal := r.T0.Add(r.Scenario.OutageTo).UnixNano()
	for _, a := range r.Arrivals {
		if a.Key == worker.KeyPrimary && a.Probe && a.Status == 200 && a.At >= heal {
			rec := r.Recovery()
			end := heal + int64(rec.Max)
			return time.Duration(a.At - heal), time.Duration(a.End - a.At), max(time.Duration(end-a.End), 0), rec.Recovered
		}
	}
	return 0, 0, 0, false
}

// Metrics computes the run's figures.
func (r *Result) Metrics() Metrics {
	var m Metrics
	sc := r.Scenario
	from := r.T0.Add(sc.OutageFrom + 500*time.Millisecond).UnixNano()
	to := r.T0.Add(sc.OutageTo).UnixNano()
	steady := 0
	var first int64
	for _, a := range r.Arrivals {
		if a.Key == worker.KeyPrimary && a.Failing() && a.End > 0 && (first == 0 || a.End < first) {
			first = a.End
		}
	}
	for _, a := range r.Arrivals {
		if a.Local {
			m.Local++
		}
		if a.Key != worker.KeyPrimary || !a.Failing() {
			continue
		}
		m.Reached++
		if a.SentAt > first {
			m.AfterFirst++
		}
		if a.Probe {
			m.Probes++
		}
		if a.At >= from && a.At < to {
			steady++
		}
	}
	m.WastedPerProc = float64(m.Reached) / float64(r.Options.P)
	if to > from {
		m.Steady = float64(steady) / time.Duration(to-from).Seconds()
	}
	if sc.Heals {
		rec := r.Recovery()
		m.Recovery, m.Recovered = rec.Max, rec.Recovered
	}
	var added []time.Duration
	for _, w := range r.Workers {
		if w == nil {
			continue
		}
		for _, c := range w.Calls {
			if c.Cut {
				continue
			}
			m.Calls++
			if !c.OK {
				m.Failed++
				continue
			}
			added = append(added, c.Added())
		}
	}
	m.P99Added = percentile(added, 0.99)
	return m
}

// percentile returns the p-quantile (nearest rank) of ds, 0 when empty.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Floor is the fewest requests a perfectly coordinated fleet sends the
// failing primary during the scenario's outage: the consecutive failures
// that trip the breaker, then one probe per open period (one per
// Retry-After for a rate limit). 0 when the scenario has no simple floor
// (the fleet rules' scenarios change the policy it assumes).
func Floor(sc Scenario, o Options) int {
	if sc.Rule != "" {
		return 0
	}
	var kind fakeprovider.Kind
	for _, p := range sc.Script.Phases {
		if p.Key != worker.KeyPrimary && p.Key != "" {
			continue
		}
		if kind != "" && kind != p.Kind {
			return 0 // mixed phases
		}
		kind = p.Kind
	}
	out := sc.OutageTo - sc.OutageFrom
	p := o.Policy
	open := func(n int) time.Duration {
		d := p.OpenBase
		for i := 1; i < n && d < p.OpenMax; i++ {
			d *= 2
		}
		return min(d, p.OpenMax)
	}
	switch {
	case kind == fakeprovider.RateLimit && len(sc.Script.Phases) == 1:
		ra := sc.Script.Phases[0].RetryAfter
		return 1 + int((out-1)/ra)
	case (kind == fakeprovider.Error || kind == fakeprovider.Hang) && len(sc.Script.Phases) == 1:
		took := time.Duration(0)
		if kind == fakeprovider.Hang {
			took = o.Timing.AttemptTimeout
		}
		n, probes := 1, 0
		for t := took + open(1); t < out; t += took + open(n) {
			probes++
			n++
		}
		return p.ConsecutiveFailures + probes
	}
	return 0
}

// Title names a strategy in the table.
func Title(s worker.Strategy) string {
	switch s {
	case worker.NoCoordination:
		return "(a) no coordination"
	case worker.Local:
		return "(b) process-local"
	case worker.Cooldownd:
		return "(c) cooldownd"
	}
	return string(s)
}

// Table prints one scenario's results, one row per strategy.
func Table(w io.Writer, sc Scenario, o Options, rs []*Result) {
	fmt.Fprintf(w, "\n### %s — %s\n\n", sc.Name, sc.Title)
	fmt.Fprintf(w, "| strategy | reached failing provider | after 1st failure | wasted / process | steady req/s | probes | heal → all recovered | failed user calls | p99 added latency | properties |\n")
	fmt.Fprintf(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	byStrategy := make(map[worker.Strategy]Metrics)
	for _, r := range rs {
		m := r.Metrics()
		byStrategy[r.Strategy] = m
		rec := "—"
		if sc.Heals {
			rec = "never"
			if m.Recovered {
				rec = fmtDur(m.Recovery)
			}
		}
		probes := "—"
		if r.Strategy != worker.NoCoordination {
			probes = fmt.Sprint(m.Probes)
		}
		props := "ok"
		if vs := Check(r); len(vs) > 0 {
			var names []string
			for _, v := range vs {
				names = append(names, fmt.Sprintf("%s ×%d", v.Property, v.Count))
			}
			props = strings.Join(names, ", ")
		}
		if m.Local > 0 && r.Strategy == worker.Cooldownd {
			props += fmt.Sprintf(" (%d local admissions)", m.Local)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %.1f | %.1f | %s | %s | %d / %d (%.1f%%) | %s | %s |\n",
			Title(r.Strategy), m.Reached, m.AfterFirst, m.WastedPerProc, m.Steady, probes, rec,
			m.Failed, m.Calls, pct(m.Failed, m.Calls), fmtDur(m.P99Added), props)
	}
	var notes []string
	for _, r := range rs {
		if s := r.RuleSummary(); s != "" {
			notes = append(notes, s)
		}
	}
	for _, r := range rs {
		if wait, rtt, rest, ok := r.RecoverySteps(); ok && r.Strategy == worker.Cooldownd && sc.Rule == "" {
			notes = append(notes, fmt.Sprintf("(c) recovery: the first probe went %s after the heal, took %s, and the last process was back %s after its answer",
				fmtDur(wait), fmtDur(rtt), fmtDur(rest)))
		}
	}
	if f := Floor(sc, o); f > 0 {
		notes = append(notes, fmt.Sprintf("floor ≈ %d requests (%d failures to trip, then one probe per open period)", f, o.Policy.ConsecutiveFailures))
	}
	c, okC := byStrategy[worker.Cooldownd]
	okC = okC && sc.Rule == "" // the breaker's goals; a fleet rule's figures are above
	if a, ok := byStrategy[worker.NoCoordination]; ok && okC {
		notes = append(notes, fmt.Sprintf("(c) vs (a): %s fewer wasted requests, %s after the 1st failure (goal ≥ 10×)",
			ratio(a.Reached, c.Reached), ratio(a.AfterFirst, c.AfterFirst)))
	}
	if b, ok := byStrategy[worker.Local]; ok && okC {
		notes = append(notes, fmt.Sprintf("(c) vs (b): %s fewer, %s after the 1st failure (goal ≥ P/2 = %g×)",
			ratio(b.Reached, c.Reached), ratio(b.AfterFirst, c.AfterFirst), float64(o.P)/2))
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\n%s.\n", strings.Join(notes, "; "))
	}
}

func ratio(x, y int) string {
	if y == 0 {
		if x == 0 {
			return "1×"
		}
		return "∞×"
	}
	return fmt.Sprintf("%.1f×", float64(x)/float64(y))
}

func pct(n, d int) float64 {
	if d == 0 {
		return 0
	}
	return 100 * float64(n) / float64(d)
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000)
}
