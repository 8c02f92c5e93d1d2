package harness

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/test/storm/fakeprovider"
	"github.com/cooldownd/cooldownd/test/storm/worker"
)

const ms = int64(time.Millisecond)

func TestPeakProbes(t *testing.T) {
	t.Parallel()
	p := worker.KeyPrimary
	arr := []fakeprovider.Arrival{
		{Key: p, Probe: true, At: 10 * ms, End: 20 * ms},
		{Key: p, Probe: true, At: 20 * ms, End: 30 * ms}, // starts as the first ends: not overlapping
		{Key: p, At: 21 * ms, End: 40 * ms},              // not a probe
		{Key: worker.KeyFallback, Probe: true, At: 22 * ms, End: 40 * ms},
	}
	peak, _ := PeakProbes(arr, p)
	assert.Equal(t, 1, peak)

	arr = append(arr, fakeprovider.Arrival{Key: p, Probe: true, At: 25 * ms}) // still in flight
	peak, at := PeakProbes(arr, p)
	assert.Equal(t, 2, peak)
	assert.Equal(t, 25*ms, at)
}

func TestSentWhileOpen(t *testing.T) {
	t.Parallel()
	p := worker.KeyPrimary
	open := []Interval{{From: time.Unix(0, 1000*ms), To: time.Unix(0, 2000*ms)}}
	arr := []fakeprovider.Arrival{
		{Seq: 0, Key: p, SentAt: 1000*ms + int64(AdmitGrace)/2}, // may have been admitted before the open
		{Seq: 1, Key: p, SentAt: 1500 * ms},                     // sent while open
		{Seq: 2, Key: worker.KeyFallback, SentAt: 1500 * ms},    // another key
		{Seq: 3, Key: p, SentAt: 2000*ms - int64(EndGrace)/2},   // the open is ending
		{Seq: 4, Key: p, SentAt: 2100 * ms},                     // after
		{Seq: 5, Key: p},                                        // no send time: not judged
	}
	bad := SentWhileOpen(arr, p, open)
	if assert.Len(t, bad, 1) {
		assert.Equal(t, 1, bad[0].Seq)
	}
}

func TestSentBeforeRetryAfter(t *testing.T) {
	t.Parallel()
	p := worker.KeyPrimary
	arr := []fakeprovider.Arrival{
		{Seq: 0, Key: p, SentAt: 990 * ms, End: 1000 * ms, Status: 429, RetryAfter: time.Second},
		{Seq: 1, Key: p, SentAt: 1000*ms + int64(AdmitGrace)/2},                                   // admitted before the 429 was known
		{Seq: 2, Key: p, SentAt: 1500 * ms},                                                       // too early
		{Seq: 3, Key: worker.KeyFallback, SentAt: 1500 * ms},                                      // another key
		{Seq: 4, Key: p, SentAt: 2000 * ms, End: 2010 * ms, Status: 429, RetryAfter: time.Second}, // on time, limited again
		{Seq: 5, Key: p, SentAt: 2500 * ms},                                                       // too early for the second
		{Seq: 6, Key: p, SentAt: 3020 * ms, End: 3030 * ms, Status: 200},                          // on time
	}
	bad, first := SentBeforeRetryAfter(arr)
	var seqs []int
	for _, a := range bad {
		seqs = append(seqs, a.Seq)
	}
	assert.ElementsMatch(t, []int{2, 5}, seqs)
	assert.Equal(t, 0, first.Seq)
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	assert.Zero(t, percentile(nil, 0.99))
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(101-i)*time.Millisecond)
	}
	assert.Equal(t, 99*time.Millisecond, percentile(ds, 0.99))
	assert.Equal(t, 50*time.Millisecond, percentile(ds, 0.5))
	assert.Equal(t, 100*time.Millisecond, percentile(ds, 1))
}

