// Command breakertrace writes random operation sequences applied to the Go
// breaker model (internal/breaker) as JSON: each step's operation, its
// answer, its events and the whole state after it. The TypeScript client's
// test (clients/ts/test/breaker.test.ts) replays the operations through its
// port of the model and fails on the first step that differs, so the port
// cannot drift from the model the server and the Go client run.
//
//	go run ./clients/ts/tools/breakertrace -sequences 400 -steps 150 -seed 1
//
// With -policies n it writes n random policies instead, each with the
// policy-file key of the knob Policy.Validate refuses ("" when valid), so
// that the port's validatePolicy is held to the same bounds.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/tools/knobdoc/tsknob"
)

func main() {
	var (
		seed      = flag.Uint64("seed", 1, "random seed")
		sequences = flag.Int("sequences", 400, "operation sequences")
		steps     = flag.Int("steps", 150, "operations per sequence")
		policies  = flag.Int("policies", 0, "write this many random policies and Validate's verdict instead of sequences")
	)
	flag.Parse()
	rng := rand.New(rand.NewPCG(*seed, 0x7e57))
	w := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(w)
	for range *sequences {
		if *policies > 0 {
			break
		}
		if err := enc.Encode(sequence(rng, *steps)); err != nil {
			fmt.Fprintln(os.Stderr, "breakertrace:", err)
			os.Exit(1)
		}
	}
	for range *policies {
		if err := enc.Encode(validation(rng)); err != nil {
			fmt.Fprintln(os.Stderr, "breakertrace:", err)
			os.Exit(1)
		}
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "breakertrace:", err)
		os.Exit(1)
	}
}

// policy is a breaker.Policy as the TypeScript Policy holds it, by its
// generated field names (tools/knobdoc/tsknob; clients/ts/src/knobs.gen.ts):
// spans in milliseconds, whole in sequences, fractional only in validation
// cases.
type policy = map[string]any

func toPolicy(p breaker.Policy) policy { return tsknob.Policy(p) }

type report struct {
	Revision   uint64 `json:"revision"`
	LeaseToken string `json:"leaseToken"`
	Outcome    int    `json:"outcome"`
	RetryAfter int64  `json:"retryAfter"`
	HTTPStatus int    `json:"httpStatus"`
	ErrorCode  string `json:"errorCode"`
	Count      int64  `json:"count"`
	Retry      bool   `json:"retry"`
	Reporter   string `json:"reporter"`
}

// op is one operation: admit, report, extend, force, reset or settle.
type op struct {
	Kind     string  `json:"kind"`
	Nonce    string  `json:"nonce,omitempty"`
	Retry    bool    `json:"retry,omitempty"`
	Draw     float64 `json:"draw"`
	Report   *report `json:"report,omitempty"`
	Jitter   float64 `json:"jitter"`
	Token    string  `json:"token,omitempty"`
	TTL      int64   `json:"ttl,omitempty"`
	Override int     `json:"override"`
	Until    int64   `json:"until"`
	Actor    string  `json:"actor,omitempty"`
	Reason   string  `json:"reason,omitempty"`
}

type lease struct {
	Slot    int    `json:"slot"`
	Token   string `json:"token"`
	Granted int64  `json:"granted"`
	Expires int64  `json:"expires"`
}

type event struct {
	At       int64  `json:"at"`
	From     int    `json:"from"`
	To       int    `json:"to"`
	Cause    int    `json:"cause"`
	Revision uint64 `json:"revision"`
	Actor    string `json:"actor"`
	Reason   string `json:"reason"`
}

type verdict struct {
	Decision   int    `json:"decision"`
	Reason     int    `json:"reason"`
	RetryAfter int64  `json:"retryAfter"`
	Revision   uint64 `json:"revision"`
	Phase      int    `json:"phase"`
	Lease      *lease `json:"lease,omitempty"`
	// Shadowed and ShadowRetryAfter: what a shadow policy would have denied.
	Shadowed         int   `json:"shadowed"`
	ShadowRetryAfter int64 `json:"shadowRetryAfter"`
}

// counts is breaker.FleetCounts: the floats the port must compute alike.
type counts struct {
	FirstAttempts       float64 `json:"firstAttempts"`
	Retries             float64 `json:"retries"`
	Requests            float64 `json:"requests"`
	Accepts             float64 `json:"accepts"`
	ThrottleProbability float64 `json:"throttleProbability"`
	FailureReporters    int     `json:"failureReporters"`
}

type step struct {
	Now      int64    `json:"now"`
	Op       op       `json:"op"`
	Verdict  *verdict `json:"verdict,omitempty"`
	Accepted *bool    `json:"accepted,omitempty"`
	Changed  *bool    `json:"changed,omitempty"`
	Lease    *lease   `json:"lease,omitempty"`
	Err      string   `json:"err,omitempty"`
	Events   []event  `json:"events"`
	// State is the whole breaker.State by the port's field names
	// (tsknob.JSON), its zero phase written as 0.
	State any `json:"state"`
	// Counts is State.FleetCounts at now after the step.
	Counts counts `json:"counts"`
}

