package harness

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

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