func TestFloor(t *testing.T) {
	t.Parallel()
	o := Options{Policy: DefaultPolicy(), Timing: DefaultTiming(), P: 8}
	floors := make(map[string]int)
	for _, sc := range Scenarios(o.Timing) {
		floors[sc.Name] = Floor(sc, o)
	}
	// 4 s of 500s: opens of 100, 200, then 400 ms end at 0.1, 0.3, 0.7,
	// 1.1, …, 3.9 s: 11 probes after 3 failures.
	assert.Equal(t, 14, floors["hard-outage"])
	// One probe per 1 s Retry-After over 4 s, the first 429 included.
	assert.Equal(t, 4, floors["rate-limit"])
	assert.Zero(t, floors["flapping"], "no simple floor")
}

func TestRecoveryAndMetrics(t *testing.T) {
	t.Parallel()
	sc := Scenario{OutageFrom: time.Second, OutageTo: 2 * time.Second, Heals: true}
	t0 := time.Unix(100, 0)
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	p := worker.KeyPrimary
	r := &Result{Scenario: sc, Strategy: worker.Cooldownd, Options: Options{P: 3, Policy: DefaultPolicy(), Timing: DefaultTiming()}, T0: t0,
		Kill: &Kill{Worker: 2},
		Arrivals: []fakeprovider.Arrival{
			{Seq: 0, Key: p, Worker: 0, SentAt: at(1100 * time.Millisecond), At: at(1100 * time.Millisecond), End: at(1101 * time.Millisecond), Kind: fakeprovider.Error, Status: 500},
			{Seq: 1, Key: p, Worker: 1, SentAt: at(1700 * time.Millisecond), At: at(1700 * time.Millisecond), End: at(1701 * time.Millisecond), Kind: fakeprovider.Error, Status: 500, Probe: true},
			{Seq: 2, Key: p, Worker: 0, At: at(2100 * time.Millisecond), Kind: fakeprovider.OK, Status: 200},
			{Seq: 3, Key: p, Worker: 1, At: at(2300 * time.Millisecond), Kind: fakeprovider.OK, Status: 200},
		},
		Workers: []*worker.Result{
			{Calls: []worker.Call{{OK: true, Start: 0, End: int64(30 * time.Millisecond), Served: 10 * time.Millisecond}}},
			{Calls: []worker.Call{{OK: false, Start: 0, End: 1}, {Cut: true}}},
			nil,
		},
	}
	rec := r.Recovery()
	assert.True(t, rec.Recovered, "the killed worker 2 is not waited for")
	assert.Equal(t, 300*time.Millisecond, rec.Max)

	m := r.Metrics()
	assert.Equal(t, 2, m.Reached)
	assert.Equal(t, 1, m.AfterFirst)
	assert.Equal(t, 1, m.Probes)
	assert.Equal(t, 2, m.Calls, "the cut call is left out")
	assert.Equal(t, 1, m.Failed)
	assert.Equal(t, 20*time.Millisecond, m.P99Added)
	assert.InDelta(t, 2.0, m.Steady, 0.01, "2 failing requests in the 0.5 s after the first 500 ms")
}

// TestFallbackProperty: after the first quota answer nobody rediscovers the
// exhausted primary and every call goes straight to the fallback; a call
// that needed a second request, or was answered by the primary, breaks it.
func TestFallbackProperty(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(100, 0)
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	quota := fakeprovider.Arrival{Seq: 0, Key: worker.KeyPrimary, SentAt: at(time.Second), At: at(time.Second),
		End: at(time.Second + time.Millisecond), Kind: fakeprovider.Quota, Status: 429}
	straight := worker.Call{OK: true, Start: at(2 * time.Second), End: at(2*time.Second + 5*time.Millisecond), Attempts: 1, Key: worker.KeyFallback}
	tests := []struct {
		name  string
		calls []worker.Call
		late  bool // a primary request long after the quota answer
		want  int  // fallback violations
	}{
		{name: "straight to the fallback", calls: []worker.Call{straight, straight}},
		{name: "a slow admit is not a violation", calls: []worker.Call{{OK: true, Start: at(2 * time.Second), End: at(3 * time.Second), Attempts: 1, Key: worker.KeyFallback}}},
		{name: "a retry to switch", calls: []worker.Call{straight, {OK: true, Start: at(2 * time.Second), End: at(3 * time.Second), Attempts: 2, Key: worker.KeyFallback}}, want: 1},
		{name: "answered by the primary", calls: []worker.Call{{OK: true, Start: at(2 * time.Second), End: at(3 * time.Second), Attempts: 1, Key: worker.KeyPrimary}}, want: 1},
		{name: "the primary rediscovered", calls: []worker.Call{straight}, late: true, want: 1},
		{name: "calls before the switch do not count", calls: []worker.Call{{OK: true, Start: at(500 * time.Millisecond), End: at(time.Second), Attempts: 2, Key: worker.KeyPrimary}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			arr := []fakeprovider.Arrival{quota}
			if tt.late {
				arr = append(arr, fakeprovider.Arrival{Seq: 1, Key: worker.KeyPrimary, SentAt: at(3 * time.Second), At: at(3 * time.Second), Kind: fakeprovider.Quota, Status: 429})
			}
			r := &Result{Scenario: Scenario{Name: "quota-fallback", Fallback: true}, Strategy: worker.NoCoordination,
				Options: Options{P: 1, Policy: DefaultPolicy(), Timing: DefaultTiming()}, T0: t0,
				Arrivals: arr, Workers: []*worker.Result{{Calls: tt.calls}}}
			n := 0
			for _, v := range Check(r) {
				if v.Property == PropFallback {
					n += v.Count
				}
			}
			assert.Equal(t, tt.want, n)
		})
	}
}

