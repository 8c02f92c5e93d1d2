package harness

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/cooldownd/cooldownd/test/storm/fakeprovider"
	"github.com/cooldownd/cooldownd/test/storm/worker"
)

// Grace windows and bounds of the property checks (docs/storm.md).
const (
	// AdmitGrace: a request sent less than this after a connection opened,
	// or after the provider answered a 429, may have been admitted before
	// cooldownd knew (the answer still had to reach its process and be
	// reported). It also covers the gap between a probe's admission and its
	// send.
	AdmitGrace = 100 * time.Millisecond
	// EndGrace: clock reads and millisecond rounding at the end of an open
	// period or a Retry-After (every process shares the machine's clock;
	// cooldownd stores times in milliseconds).
	EndGrace = 5 * time.Millisecond
	// SettleGrace: scheduling slack on a loaded machine, added to the
	// recovery and lease-expiry bounds.
	SettleGrace = 250 * time.Millisecond
	// probePoll and its jitter mirror the client's wait when a probe is in
	// flight: at most min(lease left, 1 s), plus up to 10 % + 10 ms.
	probePoll = time.Second
)

// Violation is one broken property.
type Violation struct {
	Property string
	Count    int // how many requests or processes broke it
	Detail   string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s (%d): %s", v.Property, v.Count, v.Detail)
}

// Properties.
const (
	PropMaxProbes  = "max-probes"  // at most max_probes probe requests in flight at any instant
	PropOpen       = "open-silent" // no request sent while every replica says open, beyond the admit grace
	PropRetryAfter = "retry-after" // no request sent before a Retry-After expires, beyond the admit grace
	PropRecovery   = "recovery"    // every process sends successfully again within the recovery bound of the heal
	PropFallback   = "fallback"    // no user call fails; the exhausted key is not rediscovered; switching adds no wait
	PropLease      = "lease"       // a killed probe holder's lease expires, then another process probes
	PropHarness    = "harness"     // the run itself went wrong
)

// RecoveryBound is how long after the heal every process must be sending
// successfully again: a probe in flight at the heal may still run to its
// timeout (one probe round trip), then the open period may run to its
// longest (open_max with jitter), then callers denied while the probe ran
// ask again within min(lease TTL, 1 s) plus jitter; plus SettleGrace.
func RecoveryBound(o Options) time.Duration {
	p := o.Policy
	open := time.Duration(float64(p.OpenMax) * (1 + p.Jitter))
	return o.Timing.AttemptTimeout + open + pollWait(o) + SettleGrace
}

// pollWait is the longest a caller denied because a probe is in flight
// waits before asking again.
func pollWait(o Options) time.Duration {
	d := min(o.Policy.LeaseTTL, probePoll)
	return d + d/10 + 10*time.Millisecond
}

