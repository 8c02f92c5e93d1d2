package history

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// server applies reports to one connection as the server would, and
// returns the ops their answers make.
type server struct {
	s  breaker.State
	id int64
}

func newServer() *server { return &server{s: breaker.State{Phase: breaker.Closed}} }

func (v *server) report(p int, at int64, r breaker.Report) Op {
	res, _ := v.s.Report(testPolicy(), at, r, 0)
	v.id++
	return Op{Process: p, ID: v.id, Kind: Report, Conn: "c5", Call: at - 1, Return: at + 1, Revision: r.Revision,
		Outcome: int(r.Outcome), Count: r.Count, Retry: r.Retry, Reporter: r.Reporter,
		Res: Result{ServerTime: at, Revision: v.s.Revision, Phase: int(v.s.Phase), Accepted: res.Accepted, Changed: res.Changed}}
}

func (v *server) get(p int, at int64) Op {
	v.id++
	return Op{Process: p, ID: v.id, Kind: Get, Conn: "c5", Call: at - 1, Return: at + 1,
		Res: Result{Revision: v.s.Revision, Phase: int(v.s.Phase), Cause: int(v.s.Cause), OpenUntil: v.s.OpenUntil,
			Reopens: v.s.Reopens, Consecutive: v.s.Consecutive}}
}

// entry is a ReportBatch entry of a success, as the recorder makes it.
func entry(o Op, key string) Op {
	o.Entry, o.Key = 1, key+"-0"
	return o
}

func failure(rev uint64) breaker.Report {
	return breaker.Report{Revision: rev, Outcome: breaker.OutcomeTransientFailure, Reporter: "w2"}
}

// TestResentBatch: a ReportBatch whose answer was lost and that the
// client's queue sent again under the same key is, per connection, the
// resend of its entry: the server answers the resend as it answered the
// first application, after other processes tripped the connection and a
// read showed it, and the history is linearizable. With the first send's
// entry missing from the history (one op per RPC, or an entry dropped),
// the replayed answer cannot be explained; nor can a success the history
// does not see at all, which the next failures show.
func TestResentBatch(t *testing.T) {
	t.Parallel()
	const at = int64(5_000_000)
	success := breaker.Report{Outcome: breaker.OutcomeSuccess, Count: 4, Reporter: "w1"}

	resent := func(firstSend bool) []Op {
		v := newServer()
		applied := entry(v.report(1, at+1, success), "K") // the first send's application: its answer lost
		first := applied
		first.Code, first.Res, first.Return = "lost", Result{}, at+2
		ops := []Op{}
		if firstSend {
			ops = append(ops, first)
		}
		for i := range int64(3) {
			ops = append(ops, v.report(2, at+10+10*i, failure(0)))
		}
		ops = append(ops, v.get(3, at+40))
		again := applied // answered as the first application was
		again.ID, again.Call, again.Return = 99, at+200, at+202
		return append(ops, again)
	}
	unseen := func(seen bool) []Op {
		v := newServer()
		ops := []Op{v.report(2, at, failure(0)), v.report(2, at+10, failure(0))}
		if ok := entry(v.report(1, at+20, success), "K"); seen {
			ops = append(ops, ok)
		}
		return append(ops, v.report(2, at+30, failure(0)), v.report(2, at+40, failure(0)), v.get(3, at+50))
	}
	for _, tc := range []struct {
		name string
		ops  []Op
		want porcupine.CheckResult
	}{
		{"resent: the first send's entry lost, the resend replayed", resent(true), porcupine.Ok},
		{"seeded: the first send's entry missing", resent(false), porcupine.Illegal},
		{"a batch's success, then failures", unseen(true), porcupine.Ok},
		{"seeded: the batch's success missing", unseen(false), porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.want == porcupine.Ok {
				assert.Empty(t, Check(tc.ops, testPolicy()))
			}
			ls := CheckLinearizable(tc.ops, testPolicy(), 10*time.Second)
			require.Len(t, ls, 1)
			assert.Equal(t, tc.want, ls[0].Result, "%v", tc.ops)
		})
	}
}