// ruleCount sums the counts of the violations of prop.
func ruleCount(vs []Violation, prop string) int {
	n := 0
	for _, v := range vs {
		if v.Property == prop {
			n += v.Count
		}
	}
	return n
}

// TestRetryBudgetProperty: the retries that reach the provider must stay
// within what the model's budget admits over their span, plus the
// window's slack; a fleet that retries past it breaks the property.
func TestRetryBudgetProperty(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(100, 0)
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	p := DefaultPolicy()
	p.RetryBudget, p.RetryBudgetMin, p.FleetWindow = 0.1, 2, time.Second
	// 200 first attempts over 2 s, then retries from +1 s to +3 s: span
	// 2 s. The model's budget admits 12 over it: about 0.1 × the 100 first
	// attempts a 1 s window holds in the first second, then what the
	// second's window leaves as its older bucket's weight fades (a formula
	// of the whole span's first attempts, 0.1 × 200 + 2 × 2 = 24, counted
	// them twice). Slack 0.1 × 200 + 2 × 2 × 1 = 24: at most 36. Alone with
	// its own minimum each of 8 processes would allow 32 together.
	history := func(retries int, local bool) []fakeprovider.Arrival {
		var arr []fakeprovider.Arrival
		for i := range 200 {
			arr = append(arr, fakeprovider.Arrival{Key: worker.KeyPrimary, SentAt: at(time.Duration(i) * 10 * time.Millisecond), Status: 500, Kind: fakeprovider.Error})
		}
		for i := range retries {
			d := time.Second + time.Duration(i)*2*time.Second/time.Duration(max(retries-1, 1))
			arr = append(arr, fakeprovider.Arrival{Key: worker.KeyPrimary, Retry: true, Local: local, SentAt: at(d), Status: 500, Kind: fakeprovider.Error})
		}
		// Another key's retries are not the primary's budget.
		arr = append(arr, fakeprovider.Arrival{Key: worker.KeyFallback, Retry: true, SentAt: at(time.Second)})
		return arr
	}
	tests := []struct {
		name     string
		strategy worker.Strategy
		retries  int
		local    bool
		want     int
	}{
		{name: "within the budget", strategy: worker.Cooldownd, retries: 36},
		{name: "over it", strategy: worker.Cooldownd, retries: 48, want: 12},
		{name: "local admissions bypass cooldownd's budget", strategy: worker.Cooldownd, retries: 48, local: true},
		{name: "without cooldownd every request counts", strategy: worker.Local, retries: 48, local: true, want: 12},
		{name: "no coordination", strategy: worker.NoCoordination, retries: 100, want: 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &Result{Scenario: Scenario{Name: RuleRetryBudget, Rule: RuleRetryBudget}, Strategy: tt.strategy, T0: t0,
				Options: Options{P: 8, Policy: p, Timing: DefaultTiming()}, Arrivals: history(tt.retries, tt.local),
				Workers: []*worker.Result{{Wire: worker.Wire{Denies: map[string]int{reasonRetryBudget: 7}, RetryAdmits: 9}}}}
			assert.Equal(t, tt.want, ruleCount(Check(r), PropRetryBudget))
			b := r.Budget()
			if tt.local && tt.strategy == worker.Cooldownd {
				return
			}
			assert.Equal(t, tt.retries, b.Retries)
			assert.Equal(t, 2*time.Second, b.Span)
			assert.Equal(t, 200, b.FirstAttempts)
			assert.InDelta(t, 12, b.Fleet, 1e-9)
			assert.InDelta(t, 24, b.Slack, 1e-9)
			assert.InDelta(t, 32, b.PerProcess, 1e-9)
			assert.Equal(t, 7, b.Denied)
			assert.Equal(t, 9, b.RetryAdmits)
		})
	}
}

