package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
)

// The ratios: every cooldownd figure beside its references of the same
// round and concurrency (the no-op handler of the same protocol, the same
// handler with one EVALSHA return 1, the Redis floor, ratelimit), each a
// median over rounds of the per-round ratio; then issue 25's goals, each
// met or not met with its figure, and the before/after row
// docs/benchmarks.md keeps per change.

// loadAtStart is /proc/loadavg's 1-minute figure when the run began.
var loadAtStart string

func loadAvg1() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// Per-op figures of one measured phase.
func rate(r measured) float64 { return r.s.rate() }
func p99(r measured) float64  { return float64(r.s.pct(0.99)) }

func perOp(r measured, v float64) float64 {
	if r.s.n == 0 {
		return 0
	}
	return v / float64(r.s.n)
}

func cpuPerOp(r measured) float64      { return perOp(r, float64(r.cd.Microseconds())) }
func cmdsPerOp(r measured) float64     { return perOp(r, float64(r.redis.calls)) }
func redisCPUPerOp(r measured) float64 { return perOp(r, r.redis.cpu*1e6) }

// scriptPerOp is the µs Redis spent inside scripts per op (INFO
// commandstats' usec of the script commands).
func scriptPerOp(r measured) float64 { return perOp(r, float64(r.redis.luaUsec)) }

func luaPerCall(r measured) float64 {
	if r.redis.evalsha == 0 {
		return 0
	}
	return float64(r.redis.luaUsec) / float64(r.redis.evalsha)
}

func medianOf(rs []measured, f func(measured) float64) float64 {
	v := make([]float64, 0, len(rs))
	for _, r := range rs {
		v = append(v, f(r))
	}
	return median(v)
}

// perRound is the median over the rounds of f(round i, k's result in it);
// f says false where its references are missing. ok is false when no round
// had them.
func (m *measurer) perRound(k phaseKey, f func(i int, a measured) (float64, bool)) fig {
	var v []float64
	for i, a := range m.results[k] {
		if x, ok := f(i, a); ok {
			v = append(v, x)
		}
	}
	return fig{median(v), len(v) > 0}
}

// at is ref's result in round i.
func (m *measurer) at(ref phaseKey, i int) (measured, bool) {
	rs := m.results[ref]
	if i >= len(rs) {
		return measured{}, false
	}
	return rs[i], true
}

// ratio is the median over rounds of f(k's result, ref's result).
func (m *measurer) ratio(k, ref phaseKey, f func(a, b measured) float64) fig {
	return m.perRound(k, func(i int, a measured) (float64, bool) {
		b, ok := m.at(ref, i)
		if !ok || a.s.n == 0 || b.s.n == 0 { // a phase that completed no op has no figure
			return 0, false
		}
		x := f(a, b)
		return x, x == x && x < 1e300 // a zero reference (no CPU tick, no op) gives no ratio
	})
}

// fig is a figure that may be missing (its references did not run).
type fig struct {
	v  float64
	ok bool
}

func (f fig) format(format string) string {
	if !f.ok {
		return "-"
	}
	return fmt.Sprintf(format, f.v)
}

// times formats a ratio as "1.23×".
func (f fig) times() string { return f.format("%.2f×") }

// refs are the references of a cooldownd phase k: the no-op phases whose
// server CPU it is compared with (summed: Admit+Report is both RPCs), the
// no-op+EVALSHA phase, and the no-op phase whose rate it is compared with
// ("" when none is).
func refs(k phaseKey) (noop []phaseKey, noopRedis phaseKey, noopRate string) {
	na, nr, nre := phaseKey{k.c, k.proto, opNoopAdmit}, phaseKey{k.c, k.proto, opNoopReport}, phaseKey{k.c, k.proto, opNoopRedisAdmit}
	switch k.op {
	case opAdmit, opAdmit3:
		return []phaseKey{na}, nre, opNoopAdmit
	case opReport:
		return []phaseKey{nr}, nre, opNoopReport
	case opAdmitReport:
		return []phaseKey{na, nr}, phaseKey{}, ""
	case opNoopRedisAdmit:
		return []phaseKey{na}, phaseKey{}, opNoopAdmit
	case opRatelimit: // beside the no-op answering gRPC
		g := phaseKey{k.c, "grpc", opNoopAdmit}
		return []phaseKey{g}, phaseKey{k.c, "grpc", opNoopRedisAdmit}, opNoopAdmit
	}
	return nil, phaseKey{}, ""
}

