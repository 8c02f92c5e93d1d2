package breaker_test

import (
	"fmt"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// Example walks one connection through a trip, the open period, a probe and
// the recovery. Times are Unix ms from the server's clock; the store
// serialises these calls in production.
func Example() {
	p := breaker.DefaultPolicy()
	p.Jitter = 0 // exact durations for the example
	var s breaker.State
	now := int64(1_800_000_000_000)

	show := func(evs []breaker.Event) {
		for _, e := range evs {
			fmt.Printf("  event rev %d: %s → %s (%s)\n", e.Revision, e.From, e.To, e.Cause)
		}
	}
	reasons := map[breaker.DenyReason]string{breaker.ReasonOpen: "OPEN", breaker.ReasonProbeInFlight: "PROBE_IN_FLIGHT"}
	admit := func(who string) breaker.Verdict {
		v, evs := s.Admit(p, now, breaker.Attempt{Nonce: who})
		show(evs)
		switch v.Decision {
		case breaker.Allow:
			fmt.Printf("%s: allow at rev %d\n", who, v.Revision)
		case breaker.AllowProbe:
			fmt.Printf("%s: probe, lease %s\n", who, v.Lease.Token)
		case breaker.Deny:
			fmt.Printf("%s: deny %s, retry after %d ms\n", who, reasons[v.Reason], v.RetryAfter)
		}
		return v
	}

	// Five transient failures in a row trip the breaker for 10 s.
	for range p.ConsecutiveFailures {
		v, _ := s.Admit(p, now, breaker.Attempt{})
		_, evs := s.Report(p, now, breaker.Report{Revision: v.Revision, Outcome: breaker.OutcomeTransientFailure, HTTPStatus: 503}, 0)
		show(evs)
		now += 100
	}
	admit("worker-1")

	// When the open period ends, the first caller probes; the others wait.
	now += 10_000
	probe := admit("worker-2")
	admit("worker-3")

	// The probe succeeds: the connection closes for everyone.
	res, evs := s.Report(p, now+250, breaker.Report{Revision: probe.Revision, LeaseToken: probe.Lease.Token, Outcome: breaker.OutcomeSuccess, HTTPStatus: 200}, 0)
	show(evs)
	fmt.Println("probe report accepted:", res.Accepted)
	now += 300
	admit("worker-3")

	// The first transition's revision is its time; later ones add one.
	//
	// Output:
	//   event rev 1800000000400: closed → open (breaker)
	// worker-1: deny OPEN, retry after 9900 ms
	//   event rev 1800000000401: open → half_open (open_expired)
	// worker-2: probe, lease 1800000000401.0.1800000010500.worker-2
	// worker-3: deny PROBE_IN_FLIGHT, retry after 30000 ms
	//   event rev 1800000000402: half_open → closed (probe_success)
	// probe report accepted: true
	// worker-3: allow at rev 1800000000402
}