// TestThrottleProperty: during the incident the provider may receive at
// most K × what it accepted plus (K − 1) × the accepts the window carried
// in from before the incident, plus one request per window, plus 3
// standard deviations of the draws.
func TestThrottleProperty(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(100, 0)
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	p := DefaultPolicy()
	p.ThrottleK, p.FleetWindow = 2, 100*time.Millisecond
	sc := Scenario{Name: RuleThrottle, Rule: RuleThrottle, OutageFrom: time.Second, OutageTo: 2 * time.Second}
	history := func(requests int) []fakeprovider.Arrival {
		var arr []fakeprovider.Arrival
		// Before the incident: 10 accepted long before (left the window),
		// 14 in the last 2 windows (carried in).
		for i := range 10 {
			arr = append(arr, fakeprovider.Arrival{Key: worker.KeyPrimary, At: at(time.Duration(i) * 10 * time.Millisecond), Status: 200})
		}
		for i := range 14 {
			arr = append(arr, fakeprovider.Arrival{Key: worker.KeyPrimary, At: at(900*time.Millisecond + time.Duration(i)*5*time.Millisecond), Status: 200})
		}
		// The incident, 10 windows: 20 accepted, the rest failed. Expected
		// 2 × 20 + 5 + 10 = 64, spread 3 × √64 = 24: bound 88.
		for i := range requests {
			st := 500
			if i < 20 {
				st = 200
			}
			arr = append(arr, fakeprovider.Arrival{Key: worker.KeyPrimary, At: at(time.Second + time.Duration(i)*time.Millisecond), Status: st, Kind: fakeprovider.Capacity})
		}
		// After the heal, and another key: not counted.
		arr = append(arr, fakeprovider.Arrival{Key: worker.KeyPrimary, At: at(2 * time.Second), Status: 500},
			fakeprovider.Arrival{Key: worker.KeyFallback, At: at(1500 * time.Millisecond), Status: 500})
		return arr
	}
	tests := []struct {
		name     string
		strategy worker.Strategy
		requests int
		want     int
	}{
		{name: "within", strategy: worker.Cooldownd, requests: 88},
		{name: "over", strategy: worker.Cooldownd, requests: 93, want: 5},
		{name: "no coordination is judged by the same K", strategy: worker.NoCoordination, requests: 150, want: 62},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pol := p
			if tt.strategy == worker.NoCoordination {
				pol.ThrottleK = 0
			}
			r := &Result{Scenario: sc, Strategy: tt.strategy, T0: t0, Options: Options{P: 1, Policy: pol, Timing: DefaultTiming()},
				Arrivals: history(tt.requests), Workers: []*worker.Result{{Wire: worker.Wire{Denies: map[string]int{reasonThrottled: 3}}}}}
			assert.Equal(t, tt.want, ruleCount(Check(r), PropThrottle))
			f := r.Throttle()
			assert.Equal(t, tt.requests, f.Requests)
			assert.Equal(t, 20, f.Accepts)
			assert.Equal(t, 14, f.Carried)
			assert.InDelta(t, 10, f.Windows, 1e-9)
			assert.InDelta(t, 64, f.Expected(), 1e-9)
			assert.InDelta(t, 88, f.Bound(), 1e-9)
			assert.Equal(t, 3, f.Rejected)
		})
	}
}