// cpuRatio is k's server CPU per op over the sum of its references'.
func (m *measurer) cpuRatio(k phaseKey, ref []phaseKey) fig {
	if len(ref) == 0 {
		return fig{}
	}
	return m.perRound(k, func(i int, a measured) (float64, bool) {
		if a.s.n == 0 {
			return 0, false
		}
		var sum float64
		for _, r := range ref {
			b, ok := m.at(r, i)
			if !ok || b.s.n == 0 {
				return 0, false
			}
			sum += cpuPerOp(b)
		}
		if sum == 0 {
			return 0, false
		}
		return cpuPerOp(a) / sum, true
	})
}

func (m *measurer) rlKey(c int) phaseKey { return phaseKey{c, "grpc", opRatelimit} }

// printRatios writes the ratio table.
func (m *measurer) printRatios(w io.Writer, haveRL bool) {
	fmt.Fprintln(w, "Ratios: each figure beside its references of the same round and c (medians of the per-round ratios).")
	fmt.Fprintln(w, "×no-op: server CPU per op ÷ the no-op handler's of the same protocol (Admit+Report: ÷ its no-op Admit + Report; ratelimit: ÷ the no-op answering gRPC);")
	fmt.Fprintln(w, "×no-op+EVALSHA: ÷ the no-op handler that runs one EVALSHA return 1 per RPC, the floor of a Redis-backed handler; ÷no-op: req/s ÷ the no-op's;")
	fmt.Fprintln(w, "script µs/op: Redis time inside scripts per op (INFO commandstats); ×return 1: ÷ the floor's EVALSHA return 1; ÷ratelimit, p99 ×ratelimit: against ShouldRateLimit.")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "c\tproto\top\tserver CPU µs/op\t×no-op\t×no-op+EVALSHA\treq/s\t÷no-op\tscript µs/op\t×return 1\t÷ratelimit\tp99 ×ratelimit\t")
	last := 0
	for _, k := range m.order {
		switch k.op {
		case opAdmit, opReport, opAdmitReport, opAdmit3, opNoopRedisAdmit, opRatelimit:
		default:
			continue
		}
		if k.c != last && last != 0 {
			fmt.Fprintln(tw, "\t\t\t\t\t\t\t\t\t\t\t\t")
		}
		last = k.c
		rs := m.results[k]
		noop, noopRedis, noopRate := refs(k)
		xNoop := m.cpuRatio(k, noop).times()
		xNoopRedis := "-"
		if noopRedis != (phaseKey{}) {
			xNoopRedis = m.cpuRatio(k, []phaseKey{noopRedis}).times()
		}
		rateNoop := "-"
		if noopRate != "" {
			ref := phaseKey{k.c, k.proto, noopRate}
			if k.op == opRatelimit {
				ref.proto = "grpc"
			}
			rateNoop = m.ratio(k, ref, func(a, b measured) float64 { return a.s.rate() / b.s.rate() }).format("%.2f")
		}
		script, xReturn1 := "-", "-"
		if medianOf(rs, func(r measured) float64 { return float64(r.redis.evalsha) }) > 0 {
			script = fmt.Sprintf("%.1f", medianOf(rs, scriptPerOp))
			xReturn1 = m.ratio(k, phaseKey{k.c, "redis", opFloor}, func(a, b measured) float64 { return scriptPerOp(a) / luaPerCall(b) }).format("%.1f")
		}
		rlRate, rlP99 := "-", "-"
		if haveRL && k.op != opRatelimit {
			rlRate = m.ratio(k, m.rlKey(k.c), func(a, b measured) float64 { return a.s.rate() / b.s.rate() }).format("%.2f")
			rlP99 = m.ratio(k, m.rlKey(k.c), func(a, b measured) float64 { return p99(a) / p99(b) }).format("%.2f")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.0f\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t\n", k.c, k.proto, k.op, medianOf(rs, cpuPerOp), xNoop, xNoopRedis,
			medianOf(rs, rate), rateNoop, script, xReturn1, rlRate, rlP99)
	}
	_ = tw.Flush()
	if !haveRL {
		fmt.Fprintln(w, "ratelimit: not built (give -ratelimit <binary> or $"+ratelimitEnv+"; docs/benchmarks.md builds it from a snapshot)")
	}
}

// goal is one of issue 25's goals at one concurrency.
type goal struct {
	name  string
	fig   string
	met   string // "met", "not met", "not measured"
	short string // the before/after row's cell
}

