package history

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// Policy is the replicas' policy in a chaos run: sub-second and
// deterministic (no jitter, no failure-rate window), so the model decides
// exactly as the scripts do.
func Policy() breaker.Policy {
	p := breaker.DefaultPolicy()
	p.ConsecutiveFailures = 3
	p.FailureRate = 0
	p.OpenBase = 200 * time.Millisecond
	p.OpenMax = 2 * time.Second
	p.Jitter = 0
	p.RateLimitCooldown = 300 * time.Millisecond
	p.OverloadFloor = 300 * time.Millisecond
	p.QuotaBlock = 2 * time.Second
	p.AuthBlock = time.Second
	p.LeaseTTL = time.Second
	return p
}

// mstate is the model's state of one connection: the breaker's state, or
// wild after an op whose answer was lost, until a read shows a state that
// can be rebuilt (no probe in flight, no override).
type mstate struct {
	wild bool
	s    breaker.State
}

// Model returns the porcupine model of one connection under policy p: the
// internal/breaker state machine, stepped with the server time each answer
// carries. A lost answer may or may not have been applied: the model then
// follows both (state unchanged, or wild).
//
// Keys need no state here. A keyed report is sent again only after a send
// whose answer was lost or an error (the client's queue; a ReportBatch's
// resend, each entry under its <batch key>-<index>), and the server
// answers the resend as it answered the first application, server time
// and all (decision 0041): either that send's op was not applied and the
// resend is the application, or it was, and its wild branch, taken just
// before the resend, explains the replayed answer. So the model does not
// catch a resend counted again (a key the server forgot): past a lost
// answer it accepts both.
func Model(p breaker.Policy) porcupine.Model {
	m := &porcupine.NondeterministicModel{
		Init: func() []any { return []any{mstate{s: breaker.State{Phase: breaker.Closed}}} },
		Step: func(state, input, _ any) []any { return step(p, state.(mstate), input.(Op)) },
		Equal: func(a, b any) bool {
			x, y := a.(mstate), b.(mstate)
			return x.wild == y.wild && (x.wild || reflect.DeepEqual(x.s, y.s))
		},
		DescribeOperation: func(input, _ any) string { return describe(input.(Op)) },
		DescribeState: func(state any) string {
			m := state.(mstate)
			if m.wild {
				return "wild (an answer was lost)"
			}
			return fmt.Sprintf("%+v", m.s)
		},
	}
	return m.ToModel()
}

// step applies op to m; it returns the states op may lead to, none when
// op's answer is impossible from m.
func step(p breaker.Policy, m mstate, op Op) []any {
	if op.Lost() || (!op.OK() && op.Kind != Extend) || op.Res.NotReplicated { // NOT_REPLICATED: a failover may undo it
		// No answer, or an error: it may have been applied or not.
		return []any{m, mstate{wild: true}}
	}
	if m.wild {
		if s, ok := rebuild(op); ok {
			return []any{mstate{s: s}}
		}
		return []any{m}
	}
	s := clone(m.s)
	now := op.Res.ServerTime
	switch op.Kind {
	case Admit:
		nonce := ""
		if op.Res.LeaseToken != "" {
			nonce = op.Res.LeaseToken[strings.LastIndexByte(op.Res.LeaseToken, '.')+1:]
		}
		v, _ := s.Admit(p, now, breaker.Attempt{Nonce: nonce})
		if int(v.Decision) != op.Res.Decision || v.Revision != op.Res.Revision {
			return nil
		}
		switch v.Decision {
		case breaker.Deny:
			if int(v.Reason) != op.Res.Reason || v.RetryAfter != op.Res.RetryAfter {
				return nil
			}
		case breaker.AllowProbe:
			if v.Lease.Token != op.Res.LeaseToken || v.Lease.Expires != op.Res.LeaseExp {
				return nil
			}
		}
	case Report:
		res, _ := s.Report(p, now, breaker.Report{Revision: op.Revision, LeaseToken: op.LeaseToken,
			Outcome: breaker.Outcome(op.Outcome), RetryAfter: op.RetryAfter, Count: op.Count, Retry: op.Retry, Reporter: op.Reporter}, 0)
		if res.Accepted != op.Res.Accepted || s.Revision != op.Res.Revision || int(s.Phase) != op.Res.Phase {
			return nil
		}
	case Extend:
		ttl := op.TTL
		if ttl <= 0 {
			ttl = p.LeaseTTL.Milliseconds()
		}
		if op.Code != "" {
			// Refused (failed_precondition): the lease was not held when
			// the server looked, an instant it does not tell. No change.
			return []any{m}
		}
		l, _, err := s.ExtendLease(now, op.LeaseToken, ttl)
		if err != nil || l.Expires != op.Res.LeaseExp {
			return nil
		}
	case Get:
		return []any{m} // a read: it has no server time to step with
	}
	return []any{mstate{s: s}}
}

