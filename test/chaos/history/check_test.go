package history

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// testPolicy is the chaos run's policy.
func testPolicy() breaker.Policy { return Policy() }

// simulate runs the model as a server would, sequentially, and records
// what clients would see: a history that must pass every check.
func simulate(seed uint64, n int) []Op {
	p := testPolicy()
	r := rand.New(rand.NewPCG(seed, 1))
	s := breaker.State{Phase: breaker.Closed} // as the server shows a new connection
	now := int64(1_700_000_000_000)
	type held struct {
		rev uint64
		tok string
	}
	var admitted []held
	var ops []Op
	for i := range n {
		now += int64(r.IntN(120))
		o := Op{Process: i % 4, Conn: "c0", Call: now - 1, Return: now + 1}
		if len(admitted) == 0 || r.IntN(3) == 0 {
			v, _ := s.Admit(p, now, breaker.Attempt{Nonce: fmt.Sprintf("n%d", i)})
			o.Kind = Admit
			o.Res = Result{ServerTime: now, Decision: int(v.Decision), Reason: int(v.Reason), Revision: v.Revision}
			switch v.Decision {
			case breaker.Deny:
				o.Res.RetryAfter, o.Res.AvailAt = v.RetryAfter, now+v.RetryAfter
			case breaker.AllowProbe:
				o.Res.LeaseToken, o.Res.LeaseExp = v.Lease.Token, v.Lease.Expires
				admitted = append(admitted, held{v.Revision, v.Lease.Token})
			default:
				admitted = append(admitted, held{v.Revision, ""})
			}
		} else {
			h := admitted[0]
			admitted = admitted[1:]
			out := []breaker.Outcome{breaker.OutcomeSuccess, breaker.OutcomeTransientFailure, breaker.OutcomeTransientFailure,
				breaker.OutcomeRateLimited, breaker.OutcomeCanceled}[r.IntN(5)]
			rep := breaker.Report{Revision: h.rev, LeaseToken: h.tok, Outcome: out}
			if out == breaker.OutcomeRateLimited {
				rep.RetryAfter = 300
			}
			res, _ := s.Report(p, now, rep, 0)
			o.Kind, o.Revision, o.LeaseToken, o.Outcome, o.RetryAfter = Report, h.rev, h.tok, int(out), rep.RetryAfter
			o.Res = Result{ServerTime: now, Accepted: res.Accepted, Changed: res.Changed, Revision: s.Revision, Phase: int(s.Phase)}
		}
		ops = append(ops, o)
	}
	return ops
}

func TestCleanHistoriesPass(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		ops := simulate(seed, 400)
		assert.Empty(t, Check(ops, testPolicy()), "seed %d", seed)
		for _, l := range CheckLinearizable(ops, testPolicy(), 10*time.Second) {
			assert.Equal(t, porcupine.Ok, l.Result, "seed %d", seed)
		}
	}
}

