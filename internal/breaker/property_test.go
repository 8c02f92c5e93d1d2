package breaker

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// randomPolicy is a valid sub-second policy with random knobs, so that
// sequences reach trips, probes, recoveries and disabled rules.
func randomPolicy(rng *rand.Rand) Policy {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	p := Policy{
		ConsecutiveFailures: []int{0, 1, 3, 5}[rng.IntN(4)],
		FailureRate:         []float64{0, 0.5, 1}[rng.IntN(3)],
		MinCalls:            1 + rng.IntN(6),
		Window:              ms([]int{100, 1000}[rng.IntN(2)]),
		OpenBase:            ms(50 + rng.IntN(100)),
		Jitter:              []float64{0, 0.3, 0.9}[rng.IntN(3)],
		RateLimitCooldown:   ms([]int{0, 50}[rng.IntN(2)]),
		OverloadFloor:       ms([]int{0, 200}[rng.IntN(2)]),
		QuotaBlock:          ms([]int{0, 1500}[rng.IntN(2)]),
		AuthBlock:           ms([]int{0, 1000}[rng.IntN(2)]),
		MaxProbes:           1 + rng.IntN(4),
		LeaseTTL:            ms(100 + rng.IntN(300)),
	}
	p.OpenMax = p.OpenBase * time.Duration(1+rng.IntN(16))
	return p
}

// randomOutcome favours the outcomes that drive the breaker itself.
func randomOutcome(rng *rand.Rand) Outcome {
	switch n := rng.IntN(100); {
	case n < 35:
		return OutcomeSuccess
	case n < 70:
		return OutcomeTransientFailure
	case n < 77:
		return OutcomeClientError
	case n < 84:
		return OutcomeCanceled
	case n < 89:
		return OutcomeRateLimited
	case n < 93:
		return OutcomeOverloaded
	case n < 95:
		return OutcomeQuotaExhausted
	}
	return OutcomeAuthFailure
}

// TestInvariants runs thousands of random operation sequences, each over
// one State, and checks the machine's invariants after every step.
func TestInvariants(t *testing.T) {
	t.Parallel()
	const (
		seeds     = 8
		sequences = 500 // per seed
		steps     = 120
	)
	for seed := range uint64(seeds) {
		t.Run("seed "+strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			for seq := range sequences {
				runSequence(t, rng, fmt.Sprintf("seed %d seq %d", seed, seq), steps)
			}
		})
	}
}

// violations collects broken invariants; formatting happens only on a
// failure, so checking every step stays cheap.
type violations []string

func (v *violations) check(ok bool, format string, args ...any) {
	if !ok {
		*v = append(*v, fmt.Sprintf(format, args...))
	}
}

