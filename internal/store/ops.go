package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
)

// Conn names one connection of one tenant.
type Conn struct {
	Tenant string
	ID     keys.ID
	Label  string
	// Retry says, in an Admit, that the call was already sent to this
	// connection: a retry, charged to its fleet retry budget.
	Retry bool
	// ReportKey is, in a Report, the report's idempotency key (empty:
	// none): 1 to 64 characters of [A-Za-z0-9_-], the same in every
	// resend of one report. See [Store.Report].
	ReportKey string
}

func (c Conn) layout() keys.Layout { return keys.Layout{Tenant: c.Tenant, ID: c.ID} }

// Decision is Admit's answer for one connection.
type Decision struct {
	breaker.Verdict
	// LeaseToken and LeaseExpires are set on AllowProbe.
	LeaseToken   string
	LeaseExpires time.Time
	// Now is the server clock at the decision.
	Now time.Time
	// Events are the transitions the decision applied (an open period
	// ending, an override expiring).
	Events []breaker.Event
	// LeaseExpired is true when this probe grant took the slot of a lease
	// that lapsed unsettled: its holder never reported (it died or hung).
	LeaseExpired bool
	// ThrottleProbability is the adaptive throttle's rejection
	// probability in effect after the decision: 0 unless the connection
	// is closed with no override and its throttle is on.
	ThrottleProbability float64
	// Durability says whether the replicas Options.Durability waits for
	// acknowledged what the Admit wrote (a probe lease granted, a timed
	// transition applied; see durable.go): the same for every decision of
	// one Admit, [ReplicationNone] when it wrote nothing.
	Durability Replication
}

// wrote reports whether the decision's script wrote something a failover
// must not lose: a probe lease granted (or moved from one that lapsed) or
// a transition applied. A healthy admission and a plain denial write
// nothing.
func (d Decision) wrote() bool { return d.Decision == breaker.AllowProbe || len(d.Events) > 0 }

// Admit decides whether one call to c may go now: one round trip (two
// for a connection that does not exist yet while the tenant has a cap).
// It writes nothing on a healthy connection and never creates one; for a
// connection it admits that could not be created because the tenant is at
// its cap it returns [ErrTooManyConnections], as Report would.
func (s *Store) Admit(ctx context.Context, c Conn) (Decision, error) {
	_, ds, err := s.AdmitFirst(ctx, []Conn{c})
	if err != nil {
		return Decision{}, err
	}
	return ds[0], nil
}

// AdmitFirst admits the first candidate that may go, in order: the first
// admitted wins, and no candidate after it is granted anything (no probe
// lease past it). It returns the chosen index (or, when all are denied,
// the one available soonest) and the decisions of the candidates up to
// the chosen one. On single and Sentinel Redis, and on a Cluster when all
// candidates share a hash slot, that is one script: one round trip. On a
// Cluster otherwise it is one pipelined round (the first candidate
// admitted, each later one peeked at, see admit.lua), and one more round
// only when a candidate after the first needs a write to be decided (a
// probe to grant, a timed transition to apply): the round then starts at
// that candidate. It returns [ErrTooManyConnections] only when the
// candidate it admits has no state and its tenant is at its cap: that one
// was granted nothing, nor was any before it (all denied), so the answer
// never leaves a probe lease that nobody was told of.
func (s *Store) AdmitFirst(ctx context.Context, cands []Conn) (int, []Decision, error) {
	if len(cands) == 0 {
		return 0, nil, nil
	}
	// One throttle draw per candidate per Admit, whatever the rounds: a
	// peek that leaves a candidate undecided must not give it a second
	// draw in the next round.
	draws := make([]int64, len(cands))
	for i := range draws {
		draws[i] = s.draw()
	}
	var out []admitted
	var err error
	var repl Replication
	if s.oneScript(cands) {
		// With Durability, on a connection held for the Admit: an Admit
		// that wrote (a grant, a transition) waits for the replicas as a
		// transition's report does, on the connection that ran the script.
		// One that wrote nothing answers after the script alone.
		sc, release := s.durableConn(ctx, cands[0].layout())
		if out, err = s.admitScript(ctx, sc, cands, draws, false).decode(); err != nil {
			err = unavailable("admit", err)
		} else {
			s.scheduleAdmitted(ctx, cands, out)
			repl, err = s.awaitReplicas(ctx, sc, admitWrote(out), s.admitFresh(out))
		}
		release()
	} else {
		// A Cluster's candidates on several slots: the rounds' pipelines
		// run on pooled connections of several masters, and their writes
		// are not waited for (docs/reliability.md).
		if out, err = s.admitRounds(ctx, cands, draws); err != nil {
			err = unavailable("admit", err)
		} else {
			s.scheduleAdmitted(ctx, cands, out)
		}
	}
	if err != nil {
		return 0, nil, err
	}
	ds := make([]Decision, len(out))
	best := 0
	for i, a := range out {
		ds[i] = a.Decision
		ds[i].Durability = repl
		if a.Decision.Decision != breaker.Deny {
			// Only the admitted candidate may be refused at the cap: the
			// script granted nothing to one without state, nor past it.
			// A denied one without state (a retry past the budget) was
			// granted nothing either, and a later candidate may hold a
			// probe lease that the answer must carry.
			if !a.exists && s.maxConns > 0 {
				if err := s.mayExist(ctx, cands[i]); err != nil {
					return 0, nil, err
				}
			}
			return i, ds, nil
		}
		if a.RetryAfter < ds[best].RetryAfter {
			best = i
		}
	}
	return best, ds, nil
}