// TestSeededFaultsAreCaught proves the checker can fail: each fault is a
// server bug's mark on a history, planted in a correct one.
func TestSeededFaultsAreCaught(t *testing.T) {
	t.Parallel()
	find := func(ops []Op, f func(Op) bool) int {
		for i, o := range ops {
			if f(o) {
				return i
			}
		}
		return -1
	}
	tests := []struct {
		name     string
		plant    func(ops []Op) bool // false: this history has no place for it
		property string              // "" when only the linearizability check sees it
	}{
		{name: "a probe granted while another is in flight (lease TTL ignored)", property: "at most max_probes probes in flight",
			plant: func(ops []Op) bool {
				i := find(ops, func(o Op) bool { return o.Kind == Admit && o.Res.Reason == int(breaker.ReasonProbeInFlight) })
				if i < 0 {
					return false
				}
				o := &ops[i]
				o.Res.Decision, o.Res.Reason, o.Res.RetryAfter, o.Res.AvailAt = int(breaker.AllowProbe), 0, 0, 0
				o.Res.LeaseToken = breaker.LeaseToken(o.Res.Revision, 0, o.Res.ServerTime, "x")
				o.Res.LeaseExp = o.Res.ServerTime + 1000
				return true
			}},
		{name: "a stale report accepted (revision check skipped)", property: "no stale report accepted",
			plant: func(ops []Op) bool {
				i := find(ops, func(o Op) bool {
					return o.Kind == Report && !o.Res.Accepted && o.LeaseToken == "" && o.Outcome != int(breaker.OutcomeCanceled)
				})
				if i < 0 {
					return false
				}
				ops[i].Res.Accepted = true
				return true
			}},
		{name: "a cooldown shortened", property: "no cooldown shortened",
			plant: func(ops []Op) bool {
				i := find(ops, func(o Op) bool { return o.Kind == Admit && o.Res.Reason == int(breaker.ReasonCooldown) })
				if i < 0 {
					return false
				}
				o := &ops[i]
				o.Res.Decision, o.Res.Reason, o.Res.RetryAfter, o.Res.AvailAt = int(breaker.Allow), 0, 0, 0
				return true
			}},
		{name: "a denial with no time left", property: "denials consistent with the state",
			plant: func(ops []Op) bool {
				i := find(ops, func(o Op) bool { return o.Kind == Admit && o.Res.Decision == int(breaker.Deny) })
				if i < 0 {
					return false
				}
				ops[i].Res.AvailAt -= ops[i].Res.RetryAfter
				ops[i].Res.RetryAfter = 0
				return true
			}},
		{name: "a failure that did not count", plant: func(ops []Op) bool {
			i := find(ops, func(o Op) bool { return o.Kind == Report && o.Res.Changed && o.Res.Phase == int(breaker.Open) })
			if i < 0 {
				return false
			}
			ops[i].Res.Phase, ops[i].Res.Revision = int(breaker.Closed), ops[i].Res.Revision-1
			return true
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			planted := 0
			for seed := range uint64(40) {
				ops := simulate(seed, 400)
				if !tt.plant(ops) {
					continue
				}
				planted++
				if tt.property != "" {
					vs := Check(ops, testPolicy())
					require.NotEmpty(t, vs, "seed %d", seed)
					assert.Equal(t, tt.property, vs[0].Property, "seed %d: %v", seed, vs)
				}
				ls := CheckLinearizable(ops, testPolicy(), 10*time.Second)
				require.Len(t, ls, 1)
				assert.Equal(t, porcupine.Illegal, ls[0].Result, "seed %d", seed)
				assert.NotEmpty(t, ls[0].Partial, "the minimal failing history is shown")
			}
			assert.Positive(t, planted, "no history had a place for the fault")
		})
	}
}

// TestLostAnswers: an op whose answer was lost may have been applied or
// not; both must be accepted, and checking resumes after a full read.
func TestLostAnswers(t *testing.T) {
	t.Parallel()
	for seed := range uint64(10) {
		ops := simulate(seed, 300)
		for i := range ops {
			if i%37 == 5 {
				ops[i].Code, ops[i].Res = "lost", Result{}
			}
		}
		for _, l := range CheckLinearizable(ops, testPolicy(), 10*time.Second) {
			assert.Equal(t, porcupine.Ok, l.Result, "seed %d", seed)
		}
		assert.Empty(t, Check(ops, testPolicy()), "seed %d", seed)
	}
}