// rebuild makes a state from a read that shows all of it: no probe in
// flight (their tokens are not shown) and no override.
func rebuild(op Op) (breaker.State, bool) {
	if op.Kind != Get || op.Res.Probes != 0 || op.Res.Override != 0 {
		return breaker.State{}, false
	}
	ph := breaker.Phase(op.Res.Phase)
	s := breaker.State{Phase: ph, Cause: breaker.Cause(op.Res.Cause), Revision: op.Res.Revision,
		Reopens: op.Res.Reopens, Consecutive: op.Res.Consecutive}
	if ph == breaker.Open {
		s.OpenUntil = op.Res.OpenUntil
	}
	return s, true
}

func clone(s breaker.State) breaker.State {
	s.Leases = slices.Clone(s.Leases)
	return s
}

func describe(o Op) string {
	switch o.Kind {
	case Admit:
		return fmt.Sprintf("admit → %s dec=%d why=%d ra=%d rev=%d @%d", o.Code, o.Res.Decision, o.Res.Reason, o.Res.RetryAfter, o.Res.Revision, o.Res.ServerTime)
	case Report:
		return fmt.Sprintf("report(rev=%d tok=%t out=%d ra=%d n=%d entry=%d key=%s) → %s acc=%t rev=%d ph=%d @%d", o.Revision,
			o.LeaseToken != "", o.Outcome, o.RetryAfter, o.Count, o.Entry, o.Key, o.Code, o.Res.Accepted, o.Res.Revision, o.Res.Phase, o.Res.ServerTime)
	}
	return fmt.Sprintf("%s → %s %+v", o.Kind, o.Code, o.Res)
}

// Linearizable is the verdict of one connection's history.
type Linearizable struct {
	Conn    string
	Result  porcupine.CheckResult
	Ops     int
	Info    porcupine.LinearizationInfo
	Partial []Op // the longest linearizable prefix found, then the op that cannot follow
}

// CheckLinearizable checks every connection's history against the model,
// each within timeout. Extend ops that were refused and reads are part of
// the history; a connection's ops keep their real call and return times.
func CheckLinearizable(ops []Op, p breaker.Policy, timeout time.Duration) []Linearizable {
	model := Model(p)
	var out []Linearizable
	for id, g := range byConn(ops) {
		hist := make([]porcupine.Operation, len(g))
		end := int64(0)
		for _, o := range g {
			end = max(end, o.Return, o.Call)
		}
		for i, o := range g {
			ret := o.Return
			if o.Lost() {
				ret = end + 1 // it may take effect at any instant after its call
			}
			hist[i] = porcupine.Operation{ClientId: o.Process, Input: o, Output: o, Call: o.Call * 1000, Return: ret*1000 + 999}
		}
		res, info := porcupine.CheckOperationsVerbose(model, hist, timeout)
		l := Linearizable{Conn: id, Result: res, Ops: len(g), Info: info}
		if res == porcupine.Illegal {
			l.Partial = longestPrefix(g, info)
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b Linearizable) int { return strings.Compare(a.Conn, b.Conn) })
	return out
}

// longestPrefix returns the ops of the longest partial linearization, in
// order, followed by the first op of the history left out of it: the
// minimal history that shows the violation.
func longestPrefix(g []Op, info porcupine.LinearizationInfo) []Op {
	var best []int
	for _, part := range info.PartialLinearizations() {
		for _, lin := range part {
			if len(lin) > len(best) {
				best = lin
			}
		}
	}
	in := map[int]bool{}
	out := make([]Op, 0, len(best)+1)
	for _, i := range best {
		in[i] = true
		out = append(out, g[i])
	}
	for i, o := range g {
		if !in[i] {
			return append(out, o)
		}
	}
	return out
}
