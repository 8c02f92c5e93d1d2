// Command breakertrace writes random operation sequences applied to the Go
// breaker model (internal/breaker) as JSON: each step's operation, its
// answer, its events and the whole state after it. The TypeScript client's
// test (clients/ts/test/breaker.test.ts) replays the operations through its
// port of the model and fails on the first step that differs, so the port
// cannot drift from the model the server and the Go client run.
//
//	go run ./clients/ts/tools/breakertrace -sequences 400 -steps 150 -seed 1
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

func main() {
	var (
		seed      = flag.Uint64("seed", 1, "random seed")
		sequences = flag.Int("sequences", 400, "operation sequences")
		steps     = flag.Int("steps", 150, "operations per sequence")
	)
	flag.Parse()
	rng := rand.New(rand.NewPCG(*seed, 0x7e57))
	w := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(w)
	for range *sequences {
		if err := enc.Encode(sequence(rng, *steps)); err != nil {
			fmt.Fprintln(os.Stderr, "breakertrace:", err)
			os.Exit(1)
		}
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "breakertrace:", err)
		os.Exit(1)
	}
}

// policy is a breaker.Policy in milliseconds, as the TypeScript port holds it.
type policy struct {
	ConsecutiveFailures int     `json:"consecutiveFailures"`
	FailureRate         float64 `json:"failureRate"`
	MinCalls            int     `json:"minCalls"`
	WindowMs            int64   `json:"windowMs"`
	OpenBaseMs          int64   `json:"openBaseMs"`
	OpenMaxMs           int64   `json:"openMaxMs"`
	Jitter              float64 `json:"jitter"`
	RateLimitDefaultMs  int64   `json:"rateLimitDefaultMs"`
	OverloadFloorMs     int64   `json:"overloadFloorMs"`
	QuotaBlockMs        int64   `json:"quotaBlockMs"`
	AuthBlockMs         int64   `json:"authBlockMs"`
	MaxProbes           int     `json:"maxProbes"`
	LeaseTTLMs          int64   `json:"leaseTtlMs"`
}

func toPolicy(p breaker.Policy) policy {
	return policy{
		ConsecutiveFailures: p.ConsecutiveFailures, FailureRate: p.FailureRate, MinCalls: p.MinCalls,
		WindowMs: p.Window.Milliseconds(), OpenBaseMs: p.OpenBase.Milliseconds(), OpenMaxMs: p.OpenMax.Milliseconds(),
		Jitter: p.Jitter, RateLimitDefaultMs: p.RateLimitCooldown.Milliseconds(), OverloadFloorMs: p.OverloadFloor.Milliseconds(),
		QuotaBlockMs: p.QuotaBlock.Milliseconds(), AuthBlockMs: p.AuthBlock.Milliseconds(), MaxProbes: p.MaxProbes,
		LeaseTTLMs: p.LeaseTTL.Milliseconds(),
	}
}

type report struct {
	Revision   uint64 `json:"revision"`
	LeaseToken string `json:"leaseToken"`
	Outcome    int    `json:"outcome"`
	RetryAfter int64  `json:"retryAfter"`
	HTTPStatus int    `json:"httpStatus"`
	ErrorCode  string `json:"errorCode"`
	Count      int64  `json:"count"`
}

// op is one operation: admit, report, extend, force, reset or settle.
type op struct {
	Kind     string  `json:"kind"`
	Nonce    string  `json:"nonce,omitempty"`
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
}

type window struct {
	Start     int64 `json:"start"`
	PrevCalls int64 `json:"prevCalls"`
	PrevFails int64 `json:"prevFails"`
	CurCalls  int64 `json:"curCalls"`
	CurFails  int64 `json:"curFails"`
}

// state is a breaker.State with its zero phase written as 0.
type state struct {
	Phase         int     `json:"phase"`
	Cause         int     `json:"cause"`
	Revision      uint64  `json:"revision"`
	OpenUntil     int64   `json:"openUntil"`
	Reopens       int     `json:"reopens"`
	Consecutive   int     `json:"consecutive"`
	Window        window  `json:"window"`
	Override      int     `json:"override"`
	OverrideUntil int64   `json:"overrideUntil"`
	Leases        []lease `json:"leases"`
	Successes     int64   `json:"successes"`
	Failures      int64   `json:"failures"`
	LastStatus    int     `json:"lastStatus"`
	LastOutcome   int     `json:"lastOutcome"`
	LastErrorCode string  `json:"lastErrorCode"`
	ChangedAt     int64   `json:"changedAt"`
	UpdatedAt     int64   `json:"updatedAt"`
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
	State    state    `json:"state"`
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
	}
	p.OpenMax = p.OpenBase * time.Duration(1+rng.IntN(16))
	return p
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
			o = op{Kind: "admit", Nonce: "n" + strconv.Itoa(k)}
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
			v, e := s.Admit(p, now, breaker.Attempt{Nonce: o.Nonce})
			evs = e
			st.Verdict = &verdict{Decision: int(v.Decision), Reason: int(v.Reason), RetryAfter: v.RetryAfter,
				Revision: v.Revision, Phase: int(v.Phase)}
			if v.Lease != nil {
				l := toLease(*v.Lease)
				st.Verdict.Lease = &l
				tokens = append(tokens, v.Lease.Token)
			}
		case "report":
			r := o.Report
			res, e := s.Report(p, now, breaker.Report{Revision: r.Revision, LeaseToken: r.LeaseToken,
				Outcome: breaker.Outcome(r.Outcome), RetryAfter: r.RetryAfter, HTTPStatus: r.HTTPStatus, ErrorCode: r.ErrorCode,
				Count: r.Count}, o.Jitter)
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
		tr.Steps = append(tr.Steps, st)
	}
	return tr
}

func toLease(l breaker.Lease) lease {
	return lease{Slot: l.Slot, Token: l.Token, Granted: l.Granted, Expires: l.Expires}
}

func toState(s breaker.State) state {
	out := state{
		Phase: int(s.Phase), Cause: int(s.Cause), Revision: s.Revision, OpenUntil: s.OpenUntil, Reopens: s.Reopens,
		Consecutive: s.Consecutive, Override: int(s.Override), OverrideUntil: s.OverrideUntil, Leases: []lease{},
		Successes: s.Successes, Failures: s.Failures, LastStatus: s.LastStatus, LastOutcome: int(s.LastOutcome),
		LastErrorCode: s.LastErrorCode, ChangedAt: s.ChangedAt, UpdatedAt: s.UpdatedAt,
		Window: window{Start: s.Window.Start, PrevCalls: s.Window.PrevCalls, PrevFails: s.Window.PrevFails,
			CurCalls: s.Window.CurCalls, CurFails: s.Window.CurFails},
	}
	for _, l := range s.Leases {
		out.Leases = append(out.Leases, toLease(l))
	}
	return out
}