// TestUnknownSettlement (issue 28): a probe's report that was answered
// with an error (the new master refused it, NOREPLICAS) or not at all may
// not have settled the lease, so a PROBE_IN_FLIGHT denial while the lease
// could still be live is no violation; the checker took it as certainly
// applied and reported one (the 150 s Sentinel run's violation). The
// seeded bug, a PROBE_IN_FLIGHT denial after the lease's expiry with no
// lease that could be live, is still caught.
func TestUnknownSettlement(t *testing.T) {
	t.Parallel()
	p := testPolicy()
	const conn, grantAt, rev = "c1", int64(1_000_000), uint64(3)
	exp := grantAt + p.LeaseTTL.Milliseconds()
	grant := Op{Process: 1, ID: 1, Kind: Admit, Conn: conn, Call: grantAt - 2, Return: grantAt + 1,
		Res: Result{ServerTime: grantAt, Decision: int(breaker.AllowProbe), Revision: rev, Phase: int(breaker.HalfOpen),
			LeaseToken: "tok", LeaseExp: exp}}
	settle := func(code string) Op {
		o := Op{Process: 1, ID: 2, Kind: Report, Conn: conn, Call: grantAt + 100, LeaseToken: "tok", Revision: rev,
			Outcome: int(breaker.OutcomeSuccess), Code: code}
		if code != "lost" {
			o.Return = grantAt + 110
		}
		return o
	}
	denied := func(at int64) Op {
		return Op{Process: 2, ID: 1, Kind: Admit, Conn: conn, Call: at - 1, Return: at + 1,
			Res: Result{ServerTime: at, Decision: int(breaker.Deny), Reason: int(breaker.ReasonProbeInFlight), Revision: rev,
				Phase: int(breaker.HalfOpen), RetryAfter: exp - at, AvailAt: exp}}
	}
	for _, tc := range []struct {
		name     string
		ops      []Op
		property string // "" for none
	}{
		{"failed settlement, denial inside the lease", []Op{grant, settle("unavailable"), denied(grantAt + 226)}, ""},
		{"lost settlement, denial inside the lease", []Op{grant, settle("lost"), denied(grantAt + 226)}, ""},
		{"answered settlement, denial after it", []Op{grant, withRes(settle(""), Result{ServerTime: grantAt + 105,
			Revision: rev + 1, Phase: int(breaker.Closed), Accepted: true, Changed: true}), denied(grantAt + 226)},
			"denials consistent with the state"},
		{"seeded: denial after the lease's expiry", []Op{grant, settle("unavailable"), func() Op {
			d := denied(exp + 50)
			d.Res.RetryAfter, d.Res.AvailAt = 100, exp+150
			return d
		}()}, "denials consistent with the state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			vs := Check(tc.ops, p)
			if tc.property == "" {
				assert.Empty(t, vs)
				return
			}
			require.NotEmpty(t, vs)
			assert.Equal(t, tc.property, vs[0].Property, "%v", vs)
		})
	}
}

func withRes(o Op, r Result) Op { o.Res = r; return o }

// TestNotReplicatedMayBeLost: a report answered NOT_REPLICATED may be
// undone by a failover, so a later report accepted on the revision before
// it is no stale accept; with the same report answered replicated it is
// (the seeded bug, still caught).
func TestNotReplicatedMayBeLost(t *testing.T) {
	t.Parallel()
	const conn, at = "c2", int64(2_000_000)
	opened := Op{Process: 1, ID: 1, Kind: Report, Conn: conn, Call: at - 5, Return: at + 5, Outcome: int(breaker.OutcomeRateLimited),
		RetryAfter: 400, Res: Result{ServerTime: at, Revision: uint64(at), Phase: int(breaker.Open), Accepted: true, Changed: true}}
	stale := Op{Process: 2, ID: 1, Kind: Report, Conn: conn, Call: at + 10_000, Return: at + 10_010, Outcome: int(breaker.OutcomeTransientFailure),
		Res: Result{ServerTime: at + 10_005, Revision: 0, Phase: int(breaker.Closed), Accepted: true}}
	for _, tc := range []struct {
		name string
		nrep bool
		want int
	}{
		{"not replicated: possibly lost", true, 0},
		{"seeded: replicated, then a stale accept", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := opened
			o.Res.NotReplicated = tc.nrep
			vs := Check([]Op{o, stale}, testPolicy())
			require.Len(t, vs, tc.want, "%v", vs)
			if tc.want > 0 {
				assert.Equal(t, "no stale report accepted", vs[0].Property)
			}
		})
	}
}

