package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/cooldownd/cooldownd/test/chaos/history"
)

// spell is one time a client process was degraded (deciding in-process
// because cooldownd did not answer); up is zero while it lasts.
type spell struct{ down, up time.Time }

// failoverWindow is how long after a SENTINEL FAILOVER its effects are
// counted: well past Sentinel's failover-timeout (5 s) and the client's
// service retry.
const failoverWindow = 15 * time.Second

// offService is what one failover cost the clients, from the moment
// SENTINEL FAILOVER was sent.
type offService struct {
	at time.Time
	// degraded is the longest any client process was degraded (the sum
	// of its spells within the window): its calls were decided in-process.
	degraded time.Duration
	// refused is how long the service refused most calls: the total of
	// the 100 ms slices of the window in which most RPCs called failed for
	// want of the service (an error or no answer; see outage), between
	// first and last; failed counts those RPCs in the whole window (on 2
	// loaded cores a few are lost at any time).
	refused, first, last time.Duration
	failed               int
}

func (o offService) String() string {
	s := fmt.Sprintf("off the service %v (the longest a client process was degraded); most RPCs failed for %v",
		o.degraded.Round(time.Millisecond), o.refused)
	if o.refused > 0 {
		s += fmt.Sprintf(" (from +%v to +%v after SENTINEL FAILOVER)", o.first, o.last)
	}
	return s + fmt.Sprintf("; %d RPCs failed within %v", o.failed, failoverWindow)
}

// failoverCosts measures each failover from the workers' degraded spells
// and the recorded RPCs.
func (c *cluster) failoverCosts(ops []history.Op) []offService {
	c.mu.Lock()
	ats := slices.Clone(c.failover)
	c.mu.Unlock()
	out := make([]offService, 0, len(ats))
	for _, at := range ats {
		end := at.Add(failoverWindow)
		o := offService{at: at}
		for _, w := range c.workers {
			w.mu.Lock()
			var sum time.Duration
			for _, s := range w.spells {
				up := s.up
				if up.IsZero() {
					up = end
				}
				from, to := maxTime(s.down, at), minTime(up, end)
				if to.After(from) {
					sum += to.Sub(from)
				}
			}
			w.mu.Unlock()
			o.degraded = max(o.degraded, sum)
		}
		const slice = 100 * time.Millisecond
		t0, t1 := at.UnixMilli(), end.UnixMilli()
		calls, failed := make([]int, failoverWindow/slice), make([]int, failoverWindow/slice)
		for _, op := range ops {
			if op.Call < t0 || op.Call >= t1 || !op.FirstOfRPC() {
				continue
			}
			i := (op.Call - t0) / slice.Milliseconds()
			calls[i]++
			if outage(op) {
				failed[i]++
				o.failed++
			}
		}
		seen := false
		for i := range calls {
			if calls[i] == 0 || 2*failed[i] <= calls[i] {
				continue
			}
			d := time.Duration(i) * slice
			if !seen {
				o.first, seen = d, true
			}
			o.last = d + slice
			o.refused += slice
		}
		out = append(out, o)
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// outage reports whether op failed for want of the service: no answer, or
// an error that is not an answer about the request itself.
func outage(op history.Op) bool {
	switch op.Code {
	case "lost", "unavailable", "deadline_exceeded", "internal", "unknown", "aborted":
		return true
	}
	return false
}