// Check returns the properties r breaks. Every property that applies to
// the strategy is checked: with no coordination there are no probes and no
// cooldownd state, so max-probes, open-silent and lease do not apply; a
// shadow policy enforces no open state, so open-silent does not either.
// A fleet rule's scenario adds the rule's property (see checkRule).
func Check(r *Result) []Violation {
	var out []Violation
	add := func(prop string, n int, format string, args ...any) {
		if n > 0 {
			out = append(out, Violation{Property: prop, Count: n, Detail: fmt.Sprintf(format, args...)})
		}
	}
	for _, e := range r.Errors {
		add(PropHarness, 1, "%s", e)
	}
	sc, o := r.Scenario, r.Options
	if r.Strategy != worker.NoCoordination {
		for _, key := range []string{worker.KeyPrimary, worker.KeyFallback} {
			peak, at := PeakProbes(r.Arrivals, key)
			if peak > o.Policy.MaxProbes {
				add(PropMaxProbes, peak, "%d %s probes in flight at +%s (max_probes %d)", peak, key, r.since(at), o.Policy.MaxProbes)
			}
		}
	}
	// A shadow policy's open state is published, not enforced: calls go on.
	if r.Strategy == worker.Cooldownd && !o.Policy.Shadow {
		for _, key := range []string{worker.KeyPrimary, worker.KeyFallback} {
			bad := SentWhileOpen(r.Arrivals, key, r.Open[key])
			if len(bad) > 0 {
				a := bad[0]
				add(PropOpen, len(bad), "%d %s requests sent while every replica said open, e.g. worker %d at +%s (local=%v)",
					len(bad), key, a.Worker, r.since(a.SentAt), a.Local)
			}
		}
	}
	if r.Strategy == worker.Cooldownd && r.Polls == 0 {
		add(PropHarness, 1, "no poll round where every replica answered")
	}
	bad, first := SentBeforeRetryAfter(r.Arrivals)
	if len(bad) > 0 {
		add(PropRetryAfter, len(bad), "%d requests sent before a Retry-After expired, e.g. worker %d at +%s, %s after a 429 asking for %s",
			len(bad), bad[0].Worker, r.since(bad[0].SentAt), time.Duration(bad[0].SentAt-first.End), first.RetryAfter)
	}
	if sc.Heals {
		rec := r.Recovery()
		bound := RecoveryBound(o) + r.cooldownAfterHeal()
		var late []string
		for _, w := range rec.Workers {
			if !w.Recovered || w.After > bound {
				late = append(late, w.String())
			}
		}
		add(PropRecovery, len(late), "processes not sending successfully within %s of the heal: %v", bound, late)
	}
	if sc.Fallback {
		m := r.Metrics()
		add(PropFallback, m.Failed, "%d of %d user calls failed (a deadline was missed)", m.Failed, m.Calls)
		if q, ok := r.quotaSeen(); ok {
			n := 0
			for _, a := range r.Arrivals {
				if a.Key == worker.KeyPrimary && a.SentAt > q+int64(AdmitGrace) {
					n++
				}
			}
			add(PropFallback, n, "%d requests rediscovered the exhausted primary more than %s after the first quota answer", n, AdmitGrace)
			// Nobody waits to switch: every call that started after the
			// switch was answered by the fallback at its first request. The
			// latency this adds (one Admit naming both keys) is a figure
			// (Metrics.P99Added), not a property: it measures the machine.
			slow, first := 0, worker.Call{}
			for _, w := range r.Workers {
				if w == nil {
					continue
				}
				for _, c := range w.Calls {
					if c.OK && c.Start > q+int64(AdmitGrace) && (c.Attempts != 1 || c.Key != worker.KeyFallback) {
						if slow == 0 {
							first = c
						}
						slow++
					}
				}
			}
			add(PropFallback, slow, "%d calls after the switch did not go straight to the fallback, e.g. one at +%s with %d requests answered by %q",
				slow, r.since(first.Start), first.Attempts, first.Key)
		} else {
			add(PropFallback, 1, "the provider never answered the primary with a quota error")
		}
	}
	if sc.Kill && r.Strategy == worker.Cooldownd {
		out = append(out, r.checkLease()...)
	}
	return append(out, r.checkRule()...)
}

// checkLease checks that after the probe holder was killed the next probe
// came only once its lease had expired, and soon after.
func (r *Result) checkLease() []Violation {
	if r.Kill == nil || r.Kill.Seq < 0 || r.Kill.Seq >= len(r.Arrivals) {
		return []Violation{{Property: PropLease, Count: 1, Detail: "no probe holder was seen to kill"}}
	}
	killed := r.Arrivals[r.Kill.Seq]
	ttl := r.Options.Policy.LeaseTTL
	var next *fakeprovider.Arrival
	for i := killed.Seq + 1; i < len(r.Arrivals); i++ {
		if a := r.Arrivals[i]; a.Key == worker.KeyPrimary && a.Probe {
			next = &r.Arrivals[i]
			break
		}
	}
	earliest := killed.SentAt + int64(ttl-AdmitGrace)
	latest := killed.SentAt + int64(ttl+pollWait(r.Options)+SettleGrace)
	switch {
	case next == nil:
		return []Violation{{Property: PropLease, Count: 1, Detail: "no process probed after the probe holder was killed"}}
	case next.Worker == killed.Worker:
		return []Violation{{Property: PropLease, Count: 1, Detail: "the killed process probed again"}}
	case next.SentAt < earliest:
		return []Violation{{Property: PropLease, Count: 1, Detail: fmt.Sprintf("worker %d probed %s after the killed probe, before its %s lease expired",
			next.Worker, time.Duration(next.SentAt-killed.SentAt), ttl)}}
	case next.At > latest:
		return []Violation{{Property: PropLease, Count: 1, Detail: fmt.Sprintf("the next probe came %s after the killed one (bound %s)",
			time.Duration(next.At-killed.SentAt), time.Duration(latest-killed.SentAt))}}
	}
	return nil
}