// scheduleAdmitted hands the sweeper the timed transitions the decided
// candidates' scripts scheduled. It runs before the wait for replicas: an
// Admit they did not acknowledge was applied on the master all the same.
func (s *Store) scheduleAdmitted(ctx context.Context, cands []Conn, out []admitted) {
	for i, a := range out {
		s.scheduled(ctx, cands[i].Tenant, cands[i].layout(), len(a.Events), a.wake)
	}
}

// admitWrote reports whether any decided candidate's script wrote what
// a failover must not lose (see Decision.wrote).
// admitFresh reports whether a candidate's verdict rests on a write so
// recent that it may not have reached the replicas (see freshWrite).
func (s *Store) admitFresh(out []admitted) bool {
	for _, a := range out {
		if s.freshWrite(a.Now.UnixMilli(), a.writtenAt) {
			return true
		}
	}
	return false
}

func admitWrote(out []admitted) bool {
	for _, a := range out {
		if a.wrote() {
			return true
		}
	}
	return false
}

// admitted is one candidate's part of admit.lua's reply.
type admitted struct {
	Decision
	exists    bool
	wake      int64
	writtenAt int64 // CANDIDATE_REPLY's written_at (Unix ms)
}

// oneScript reports whether one script can admit all of cands: always
// but on a Cluster, where only keys of one hash slot can.
func (s *Store) oneScript(cands []Conn) bool {
	if s.cluster == nil || len(cands) == 1 {
		return true
	}
	slot := hashSlot(cands[0].layout().State())
	for _, c := range cands[1:] {
		if hashSlot(c.layout().State()) != slot {
			return false
		}
	}
	return true
}

// admitCmd is one run of admit.lua.
type admitCmd struct {
	cmd *redis.Cmd
	// retry runs it again in full (EVAL) after a NOSCRIPT on a pipeline.
	retry func() *redis.Cmd
}

// admitScript runs (or, on a pipeline, queues) admit.lua over cands, with
// the throttle's draws (millionths) aligned to them.
func (s *Store) admitScript(ctx context.Context, p processor, cands []Conn, draws []int64, peek bool) admitCmd {
	ks := make([]string, 0, 2*len(cands))
	args := make([]any, 0, 2+6*len(cands))
	pk := "0"
	if peek {
		pk = "1"
	}
	args = append(args, s.nowArg(), pk)
	for i, c := range cands {
		l := c.layout()
		ks = append(ks, connKeys(l)...)
		args = append(args, s.policyArg(s.connPolicy(c)), keys.Channel(l.Tenant), l.ID.String(), s.nonce(), flag(c.Retry), draws[i])
	}
	if _, ok := p.(redis.Pipeliner); ok {
		return admitCmd{cmd: scriptAdmit.queue(ctx, p, "evalsha", ks, args), retry: func() *redis.Cmd {
			return scriptAdmit.queue(ctx, s.rdb, "eval", ks, args)
		}}
	}
	return admitCmd{cmd: scriptAdmit.run(ctx, p, ks, args...)}
}

// decode reads admit.lua's reply: now, how many candidates were decided,
// then each one's ADMIT_REPLY and transitions.
func (a admitCmd) decode() ([]admitted, error) {
	if a.retry != nil && noScript(a.cmd.Err()) {
		a.cmd = a.retry()
	}
	r := newReply(a.cmd.Result())
	head := r.admitReply()
	now, n := time.UnixMilli(head.Now), head.Decided
	out := make([]admitted, 0, max(n, 0))
	for range n {
		c := r.candidateReply()
		d := Decision{Verdict: breaker.Verdict{
			Decision: breaker.Decision(c.Decision), Reason: breaker.DenyReason(c.Reason), RetryAfter: c.RetryAfter,
			Revision: uint64(c.Revision), Phase: breaker.Phase(c.Phase),
			Shadowed: breaker.DenyReason(c.Shadowed), ShadowRetryAfter: c.ShadowRetryAfter,
		}, Now: now, LeaseToken: c.LeaseToken, LeaseExpired: c.LeaseExpired, ThrottleProbability: c.Throttle, Events: c.Events}
		if d.Decision == breaker.AllowProbe {
			d.LeaseExpires = time.UnixMilli(c.LeaseExpires)
		}
		out = append(out, admitted{Decision: d, exists: c.Exists, wake: c.Wake, writtenAt: c.WrittenAt})
	}
	if r.err == nil && n < 1 {
		r.err = fmt.Errorf("store: admit decided %d candidates", n)
	}
	return out, r.err
}

