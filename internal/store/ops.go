package store

import (
	"context"
	"time"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
)

// Conn names one connection of one tenant.
type Conn struct {
	Tenant string
	ID     keys.ID
	Label  string
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
}

// Admit decides whether one call to c may go now: one round trip (two
// for a connection that does not exist yet while the tenant has a cap).
// It writes nothing on a healthy connection and never creates one; for a
// connection that could not be created because the tenant is at its cap
// it returns [ErrTooManyConnections], as Report would.
func (s *Store) Admit(ctx context.Context, c Conn) (Decision, error) {
	p := s.connPolicy(c)
	l := c.layout()
	// ADMIT_REPLY in admit.lua.
	r := newReply(scriptAdmit.Run(ctx, s.rdb, connKeys(l), s.args(p, l, s.nonce())...).Result())
	d := Decision{Verdict: breaker.Verdict{
		Decision: breaker.Decision(r.int()), Reason: breaker.DenyReason(r.int()), RetryAfter: r.int(),
		Revision: uint64(r.int()), Phase: breaker.Phase(r.int()),
	}}
	d.LeaseToken = r.str()
	lexp := r.int()
	d.Now = time.UnixMilli(r.int())
	d.LeaseExpired = r.int() == 1
	exists := r.int() == 1
	wake := r.int()
	d.Events = r.events()
	if r.err != nil {
		return Decision{}, unavailable("admit", r.err)
	}
	if d.Decision == breaker.AllowProbe {
		d.LeaseExpires = time.UnixMilli(lexp)
	}
	s.scheduled(ctx, c.Tenant, l, len(d.Events), wake)
	if !exists && s.maxConns > 0 {
		if err := s.mayExist(ctx, c); err != nil {
			return Decision{}, err
		}
	}
	return d, nil
}

// AdmitFirst admits the first candidate that may go, in order. It returns
// the chosen index (or, when all are denied, the one available soonest)
// and the decisions of the candidates it examined. One candidate costs one
// round trip; it stops at the first admitted one.
func (s *Store) AdmitFirst(ctx context.Context, cands []Conn) (int, []Decision, error) {
	out := make([]Decision, 0, len(cands))
	best := 0
	for i, c := range cands {
		d, err := s.Admit(ctx, c)
		if err != nil {
			return 0, out, err
		}
		out = append(out, d)
		if d.Decision != breaker.Deny {
			return i, out, nil
		}
		if d.RetryAfter < out[best].RetryAfter {
			best = i
		}
	}
	return best, out, nil
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
}

// Report applies the outcome of one call: one round trip. A connection's
// first report registers it in its tenant's index first (within the cap;
// see [Store.create]), so a connection that exists is always listed and
// counted. May return [ErrTooManyConnections].
func (s *Store) Report(ctx context.Context, c Conn, rep breaker.Report) (ReportResult, error) {
	p := s.connPolicy(c)
	l := c.layout()
	res := ReportResult{}
	var wake int64
	sc, release := s.durableConn(ctx, l, rep) // s.rdb unless Options.Durability
	defer release()
	err := s.create(ctx, c, func(registeredAt int64) (int64, error) {
		r := newReply(scriptReport.Run(ctx, sc, connKeys(l), s.args(p, l,
			rep.Revision, rep.LeaseToken, int(rep.Outcome), rep.RetryAfter, rep.HTTPStatus, rep.ErrorCode, c.Label, s.jitter(),
			registeredAt, registerGrace.Milliseconds(), max(rep.Count, 1))...).Result())
		// REPORT_REPLY in report.lua.
		status := r.int()
		res.Accepted = r.int() == 1
		res.Changed = r.int() == 1
		res.Created = r.int() == 1
		res.Revision = uint64(r.int())
		res.Phase = breaker.Phase(r.int())
		res.Now = time.UnixMilli(r.int())
		wake = r.int()
		res.Events = r.events()
		if r.err != nil {
			return 0, unavailable("report", r.err)
		}
		return status, nil
	})
	if err == nil {
		err = s.awaitReplicas(ctx, sc, res.Events)
	}
	if err != nil {
		return ReportResult{}, err
	}
	s.scheduled(ctx, c.Tenant, l, len(res.Events), wake)
	return res, nil
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
	r := newReply(scriptExtend.Run(ctx, s.rdb, connKeys(l), s.args(p, l, token, ttl.Milliseconds())...).Result())
	// EXTEND_REPLY in extend.lua.
	slot, expires := r.int(), r.int()
	_ = r.int() // now
	wake := r.int()
	evs := r.events()
	if r.err != nil {
		return time.Time{}, unavailable("extend lease", r.err)
	}
	s.scheduled(ctx, c.Tenant, l, len(evs), wake)
	if slot < 0 {
		return time.Time{}, ErrLeaseNotHeld
	}
	return time.UnixMilli(expires), nil
}
