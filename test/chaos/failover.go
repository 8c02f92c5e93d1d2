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
	// failing is from the first to the last RPC that got an error or no
	// answer within the window (0: none did), and failed how many did.
	first, last time.Duration
	failed      int
}

func (o offService) String() string {
	s := fmt.Sprintf("off the service %v (the longest a client process was degraded)", o.degraded.Round(time.Millisecond))
	if o.failed == 0 {
		return s + "; no RPC failed"
	}
	return s + fmt.Sprintf("; %d RPCs failed, from +%v to +%v after SENTINEL FAILOVER (%v)", o.failed,
		o.first.Round(time.Millisecond), o.last.Round(time.Millisecond), (o.last-o.first).Round(time.Millisecond))
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
		t0, t1 := at.UnixMilli(), end.UnixMilli()
		for _, op := range ops {
			if !outage(op) || op.Call < t0 || op.Call >= t1 {
				continue
			}
			d := time.Duration(op.Call-t0) * time.Millisecond
			if o.failed == 0 || d < o.first {
				o.first = d
			}
			o.last = max(o.last, d)
			o.failed++
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
