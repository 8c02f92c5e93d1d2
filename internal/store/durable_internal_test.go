package store

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// TestMayOpenCoversTheModel: every report that opens a connection in the
// model is one mayOpen says may, so a durable report never skips its WAIT.
func TestMayOpenCoversTheModel(t *testing.T) {
	t.Parallel()
	p := breaker.DefaultPolicy()
	p.ConsecutiveFailures, p.MinCalls, p.OpenBase, p.OpenMax = 2, 2, time.Second, 4*time.Second
	rng := rand.New(rand.NewPCG(1, 2))
	for seq := range 500 {
		var s breaker.State
		now := int64(1_000_000)
		for step := range 40 {
			now += rng.Int64N(1500)
			if rng.IntN(6) == 0 {
				if v, _ := s.Admit(p, now, breaker.Attempt{Nonce: "n"}); v.Decision == breaker.AllowProbe {
					continue
				}
			}
			r := breaker.Report{Revision: s.Revision, Outcome: breaker.Outcome(1 + rng.IntN(8))}
			if rng.IntN(4) == 0 {
				r.RetryAfter = rng.Int64N(3000)
			}
			before := s
			before.Leases = append([]breaker.Lease(nil), s.Leases...)
			settled := before
			settleEvs := settled.Settle(now)
			_, evs := s.Report(p, now, r, 0)
			if opens(evs[len(settleEvs):]) && !mayOpen(r) {
				t.Fatalf("sequence %d step %d: %+v opened the connection but mayOpen says no", seq, step, r)
			}
		}
	}
}