type trace struct {
	Policy policy `json:"policy"`
	Steps  []step `json:"steps"`
}

// randomPolicy is a sub-second policy with random knobs, so that sequences
// reach trips, probes, recoveries and disabled rules (as the model's own
// property test draws them).
func randomPolicy(rng *rand.Rand) breaker.Policy {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	p := breaker.Policy{
		ConsecutiveFailures: []int{0, 1, 3, 5}[rng.IntN(4)],
		FailureRate:         []float64{0, 0.25, 0.5, 1}[rng.IntN(4)],
		MinCalls:            1 + rng.IntN(6),
		Window:              ms([]int{100, 1000, 777}[rng.IntN(3)]),
		OpenBase:            ms(50 + rng.IntN(100)),
		Jitter:              []float64{0, 0.1, 0.3, 0.9}[rng.IntN(4)],
		RateLimitCooldown:   ms([]int{0, 50}[rng.IntN(2)]),
		OverloadFloor:       ms([]int{0, 200}[rng.IntN(2)]),
		QuotaBlock:          ms([]int{0, 1500}[rng.IntN(2)]),
		AuthBlock:           ms([]int{0, 1000}[rng.IntN(2)]),
		MaxProbes:           1 + rng.IntN(4),
		LeaseTTL:            ms(100 + rng.IntN(300)),
		// The fleet rules: each on in most sequences, with small minimums
		// and ratios so that budgets run out and throttles reject.
		RetryBudget:    []float64{0, 0.1, 0.2, 0.5, 1}[rng.IntN(5)],
		RetryBudgetMin: []int{0, 0, 1, 3}[rng.IntN(4)],
		ThrottleK:      []float64{0, 1, 1.5, 2, 10}[rng.IntN(5)],
		TripQuorum:     []int{0, 1, 2, 2, 3}[rng.IntN(5)],
		FleetWindow:    ms([]int{100, 1000, 777, 30000}[rng.IntN(4)]),
		Shadow:         rng.IntN(4) == 0,
	}
	p.OpenMax = p.OpenBase * time.Duration(1+rng.IntN(16))
	return p
}

// validationCase is a random policy and the knob Validate refuses.
type validationCase struct {
	Policy policy `json:"policy"`
	// Refused is the policy-file key of the refused knob, "" when valid.
	Refused string `json:"refused"`
}

// validation perturbs one to three knobs of a valid policy, mostly to
// values at or past their bounds (spans may be fractional milliseconds).
func validation(rng *rand.Rand) validationCase {
	p := randomPolicy(rng)
	ms := float64(time.Millisecond)
	// Values at the rules between knobs (Policy.Validate): a rate or budget
	// of less than one basis point, the throttle's K below 1, a quorum of 1
	// or 2, min_calls while the rate rule is on, the failure-rate and fleet
	// windows' [1ms, MaxWindow], fractional milliseconds.
	rules := map[breaker.Kind][]float64{
		breaker.Count: {0, 1, 2},
		breaker.Ratio: {0, 0.00004, 0.00005, 0.0001, 0.3, 0.5, 0.99, 1, 1.5},
		breaker.Span:  {0, 0.5 * ms, ms, 1.5 * ms, float64(breaker.MaxWindow), float64(breaker.MaxWindow) + ms},
	}
	step := map[breaker.Kind]float64{breaker.Count: 1, breaker.Ratio: 0.5, breaker.Span: ms}
	knobs := breaker.Knobs()
	for range 1 + rng.IntN(3) {
		k := knobs[rng.IntN(len(knobs))]
		if k.Kind == breaker.Switch {
			k.Set(&p, 1-k.Get(p))
			continue
		}
		// And the knob's own bounds, from the table: each, and one step past.
		values := slices.Concat(rules[k.Kind], []float64{k.Min - step[k.Kind], k.Min, k.Max, k.Max + step[k.Kind]})
		k.Set(&p, values[rng.IntN(len(values))])
	}
	c := validationCase{Policy: toPolicy(p)}
	var pe *breaker.PolicyError
	if err := p.Validate(); errors.As(err, &pe) {
		c.Refused = pe.Knob.Key()
	} else if err != nil {
		panic(err)
	}
	return c
}

func randomOutcome(rng *rand.Rand) breaker.Outcome {
	switch n := rng.IntN(100); {
	case n < 35:
		return breaker.OutcomeSuccess
	case n < 70:
		return breaker.OutcomeTransientFailure
	case n < 77:
		return breaker.OutcomeClientError
	case n < 84:
		return breaker.OutcomeCanceled
	case n < 89:
		return breaker.OutcomeRateLimited
	case n < 93:
		return breaker.OutcomeOverloaded
	case n < 95:
		return breaker.OutcomeQuotaExhausted
	}
	return breaker.OutcomeAuthFailure
}