// goalConcs are the concurrencies the goals are checked at: 16 and 64
// where the run has them, else every one it has.
func (m *measurer) goalConcs() []int {
	var cs []int
	for _, c := range m.o.conc {
		if c == 16 || c == 64 {
			cs = append(cs, c)
		}
	}
	if len(cs) == 0 {
		cs = slices.Clone(m.o.conc)
	}
	return cs
}

func (m *measurer) goals(haveRL bool) []goal {
	verdict := func(ok, measuredOK bool) string {
		switch {
		case !measuredOK:
			return "not measured"
		case ok:
			return "met"
		}
		return "not met"
	}
	var gs []goal
	for _, c := range m.goalConcs() {
		admit, report := phaseKey{c, m.o.goalProto, opAdmit}, phaseKey{c, m.o.goalProto, opReport}
		for _, g := range []struct {
			k    phaseKey
			ref  string
			name string
		}{{admit, opNoopAdmit, "server CPU per Admit ≤ 1.2× the no-op's"}, {report, opNoopReport, "server CPU per Report ≤ 1.2× the no-op's"}} {
			f := m.cpuRatio(g.k, []phaseKey{{c, m.o.goalProto, g.ref}})
			gs = append(gs, goal{fmt.Sprintf("c=%d %s", c, g.name), f.times(), verdict(f.v <= 1.2, f.ok), f.format("%.2f")})
		}
		for _, g := range []struct {
			k     phaseKey
			limit float64
			name  string
		}{{admit, 10, "Redis ≤ 10 µs of script per healthy Admit"}, {report, 15, "Redis ≤ 15 µs of script per healthy Report"}} {
			rs, ok := m.results[g.k]
			f := fig{medianOf(rs, scriptPerOp), ok}
			gs = append(gs, goal{fmt.Sprintf("c=%d %s", c, g.name), f.format("%.1f µs"), verdict(f.v <= g.limit, f.ok), f.format("%.1f")})
		}
		rl := m.rlKey(c)
		r := m.ratio(admit, rl, func(a, b measured) float64 { return a.s.rate() / b.s.rate() })
		p := m.ratio(admit, rl, func(a, b measured) float64 { return p99(a) / p99(b) })
		rfig, pfig := r.format("%.2f× ratelimit's req/s"), p.format("%.2f× ratelimit's p99")
		if !haveRL {
			rfig, pfig = "ratelimit: not built", "ratelimit: not built"
		}
		gs = append(gs,
			goal{fmt.Sprintf("c=%d Admit ≥ 1.05× ratelimit's req/s", c), rfig, verdict(r.v >= 1.05, r.ok), r.format("%.2f")},
			goal{fmt.Sprintf("c=%d Admit p99 no worse than ratelimit's", c), pfig, verdict(p.v <= 1, p.ok), p.format("%.2f")})
	}
	return gs
}

// printGoals writes the summary block and the before/after row.
func (m *measurer) printGoals(w io.Writer, haveRL bool) {
	gs := m.goals(haveRL)
	fmt.Fprintf(w, "Summary: issue 25's goals, over %s (%s), load average %s at the start, %s at the end:\n", m.o.goalProto, m.o.label, loadAtStart, loadAvg1())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	met := 0
	for _, g := range gs {
		mark := map[string]string{"met": "MET", "not met": "NOT MET", "not measured": "not measured"}[g.met]
		if g.met == "met" {
			met++
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", g.name, g.fig, mark)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d of %d met.\n", met, len(gs))
	// The row of docs/benchmarks.md's before/after table: one cell per goal,
	// the concurrencies joined by " / ".
	cells := map[string][]string{}
	var order []string
	for _, g := range gs {
		_, name, _ := strings.Cut(g.name, " ")
		if _, ok := cells[name]; !ok {
			order = append(order, name)
		}
		cells[name] = append(cells[name], g.short)
	}
	var cs []string
	for _, c := range m.goalConcs() {
		cs = append(cs, fmt.Sprint(c))
	}
	fmt.Fprintf(w, "\nbefore/after row (docs/benchmarks.md; each cell c=%s): | %s | %s–%s |", strings.Join(cs, " / "), m.o.label, loadAtStart, loadAvg1())
	for _, n := range order {
		fmt.Fprintf(w, " %s |", strings.Join(cells[n], " / "))
	}
	fmt.Fprintln(w)
}