// TestQuorumProperty: with the quorum on, a broken worker opens the
// connection for no one (no healthy call fails or is denied, no replica
// leaves closed, no open is published); its control, with the quorum off,
// must have opened it.
func TestQuorumProperty(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(100, 0)
	p := DefaultPolicy()
	p.TripQuorum = 2
	failures := make([]fakeprovider.Arrival, 5)
	for i := range failures {
		failures[i] = fakeprovider.Arrival{Key: worker.KeyPrimary, Worker: 0, Status: 500, Kind: fakeprovider.Error}
	}
	ok := worker.Call{OK: true, Attempts: 1, Key: worker.KeyPrimary}
	tests := []struct {
		name      string
		rule      string
		strategy  worker.Strategy
		arrivals  []fakeprovider.Arrival
		healthy   worker.Result
		notClosed int
		opens     int
		want      map[string]int
	}{
		{name: "held", rule: RuleQuorum, strategy: worker.Cooldownd, arrivals: failures, healthy: worker.Result{Calls: []worker.Call{ok, ok}}},
		{name: "a healthy call failed", rule: RuleQuorum, strategy: worker.Cooldownd, arrivals: failures,
			healthy: worker.Result{Calls: []worker.Call{ok, {Err: "denied:open"}, {Err: "cut", Cut: true}}}, want: map[string]int{PropQuorum: 1}},
		{name: "healthy workers denied, replicas open", rule: RuleQuorum, strategy: worker.Cooldownd, arrivals: failures,
			healthy: worker.Result{Calls: []worker.Call{ok}, Wire: worker.Wire{Denies: map[string]int{"DENY_REASON_OPEN": 4}}}, notClosed: 3, opens: 1,
			want: map[string]int{PropQuorum: 8}},
		{name: "without cooldownd only the calls are judged", rule: RuleQuorum, strategy: worker.Local, arrivals: failures,
			healthy: worker.Result{Calls: []worker.Call{ok}}, notClosed: 3},
		{name: "the broken worker did not fail enough", rule: RuleQuorum, strategy: worker.Cooldownd, arrivals: failures[:2],
			healthy: worker.Result{Calls: []worker.Call{ok}}, want: map[string]int{PropHarness: 1}},
		{name: "the control opened", rule: RuleQuorumOff, strategy: worker.Cooldownd, arrivals: failures,
			healthy: worker.Result{Calls: []worker.Call{{Err: "denied:open"}}}, notClosed: 2},
		{name: "the control never opened", rule: RuleQuorumOff, strategy: worker.Cooldownd, arrivals: failures,
			healthy: worker.Result{Calls: []worker.Call{ok}}, want: map[string]int{PropControl: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &Result{Scenario: Scenario{Name: tt.rule, Rule: tt.rule, Broken: []int{0}}, Strategy: tt.strategy, T0: t0,
				Options: Options{P: 2, Policy: p, Timing: DefaultTiming()}, Arrivals: tt.arrivals, Polls: 1,
				Workers: []*worker.Result{{Calls: []worker.Call{{Err: "failed:transient_failure"}}, Wire: worker.Wire{Denies: map[string]int{"DENY_REASON_OPEN": 9}}}, &tt.healthy},
				Seen:    map[string]*Seen{worker.KeyPrimary: {NotClosed: tt.notClosed}},
				Final:   map[string]*Final{worker.KeyPrimary: {Opens: tt.opens}}}
			vs := Check(r)
			for _, prop := range []string{PropQuorum, PropControl, PropHarness} {
				assert.Equal(t, tt.want[prop], ruleCount(vs, prop), "%s: %v", prop, vs)
			}
		})
	}
}