// admitRounds admits cands on a Cluster whose slots differ: a round is one
// pipeline, the first undecided candidate admitted in full and every later
// one peeked at (a peek writes nothing). The decisions are read in order
// up to the first admitted one; a peek that could not decide without a
// write starts the next round at its candidate.
func (s *Store) admitRounds(ctx context.Context, cands []Conn, draws []int64) ([]admitted, error) {
	var out []admitted
	for first := 0; first < len(cands); {
		pipe := s.rdb.Pipeline()
		cmds := make([]admitCmd, 0, len(cands)-first)
		for i := first; i < len(cands); i++ {
			cmds = append(cmds, s.admitScript(ctx, pipe, cands[i:i+1], draws[i:i+1], i > first))
		}
		_, _ = pipe.Exec(ctx) // each command's error is read below
		next := len(cands)
		for j, cmd := range cmds {
			a, err := cmd.decode()
			if err != nil {
				return nil, err
			}
			if a[0].Decision.Decision == admitUndecided {
				next = first + j
				break
			}
			out = append(out, a[0])
			if a[0].Decision.Decision != breaker.Deny {
				return out, nil
			}
		}
		first = next
	}
	return out, nil
}

// ReportResult says what a report did.
type ReportResult struct {
	breaker.ReportResult
	Revision uint64
	Phase    breaker.Phase
	// Created is true when the report created the connection's state.
	Created bool
	// Events are the transitions the report applied.
	Events []breaker.Event
	// Now is the server clock when the report was applied.
	Now time.Time
	// ThrottleProbability is the adaptive throttle's rejection
	// probability in effect after the report (see Decision's).
	ThrottleProbability float64
	// Shadow says the policy the report was applied under is in shadow
	// mode: its open is computed, not enforced.
	Shadow bool
	// Replayed says the report's idempotency key named a report already
	// applied: this is that report's answer (its Now, Events and all),
	// and nothing was applied or counted again.
	Replayed bool
	// Durability says whether the replicas Options.Durability waits for
	// acknowledged the report's transitions (see durable.go).
	Durability Replication
}

// DefaultReportKeyTTL is how long a report's idempotency key remembers
// its answer by default ([Options.ReportKeyTTL]): twice the clients'
// report queue max age (a minute), so that a resend the queue sends at
// the end of its report's life still finds it.
const DefaultReportKeyTTL = 2 * time.Minute

// ErrReportKeyReused is returned when a report's idempotency key names a
// report already applied that said something else (outcome, revision,
// count or retry flag): a client bug, nothing was applied.
var ErrReportKeyReused = errors.New("store: the idempotency key names a different report")

// Report applies the outcome of one call: one round trip. A connection's
// first report registers it in its tenant's index first (within the cap;
// see [Store.create]), so a connection that exists is always listed and
// counted. May return [ErrTooManyConnections].
//
// A report with an idempotency key (c.ReportKey) is applied once: the
// script remembers its answer under the key, in the connection's hash
// slot, for [Options.ReportKeyTTL], and a resend within that time (its
// first answer was lost) gets that answer back, with Replayed set, and
// counts nothing again; one that said something else returns
// [ErrReportKeyReused].
func (s *Store) Report(ctx context.Context, c Conn, rep breaker.Report) (ReportResult, error) {
	res, _, err := s.report(ctx, c, rep, nil)
	return res, err
}

// claims are the keyed reports of a coalesced batch, claimed in the
// batch's report script (lua/claims_open.lua).
type claims struct {
	keys     []KeyedCount
	throttle float64 // the probability the replica answered them with
}

