package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// phaseOf is a measured phase of n ops in one second, each of latency lat,
// cpuUS µs of server CPU and scriptUS µs of Redis script time per op.
func phaseOf(n int64, lat time.Duration, cpuUS, scriptUS float64) measured {
	l := make([]time.Duration, n)
	for i := range l {
		l[i] = lat
	}
	r := measured{s: sample{n: n, dur: time.Second, lat: l}, cd: time.Duration(cpuUS*float64(n)) * time.Microsecond}
	if scriptUS > 0 {
		r.redis.evalsha, r.redis.luaUsec = n, int64(scriptUS*float64(n))
	}
	return r
}

// TestGoals checks the summary's verdicts against figures of known value:
// each ratio is the median of the per-round ratios of phases of the same
// round (never a ratio of medians), a bound is met at equality, a phase
// that completed no op gives no figure, and a goal whose reference did not
// run is "not measured".
func TestGoals(t *testing.T) {
	t.Parallel()
	type round struct{ admit, noopAdmit, report, noopReport, rl measured }
	good := round{
		admit: phaseOf(1050, 2*time.Millisecond, 120, 10), noopAdmit: phaseOf(2000, time.Millisecond, 100, 0),
		report: phaseOf(1000, 2*time.Millisecond, 120, 15), noopReport: phaseOf(2000, time.Millisecond, 100, 0),
		rl: phaseOf(1000, 2*time.Millisecond, 70, 0),
	}
	tests := []struct {
		name   string
		rounds []round
		noRL   bool
		want   map[string]string // goal (at c=16) → verdict
		figs   map[string]string // goal → figure
	}{
		{
			name:   "at the bounds: met",
			rounds: []round{good},
			want: map[string]string{"server CPU per Admit ≤ 1.2× the no-op's": "met", "server CPU per Report ≤ 1.2× the no-op's": "met",
				"Redis ≤ 10 µs of script per healthy Admit": "met", "Redis ≤ 15 µs of script per healthy Report": "met",
				"Admit ≥ 1.05× ratelimit's req/s": "met", "Admit p99 no worse than ratelimit's": "met"},
			figs: map[string]string{"server CPU per Admit ≤ 1.2× the no-op's": "1.20×", "Admit ≥ 1.05× ratelimit's req/s": "1.05× ratelimit's req/s"},
		},
		{
			name: "over the bounds: not met",
			rounds: []round{{
				admit: phaseOf(1000, 3*time.Millisecond, 122, 10.5), noopAdmit: phaseOf(2000, time.Millisecond, 100, 0),
				report: phaseOf(1000, 2*time.Millisecond, 130, 16), noopReport: phaseOf(2000, time.Millisecond, 100, 0),
				rl: phaseOf(1000, 2*time.Millisecond, 70, 0),
			}},
			want: map[string]string{"server CPU per Admit ≤ 1.2× the no-op's": "not met", "server CPU per Report ≤ 1.2× the no-op's": "not met",
				"Redis ≤ 10 µs of script per healthy Admit": "not met", "Redis ≤ 15 µs of script per healthy Report": "not met",
				"Admit ≥ 1.05× ratelimit's req/s": "not met", "Admit p99 no worse than ratelimit's": "not met"},
			figs: map[string]string{"server CPU per Admit ≤ 1.2× the no-op's": "1.22×", "Admit p99 no worse than ratelimit's": "1.50× ratelimit's p99"},
		},
		{
			// Per round, Admit's CPU ÷ the no-op's is 120/100, 120/50 and
			// 300/200: 1.2, 2.4, 1.5, median 1.5 (not met). The ratio of the
			// medians, 120 ÷ 100 = 1.2, would say met.
			name: "median of per-round ratios",
			rounds: []round{good,
				{admit: phaseOf(1050, 2*time.Millisecond, 120, 10), noopAdmit: phaseOf(2000, time.Millisecond, 50, 0),
					report: good.report, noopReport: good.noopReport, rl: good.rl},
				{admit: phaseOf(1050, 2*time.Millisecond, 300, 10), noopAdmit: phaseOf(2000, time.Millisecond, 200, 0),
					report: good.report, noopReport: good.noopReport, rl: good.rl}},
			want: map[string]string{"server CPU per Admit ≤ 1.2× the no-op's": "not met"},
			figs: map[string]string{"server CPU per Admit ≤ 1.2× the no-op's": "1.50×"},
		},
		{
			name: "a reference that completed no op gives no figure",
			rounds: []round{{admit: good.admit, noopAdmit: phaseOf(0, 0, 0, 0), report: good.report, noopReport: good.noopReport,
				rl: phaseOf(0, 0, 0, 0)}},
			want: map[string]string{"server CPU per Admit ≤ 1.2× the no-op's": "not measured", "server CPU per Report ≤ 1.2× the no-op's": "met",
				"Admit ≥ 1.05× ratelimit's req/s": "not measured"},
		},
		{
			name:   "ratelimit not built",
			rounds: []round{good},
			noRL:   true,
			want: map[string]string{"Admit ≥ 1.05× ratelimit's req/s": "not measured", "Admit p99 no worse than ratelimit's": "not measured",
				"server CPU per Admit ≤ 1.2× the no-op's": "met"},
			figs: map[string]string{"Admit ≥ 1.05× ratelimit's req/s": "ratelimit: not built"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := &measurer{o: options{conc: []int{16}, label: "test", goalProto: "connect"}, results: map[phaseKey][]measured{}}
			add := func(k phaseKey, r measured) {
				if _, ok := m.results[k]; !ok {
					m.order = append(m.order, k)
				}
				m.results[k] = append(m.results[k], r)
			}
			for _, r := range tt.rounds {
				add(phaseKey{16, "redis", opFloor}, phaseOf(10000, 100*time.Microsecond, 0, 1))
				add(phaseKey{16, "connect", opNoopAdmit}, r.noopAdmit)
				add(phaseKey{16, "connect", opNoopReport}, r.noopReport)
				add(phaseKey{16, "connect", opAdmit}, r.admit)
				add(phaseKey{16, "connect", opReport}, r.report)
				if !tt.noRL {
					add(phaseKey{16, "grpc", opRatelimit}, r.rl)
				}
			}
			got := map[string]goal{}
			for _, g := range m.goals(!tt.noRL) {
				got[g.name] = g
			}
			require.Len(t, got, 6)
			for name, want := range tt.want {
				assert.Equal(t, want, got["c=16 "+name].met, name)
			}
			for name, want := range tt.figs {
				assert.Equal(t, want, got["c=16 "+name].fig, name)
			}
			var b bytes.Buffer
			m.printRatios(&b, !tt.noRL)
			m.printGoals(&b, !tt.noRL)
			assert.Contains(t, b.String(), "of 6 met.")
		})
	}
}