// TestNotReplicatedGrantMayBeLost: a probe grant answered NOT_REPLICATED
// may be undone by a failover, slot and all, so a second grant inside its
// lease is no double probe; with the first grant answered replicated (or
// without durability) it is (the seeded double probe, still caught).
func TestNotReplicatedGrantMayBeLost(t *testing.T) {
	t.Parallel()
	const conn, at = "c3", int64(3_000_000)
	grant := func(p int, now int64, nrep bool) Op {
		return Op{Process: p, ID: 1, Kind: Admit, Conn: conn, Call: now - 2, Return: now + 2,
			Res: Result{ServerTime: now, Decision: int(breaker.AllowProbe), Revision: 7, Phase: int(breaker.HalfOpen),
				LeaseToken: fmt.Sprintf("7.0.%d.n%d", now, p), LeaseExp: now + 1000, NotReplicated: nrep}}
	}
	for _, tc := range []struct {
		name string
		nrep bool
		want int
	}{
		{"not replicated: the first grant possibly lost", true, 0},
		{"seeded: replicated, then a second grant inside its lease", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			vs := Check([]Op{grant(1, at, tc.nrep), grant(2, at+300, false)}, testPolicy())
			require.Len(t, vs, tc.want, "%v", vs)
			if tc.want > 0 {
				assert.Equal(t, "at most max_probes probes in flight", vs[0].Property)
			}
		})
	}
}

// TestNotReplicatedRevisionEndsNoLeaseForADenial: a read answered
// NOT_REPLICATED may come from writes a failover loses (the demoted master
// serves reads of what it took after the promotion), so a higher revision
// it shows does not end a lease granted on the promoted master, and a
// probe-in-flight denial inside that lease is consistent. A chaos run
// failed on it: from a process whose cooldownds stood on both masters for
// a moment, an Admit read revision 592 from the old master 0 ms after
// another granted a probe of revision 589 on the new one, and the denials
// leaning on that grant were flagged. With the read answered replicated
// the revision is firm, the lease ended, and the denial is flagged (the
// checker still catches a denial with no live lease).
func TestNotReplicatedRevisionEndsNoLeaseForADenial(t *testing.T) {
	t.Parallel()
	const conn, at = "c4", int64(4_000_000)
	grant := Op{Process: 1, ID: 1, Kind: Admit, Conn: conn, Call: at - 2, Return: at + 2,
		Res: Result{ServerTime: at, Decision: int(breaker.AllowProbe), Revision: 589, Phase: int(breaker.HalfOpen),
			LeaseToken: fmt.Sprintf("589.0.%d.n1", at), LeaseExp: at + 1000, NotReplicated: true}}
	denied := Op{Process: 3, ID: 1, Kind: Admit, Conn: conn, Call: at + 40, Return: at + 42,
		Res: Result{ServerTime: at + 41, Decision: int(breaker.Deny), Reason: int(breaker.ReasonProbeInFlight), RetryAfter: 959,
			AvailAt: at + 1000, Revision: 589, Phase: int(breaker.HalfOpen), NotReplicated: true}}
	for _, tc := range []struct {
		name string
		nrep bool
		want int
	}{
		{"the higher revision read not replicated: possibly lost", true, 0},
		{"seeded: the higher revision replicated, then a denial on the ended lease", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			other := Op{Process: 2, ID: 1, Kind: Admit, Conn: conn, Call: at - 1, Return: at + 3,
				Res: Result{ServerTime: at + 1, Decision: int(breaker.Deny), Reason: int(breaker.ReasonProbeInFlight), RetryAfter: 500,
					AvailAt: at + 501, Revision: 592, Phase: int(breaker.HalfOpen), NotReplicated: tc.nrep}}
			vs := Check([]Op{grant, other, denied}, testPolicy())
			var flagged []Violation
			for _, v := range vs {
				if v.Property == "denials consistent with the state" && v.Ops[0].Process == 3 {
					flagged = append(flagged, v)
				}
			}
			require.Len(t, flagged, tc.want, "%v", vs)
		})
	}
}