// report is [Store.Report], and with cl a coalesced batch's report: rep's
// Count is then the unkeyed reports' (0 allowed), each of cl's keys joins
// it if this run claims it, and the claims are returned (1 claimed, 0
// remembered for the same report, -1 for another), with res zero when
// nothing was left to report.
func (s *Store) report(ctx context.Context, c Conn, rep breaker.Report, cl *claims) (ReportResult, []int64, error) {
	p := s.connPolicy(c)
	l := c.layout()
	res := ReportResult{Shadow: p.Shadow}
	var wake, writtenAt int64
	sc, release := s.durableConn(ctx, l) // s.rdb unless Options.Durability
	defer release()
	ks := connKeys(l)
	script, count := scriptReport, max(rep.Count, 1)
	switch {
	case cl != nil:
		for _, k := range cl.keys {
			ks = append(ks, l.Report(k.Key))
		}
		script, count = scriptReportClaims, max(rep.Count, 0)
	case c.ReportKey != "":
		ks = append(ks, l.Report(c.ReportKey))
	}
	var claimed []int64
	err := s.create(ctx, c, func(registeredAt int64) (int64, error) {
		op := []any{rep.Revision, rep.LeaseToken, int(rep.Outcome), rep.RetryAfter, rep.HTTPStatus, rep.ErrorCode, c.Label, s.jitter(),
			registeredAt, registerGrace.Milliseconds(), count, flag(rep.Retry), rep.Reporter}
		switch {
		case cl != nil:
			op = append(op, s.reportKeyTTL, strconv.FormatFloat(cl.throttle, 'g', 17, 64))
			for _, k := range cl.keys {
				op = append(op, max(k.Count, 1))
			}
		case c.ReportKey != "":
			op = append(op, s.reportKeyTTL)
		}
		v, err := script.run(ctx, sc, ks, s.args(p, l, op...)...).Result()
		if cl != nil && err == nil {
			var done bool
			if claimed, v, done, err = splitClaims(v, len(cl.keys)); err != nil {
				return 0, unavailable("report", err)
			}
			if done {
				return statusApplied, nil
			}
		}
		r := newReply(v, err)
		// REPORT_REPLY in report.lua (REUSED alone).
		if r.first() == statusReused {
			return 0, ErrReportKeyReused
		}
		x := r.reportReply()
		status := x.Status
		if status == statusReplayed {
			res.Replayed, status = true, statusApplied
		}
		res.Accepted, res.Changed, res.Created = x.Accepted, x.Changed, x.Created
		res.Revision, res.Phase, res.Now = uint64(x.Revision), breaker.Phase(x.Phase), time.UnixMilli(x.Now)
		res.ThrottleProbability, res.Events = x.Throttle, x.Events
		wake, writtenAt = x.Wake, x.WrittenAt
		if r.err != nil {
			return 0, unavailable("report", r.err)
		}
		return status, nil
	})
	if err != nil {
		return ReportResult{}, nil, err
	}
	if res.Now.IsZero() {
		return ReportResult{}, claimed, nil // every key was remembered: nothing reported
	}
	// Scheduled before the wait for replicas: a report they did not
	// acknowledge was applied on the master all the same, and its open
	// must end on time.
	s.scheduled(ctx, c.Tenant, l, len(res.Events), wake)
	fresh := s.freshWrite(res.Now.UnixMilli(), writtenAt)
	if res.Durability, err = s.awaitReplicas(ctx, sc, len(res.Events) > 0, fresh); err != nil {
		return ReportResult{}, nil, err
	}
	return res, claimed, nil
}

// splitClaims reads lua/claims_close.lua's reply: the claims of n keys,
// and the report's reply unless done (nothing was left to report).
func splitClaims(v any, n int) (claimed []int64, report any, done bool, err error) {
	arr, ok := v.([]any)
	if !ok || len(arr) < 1 || len(arr) > 2 {
		return nil, nil, false, fmt.Errorf("store: claims reply %v, want {claims} or {claims, report}", v)
	}
	flags, ok := arr[0].([]any)
	if !ok || len(flags) != n {
		return nil, nil, false, fmt.Errorf("store: claims %v, want %d values", arr[0], n)
	}
	claimed = make([]int64, n)
	for i, f := range flags {
		if claimed[i], ok = f.(int64); !ok {
			return nil, nil, false, fmt.Errorf("store: claim %d is %T, not an integer", i, f)
		}
	}
	if len(arr) == 1 {
		return claimed, nil, true, nil
	}
	return claimed, arr[1], false, nil
}

// ExtendLease moves a live probe lease's expiry to now+ttl (ttl 0: the
// policy's lease TTL): one script that compares the token and extends.
// May return [ErrLeaseNotHeld].
func (s *Store) ExtendLease(ctx context.Context, c Conn, token string, ttl time.Duration) (time.Time, error) {
	p := s.connPolicy(c)
	if ttl <= 0 {
		ttl = p.LeaseTTL
	}
	if tokenSlot(token, p.MaxProbes) < 0 {
		return time.Time{}, ErrLeaseNotHeld
	}
	l := c.layout()
	r := newReply(scriptExtend.run(ctx, s.rdb, connKeys(l), s.args(p, l, token, ttl.Milliseconds())...).Result())
	x := r.extendReply()
	if r.err != nil {
		return time.Time{}, unavailable("extend lease", r.err)
	}
	s.scheduled(ctx, c.Tenant, l, len(x.Events), x.Wake)
	if x.Slot < 0 {
		return time.Time{}, ErrLeaseNotHeld
	}
	return time.UnixMilli(x.Expires), nil
}

// flag is a boolean script argument.
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