// since formats a Unix-nanosecond time as an offset from the run's start.
func (r *Result) since(ns int64) time.Duration {
	return time.Duration(ns - r.T0.UnixNano()).Round(time.Millisecond)
}

// PeakProbes returns the most probe requests for key in flight at once at
// the provider, and when.
func PeakProbes(arr []fakeprovider.Arrival, key string) (peak int, at int64) {
	type ev struct {
		t int64
		d int
	}
	var evs []ev
	for _, a := range arr {
		if a.Key != key || !a.Probe {
			continue
		}
		end := a.End
		if end == 0 {
			end = 1<<63 - 1
		}
		evs = append(evs, ev{a.At, 1}, ev{end, -1})
	}
	slices.SortFunc(evs, func(x, y ev) int {
		if c := cmp.Compare(x.t, y.t); c != 0 {
			return c
		}
		return cmp.Compare(x.d, y.d) // an end before a start at the same instant
	})
	n := 0
	for _, e := range evs {
		n += e.d
		if n > peak {
			peak, at = n, e.t
		}
	}
	return peak, at
}

// SentWhileOpen returns the requests for key sent inside an open interval,
// more than AdmitGrace after it began and more than EndGrace before it
// ended.
func SentWhileOpen(arr []fakeprovider.Arrival, key string, open []Interval) []fakeprovider.Arrival {
	var bad []fakeprovider.Arrival
	for _, a := range arr {
		if a.Key != key || a.SentAt == 0 {
			continue
		}
		for _, iv := range open {
			if a.SentAt > iv.From.UnixNano()+int64(AdmitGrace) && a.SentAt < iv.To.UnixNano()-int64(EndGrace) {
				bad = append(bad, a)
				break
			}
		}
	}
	return bad
}

// SentBeforeRetryAfter returns the requests sent, for the same key, more
// than AdmitGrace after a 429 was answered and more than EndGrace before
// its Retry-After expired, and the first 429 one of them broke.
func SentBeforeRetryAfter(arr []fakeprovider.Arrival) (bad []fakeprovider.Arrival, first fakeprovider.Arrival) {
	bySent := slices.Clone(arr)
	slices.SortFunc(bySent, func(x, y fakeprovider.Arrival) int { return cmp.Compare(x.SentAt, y.SentAt) })
	seen := make(map[int]bool)
	for _, r := range arr {
		if r.Status != 429 || r.RetryAfter <= 0 || r.End == 0 {
			continue
		}
		from, to := r.End+int64(AdmitGrace), r.End+int64(r.RetryAfter-EndGrace)
		i, _ := slices.BinarySearchFunc(bySent, from, func(a fakeprovider.Arrival, t int64) int { return cmp.Compare(a.SentAt, t+1) })
		for ; i < len(bySent) && bySent[i].SentAt < to; i++ {
			a := bySent[i]
			if a.Key != r.Key || seen[a.Seq] {
				continue
			}
			if len(bad) == 0 {
				first = r
			}
			seen[a.Seq] = true
			bad = append(bad, a)
		}
	}
	return bad, first
}

// cooldownAfterHeal is how far past the heal a Retry-After answered
// before it reaches: the provider asked every caller to wait that long.
func (r *Result) cooldownAfterHeal() time.Duration {
	heal := r.T0.Add(r.Scenario.OutageTo).UnixNano()
	var d time.Duration
	for _, a := range r.Arrivals {
		if a.Key == worker.KeyPrimary && a.Status == 429 && a.RetryAfter > 0 {
			d = max(d, time.Duration(a.End+int64(a.RetryAfter)-heal))
		}
	}
	return d
}

// quotaSeen returns when the provider first finished answering the
// primary with a quota error.
func (r *Result) quotaSeen() (int64, bool) {
	var q int64
	for _, a := range r.Arrivals {
		if a.Key == worker.KeyPrimary && a.Kind == fakeprovider.Quota && a.End > 0 && (q == 0 || a.End < q) {
			q = a.End
		}
	}
	return q, q != 0
}