func runSequence(t *testing.T, rng *rand.Rand, name string, steps int) {
	t.Helper()
	p := randomPolicy(rng)
	require.NoError(t, p.Validate(), name)
	var (
		s      State
		now    = t0 + rng.Int64N(1_000_000)
		tokens []string // every lease token granted, live or not
		last   = Event{To: Closed}
		trail  []op // the last ops, for failure messages
	)
	for k := range steps {
		before := clone(s)
		if len(s.Leases) > 0 {
			// A reader settles a shallow copy: the original must not change.
			read := s
			read.Settle(now + rng.Int64N(p.LeaseTTL.Milliseconds()))
			if !reflect.DeepEqual(before, s) {
				require.Equal(t, before, s, "%s step %d: settling a copy changed the original", name, k)
			}
		}
		// pre is the state as time alone leaves it at now: what the op sees.
		pre := clone(s)
		settled := len(pre.Settle(now))

		var o op
		switch x := rng.IntN(100); {
		case x < 12:
			now += []int64{0, 1, 7, 49, 120, 333, 1200, 5000}[rng.IntN(8)]
			continue
		case x < 40:
			o = admitOp("n" + strconv.Itoa(k))
		case x < 80:
			r := Report{Outcome: randomOutcome(rng), HTTPStatus: 200 + rng.IntN(400)}
			switch rng.IntN(8) {
			case 0:
				r.Revision = uint64(rng.IntN(int(s.Revision) + 1)) // stale or current
			case 1:
				r.Revision = s.Revision + 1 // from the future
			default:
				r.Revision = s.Revision
			}
			if len(tokens) > 0 && rng.IntN(2) == 0 {
				r.LeaseToken = tokens[len(tokens)-1-rng.IntN(min(len(tokens), 4))]
			} else if rng.IntN(10) == 0 {
				r.LeaseToken = "0.0.0.bogus"
			}
			if rng.IntN(6) == 0 {
				r.RetryAfter = []int64{-1, 1, 40, 250, 5000}[rng.IntN(5)]
			}
			o = reportJ(r, rng.Float64())
		case x < 86:
			tok := "0.0.0.bogus"
			if len(tokens) > 0 {
				tok = tokens[len(tokens)-1-rng.IntN(min(len(tokens), 3))]
			}
			o = extendOp(tok, int64(50+rng.IntN(400)))
		case x < 90:
			var until int64
			if rng.IntN(2) == 0 {
				until = now + int64(1+rng.IntN(1000))
			}
			o = forceOp(Override(rng.IntN(3)), until, "alice", "test")
		case x < 92:
			o = resetOp("bob", "test")
		default:
			o = settleOp()
		}
		res := o.apply(t, &s, p, now)
		trail = append(trail, o)
		if len(trail) > 10 {
			trail = trail[1:]
		}
		if o.kind == "admit" && res.verdict.Lease != nil {
			tokens = append(tokens, res.verdict.Lease.Token)
		}

		var v violations
		// Events chain: each starts where the previous one ended, with the
		// next revision (the first one's is its time), at now or, for a
		// timed transition, at the instant it became due; the op settles
		// first.
		for _, e := range res.events {
			v.check(e.From == last.To, "event %+v does not start where %+v ended", e, last)
			if last.Revision == 0 {
				v.check(e.Revision == uint64(e.At), "first event %+v does not take its time as revision", e)
			} else {
				v.check(e.Revision == last.Revision+1, "event %+v does not follow revision %d", e, last.Revision)
			}
			if e.Cause == CauseOpenExpired || e.Cause == CauseForceExpired {
				v.check(e.At <= now && e.At >= last.At, "timed event %+v not between %d and now", e, last.At)
			} else {
				v.check(e.At == now, "event %+v not at now", e)
			}
			last = e
		}
		// The revision never decreases and is the last event's.
		v.check(s.Revision >= before.Revision, "revision %d after %d", s.Revision, before.Revision)
		if len(res.events) > 0 {
			v.check(s.Revision == res.events[len(res.events)-1].Revision, "revision %d, last event %+v", s.Revision, res.events[len(res.events)-1])
		}
		v.check(len(res.events) >= settled, "the op yields %d events, settling alone %d", len(res.events), settled)

		checkState(&v, p, now, s)

		// An open's end never moves earlier through reports (hints merge by
		// max) and never moves at all through Admit, ExtendLease or Settle.
		if pre.phase() == Open && s.phase() == Open {
			switch o.kind {
			case "report":
				v.check(s.OpenUntil >= pre.OpenUntil, "open shortened from %d to %d", pre.OpenUntil, s.OpenUntil)
			case "admit", "extend", "settle":
				v.check(s.OpenUntil == pre.OpenUntil, "open moved from %d to %d", pre.OpenUntil, s.OpenUntil)
			}
		}

		switch o.kind {
		case "admit":
			checkVerdict(&v, now, s, res.verdict)
		case "report":
			own := res.events[min(settled, len(res.events)):]
			if !res.report.Accepted {
				// A stale report only ever applies a server hint.
				for _, e := range own {
					v.check(slices.Contains([]Cause{CauseRateLimit, CauseOverload, CauseQuota, CauseAuth}, e.Cause), "stale report caused %+v", e)
				}
			}
			if o.report.Outcome == OutcomeCanceled || pre.Override != NoOverride {
				v.check(len(own) == 0, "canceled or overridden report caused %+v", own)
			}
			v.check(res.report.Changed == (len(own) > 0), "Changed %v with own events %+v", res.report.Changed, own)
		case "extend":
			if res.err == nil {
				v.check(res.lease.Expires == now+o.ttl, "extended lease %+v", res.lease)
				v.check(slices.Contains(s.Leases, res.lease), "extended lease %+v not held", res.lease)
			}
		}
		if len(v) > 0 {
			require.Empty(t, v, "%s step %d (now %d)\nstate %+v\nevents %+v\nlast ops %+v", name, k, now, s, res.events, trail)
		}
	}
}