func sequence(rng *rand.Rand, steps int) trace {
	p := randomPolicy(rng)
	if err := p.Validate(); err != nil {
		panic(err)
	}
	tr := trace{Policy: toPolicy(p)}
	var (
		s      breaker.State
		now    = int64(1_800_000_000_000) + rng.Int64N(1_000_000)
		tokens []string
	)
	for k := range steps {
		var o op
		switch x := rng.IntN(100); {
		case x < 12:
			now += []int64{0, 1, 7, 49, 120, 333, 1200, 5000}[rng.IntN(8)]
			continue
		case x < 40:
			o = op{Kind: "admit", Nonce: "n" + strconv.Itoa(k), Retry: rng.IntN(2) == 0, Draw: rng.Float64()}
		case x < 80:
			r := report{Outcome: int(randomOutcome(rng)), HTTPStatus: 200 + rng.IntN(400), ErrorCode: []string{"", "rate_limit_exceeded", "x"}[rng.IntN(3)]}
			switch rng.IntN(8) {
			case 0:
				r.Revision = uint64(rng.IntN(int(min(s.Revision, 1<<30)) + 1))
			case 1:
				r.Revision = s.Revision + 1
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
			r.Retry = rng.IntN(3) == 0
			r.Reporter = []string{"", "a", "b", "c", "host-1.x_y"}[rng.IntN(5)]
			if r.Outcome == int(breaker.OutcomeSuccess) && rng.IntN(3) == 0 {
				r.Count = []int64{0, 1, 2, 17, 500, 200000}[rng.IntN(6)] // a client's batch of successes
			}
			o = op{Kind: "report", Report: &r, Jitter: rng.Float64()}
		case x < 86:
			tok := "0.0.0.bogus"
			if len(tokens) > 0 {
				tok = tokens[len(tokens)-1-rng.IntN(min(len(tokens), 3))]
			}
			o = op{Kind: "extend", Token: tok, TTL: int64(50 + rng.IntN(400))}
		case x < 90:
			var until int64
			if rng.IntN(2) == 0 {
				until = now + int64(1+rng.IntN(1000))
			}
			o = op{Kind: "force", Override: rng.IntN(3), Until: until, Actor: "alice", Reason: "test"}
		case x < 92:
			o = op{Kind: "reset", Actor: "bob", Reason: "test"}
		default:
			o = op{Kind: "settle"}
		}
		st := step{Now: now, Op: o}
		var evs []breaker.Event
		switch o.Kind {
		case "admit":
			v, e := s.Admit(p, now, breaker.Attempt{Nonce: o.Nonce, Retry: o.Retry, Draw: o.Draw})
			evs = e
			st.Verdict = &verdict{Decision: int(v.Decision), Reason: int(v.Reason), RetryAfter: v.RetryAfter,
				Revision: v.Revision, Phase: int(v.Phase), Shadowed: int(v.Shadowed), ShadowRetryAfter: v.ShadowRetryAfter}
			if v.Lease != nil {
				l := toLease(*v.Lease)
				st.Verdict.Lease = &l
				tokens = append(tokens, v.Lease.Token)
			}
		case "report":
			r := o.Report
			res, e := s.Report(p, now, breaker.Report{Revision: r.Revision, LeaseToken: r.LeaseToken,
				Outcome: breaker.Outcome(r.Outcome), RetryAfter: r.RetryAfter, HTTPStatus: r.HTTPStatus, ErrorCode: r.ErrorCode,
				Count: r.Count, Retry: r.Retry, Reporter: r.Reporter}, o.Jitter)
			evs = e
			st.Accepted, st.Changed = &res.Accepted, &res.Changed
		case "extend":
			l, e, err := s.ExtendLease(now, o.Token, o.TTL)
			evs = e
			switch {
			case errors.Is(err, breaker.ErrLeaseNotHeld):
				st.Err = "lease_not_held"
			case err != nil:
				panic(err)
			default:
				ll := toLease(l)
				st.Lease = &ll
			}
		case "force":
			evs = s.Force(now, breaker.Override(o.Override), o.Until, o.Actor, o.Reason)
		case "reset":
			evs = s.Reset(now, o.Actor, o.Reason)
		case "settle":
			evs = s.Settle(now)
		}
		st.Events = make([]event, 0, len(evs))
		for _, e := range evs {
			st.Events = append(st.Events, event{At: e.At, From: int(e.From), To: int(e.To), Cause: int(e.Cause),
				Revision: e.Revision, Actor: e.Actor, Reason: e.Reason})
		}
		st.State = toState(s)
		c := s.FleetCounts(p, now)
		st.Counts = counts{FirstAttempts: c.FirstAttempts, Retries: c.Retries, Requests: c.Requests, Accepts: c.Accepts,
			ThrottleProbability: c.ThrottleProbability, FailureReporters: c.FailureReporters}
		tr.Steps = append(tr.Steps, st)
	}
	return tr
}

func toLease(l breaker.Lease) lease {
	return lease{Slot: l.Slot, Token: l.Token, Granted: l.Granted, Expires: l.Expires}
}

func toState(s breaker.State) any { return tsknob.JSON(s) }