// TestShadowProperty: a shadow policy denies nothing (on the wire or in a
// user call), yet every replica is seen open, the connection is marked
// shadow and every published transition is marked shadow. The open-silent
// property does not apply: the open state is not enforced.
func TestShadowProperty(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(100, 0)
	p := DefaultPolicy()
	p.Shadow = true
	open := []Interval{{From: t0.Add(time.Second), To: t0.Add(2 * time.Second)}}
	sent := []fakeprovider.Arrival{{Key: worker.KeyPrimary, SentAt: t0.Add(1500 * time.Millisecond).UnixNano(), Status: 500, Kind: fakeprovider.Error}}
	published := Final{Transitions: 4, ShadowTransitions: 4, Opens: 2}
	tests := []struct {
		name  string
		wire  worker.Wire
		calls []worker.Call
		open  []Interval
		seen  Seen
		final Final
		want  int
	}{
		{name: "shadowed", wire: worker.Wire{Shadowed: map[string]int{"DENY_REASON_OPEN": 30}}, calls: []worker.Call{{Err: "failed:transient_failure"}},
			open: open, seen: Seen{Shadow: 5}, final: published},
		{name: "denied on the wire", wire: worker.Wire{Denies: map[string]int{"DENY_REASON_OPEN": 3}}, open: open, seen: Seen{Shadow: 5}, final: published, want: 3},
		{name: "a call denied", calls: []worker.Call{{Err: "denied:open"}}, open: open, seen: Seen{Shadow: 5}, final: published, want: 1},
		{name: "never seen open", seen: Seen{Shadow: 5}, final: published, want: 1},
		{name: "not marked shadow", open: open, final: published, want: 1},
		{name: "transitions not marked", open: open, seen: Seen{Shadow: 5}, final: Final{Transitions: 4, ShadowTransitions: 1, Opens: 2}, want: 3},
		{name: "no open published", open: open, seen: Seen{Shadow: 5}, final: Final{}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &Result{Scenario: Scenario{Name: RuleShadow, Rule: RuleShadow}, Strategy: worker.Cooldownd, T0: t0,
				Options: Options{P: 1, Policy: p, Timing: DefaultTiming()}, Arrivals: sent, Polls: 1,
				Open:    map[string][]Interval{worker.KeyPrimary: tt.open},
				Workers: []*worker.Result{{Calls: tt.calls, Wire: tt.wire}},
				Seen:    map[string]*Seen{worker.KeyPrimary: &tt.seen}, Final: map[string]*Final{worker.KeyPrimary: &tt.final}}
			vs := Check(r)
			assert.Equal(t, tt.want, ruleCount(vs, PropShadow), "%v", vs)
			assert.Zero(t, ruleCount(vs, PropOpen), "a shadow policy's open state is not enforced")
		})
	}
}

// TestScenarioPolicies: every scenario's policy is valid and reaches the
// replicas' flags; the fleet rules' scenarios set their rule.
func TestScenarioPolicies(t *testing.T) {
	t.Parallel()
	base := DefaultPolicy()
	flagOf := func(flags []string, name string) string {
		for _, f := range flags {
			if v, ok := strings.CutPrefix(f, "--"+name+"="); ok {
				return v
			}
		}
		return ""
	}
	want := map[string]map[string]string{
		RuleRetryBudget: {"retry-budget": "0.05", "retry-budget-min": "10", "consecutive-failures": "0", "failure-rate": "0", "fleet-window": "1s"},
		RuleThrottle:    {"throttle-k": "2", "retry-budget": "0", "consecutive-failures": "0", "fleet-window": "100ms"},
		RuleQuorum:      {"trip-quorum": "2", "failure-rate": "0.03", "fleet-window": "1s"},
		RuleQuorumOff:   {"trip-quorum": "0", "failure-rate": "0.03"},
		RuleShadow:      {"shadow": "true", "consecutive-failures": "3"},
		"hard-outage":   {"shadow": "false", "trip-quorum": "0", "throttle-k": "0", "consecutive-failures": "3"},
	}
	seen := 0
	for _, sc := range Scenarios(ShortTiming()) {
		p := sc.PolicyFor(base)
		require.NoError(t, p.Validate(), sc.Name)
		flags := ServerFlags(p)
		for name, v := range want[sc.Name] {
			assert.Equal(t, v, flagOf(flags, name), "%s --%s", sc.Name, name)
		}
		if _, ok := want[sc.Name]; ok {
			seen++
		}
	}
	assert.Equal(t, len(want), seen)
	assert.Equal(t, DefaultPolicy(), base, "PolicyFor edits a copy")
}