// checkState checks the invariants of a state settled at now.
func checkState(v *violations, p Policy, now int64, s State) {
	v.check(len(s.Leases) <= p.MaxProbes, "%d leases, max %d", len(s.Leases), p.MaxProbes)
	if len(s.Leases) > 0 {
		v.check(s.Phase == HalfOpen, "leases in phase %s", s.Phase)
		v.check(s.Override == NoOverride, "leases under override %d", s.Override)
	}
	for i, l := range s.Leases {
		v.check(l.Expires > now, "lapsed lease %+v survived settling", l)
		v.check(l.Slot >= 0 && l.Slot < p.MaxProbes, "lease slot %d", l.Slot)
		for _, m := range s.Leases[:i] {
			v.check(m.Slot != l.Slot, "two leases in slot %d", l.Slot)
		}
	}
	if s.phase() == Open {
		if s.Override != ForcedOpen || s.OverrideUntil != 0 {
			v.check(s.OpenUntil > 0, "open without an end")
			v.check(s.OpenUntil > now, "open past its end %d after settling", s.OpenUntil)
		}
	} else {
		v.check(s.OpenUntil == 0, "OpenUntil %d in phase %s", s.OpenUntil, s.phase())
	}
	switch s.Override {
	case ForcedOpen:
		v.check(s.Phase == Open, "forced open in phase %s", s.Phase)
	case ForcedClosed:
		v.check(s.Phase == Closed, "forced closed in phase %s", s.Phase)
	case NoOverride:
		v.check(s.OverrideUntil == 0, "OverrideUntil %d without an override", s.OverrideUntil)
	}
	v.check(s.Reopens >= 0 && s.Reopens <= MaxReopens, "reopens %d", s.Reopens)
	v.check(s.Consecutive >= 0 && s.Consecutive <= MaxCount, "consecutive %d", s.Consecutive)
}

// checkVerdict checks that Admit's answer agrees with the state it left.
func checkVerdict(v *violations, now int64, s State, d Verdict) {
	v.check(d.Revision == s.Revision, "verdict revision %d, state %d", d.Revision, s.Revision)
	v.check(d.Phase == s.phase(), "verdict phase %s, state %s", d.Phase, s.phase())
	switch d.Decision {
	case Allow:
		v.check(s.phase() == Closed, "allow in phase %s", s.phase())
		v.check(d.Lease == nil, "allow with a lease")
	case AllowProbe:
		v.check(s.Phase == HalfOpen, "probe in phase %s", s.Phase)
		v.check(d.Lease != nil && d.Lease.Granted == now && slices.Contains(s.Leases, *d.Lease), "probe lease %+v not held", d.Lease)
	case Deny:
		v.check(d.Reason != ReasonNone, "deny without a reason")
		v.check(d.RetryAfter > 0, "deny without a wait: %+v", d)
		v.check(d.Lease == nil, "deny with a lease")
	default:
		v.check(false, "unknown decision %d", d.Decision)
	}
}
