package store

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"

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

// Admit decides whether one call to c may go now: one round trip.
func (s *Store) Admit(ctx context.Context, c Conn) (Decision, error) {
	p := s.connPolicy(c)
	l := c.layout()
	r := newReply(scriptAdmit.Run(ctx, s.rdb, connKeys(l, p.MaxProbes), s.args(p, l, s.nonce())...).Result())
	d := Decision{Verdict: breaker.Verdict{
		Decision: breaker.Decision(r.int()), Reason: breaker.DenyReason(r.int()), RetryAfter: r.int(),
		Revision: uint64(r.int()), Phase: breaker.Phase(r.int()),
	}}
	d.LeaseToken = r.str()
	lexp := r.int()
	d.Now = time.UnixMilli(r.int())
	_ = r.int() // changed
	d.LeaseExpired = r.int() == 1
	d.Events = r.events()
	if r.err != nil {
		return Decision{}, unavailable("admit", r.err)
	}
	if d.Decision == breaker.AllowProbe {
		d.LeaseExpires = time.UnixMilli(lexp)
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
}

// Report applies the outcome of one call: one round trip (plus an index
// insert the first time a connection is seen).
func (s *Store) Report(ctx context.Context, c Conn, rep breaker.Report) (ReportResult, error) {
	p := s.connPolicy(c)
	l := c.layout()
	r := newReply(scriptReport.Run(ctx, s.rdb, connKeys(l, p.MaxProbes), s.args(p, l,
		rep.Revision, rep.LeaseToken, int(rep.Outcome), rep.RetryAfter, rep.HTTPStatus, rep.ErrorCode, c.Label, s.jitter())...).Result())
	res := ReportResult{}
	res.Accepted = r.int() == 1
	res.Changed = r.int() == 1
	res.Created = r.int() == 1
	res.Revision = uint64(r.int())
	res.Phase = breaker.Phase(r.int())
	_ = r.int() // now
	res.Events = r.events()
	if r.err != nil {
		return ReportResult{}, unavailable("report", r.err)
	}
	if res.Created {
		if err := s.index(ctx, c); err != nil {
			return ReportResult{}, err
		}
	}
	return res, nil
}

// index adds a new connection to its tenant's index, enforcing the
// tenant's cap: a connection over the cap is removed again.
func (s *Store) index(ctx context.Context, c Conn) error {
	idx := keys.Index(c.Tenant)
	if err := s.rdb.ZAdd(ctx, idx, zmember(c.ID)).Err(); err != nil {
		return unavailable("index", err)
	}
	if s.maxConns <= 0 {
		return nil
	}
	n, err := s.rdb.ZCard(ctx, idx).Result()
	if err != nil {
		return unavailable("index", err)
	}
	if n <= int64(s.maxConns) {
		return nil
	}
	// Expired connections must not count: prune, then count again.
	if err := s.pruneAll(ctx, c.Tenant); err != nil {
		return err
	}
	if n, err = s.rdb.ZCard(ctx, idx).Result(); err != nil {
		return unavailable("index", err)
	}
	if n <= int64(s.maxConns) {
		return nil
	}
	l := c.layout()
	if err := s.rdb.ZRem(ctx, idx, c.ID.String()).Err(); err != nil {
		return unavailable("index", err)
	}
	if err := s.rdb.Del(ctx, l.State()).Err(); err != nil {
		return unavailable("index", err)
	}
	if err := s.rdb.Del(ctx, l.History()).Err(); err != nil {
		return unavailable("index", err)
	}
	return ErrTooManyConnections
}

// ExtendLease moves a live probe lease's expiry to now+ttl (ttl 0: the
// policy's lease TTL). May return [ErrLeaseNotHeld].
func (s *Store) ExtendLease(ctx context.Context, c Conn, token string, ttl time.Duration) (time.Time, error) {
	p := s.connPolicy(c)
	if ttl <= 0 {
		ttl = p.LeaseTTL
	}
	slot := tokenSlot(token, p.MaxProbes)
	if slot < 0 {
		return time.Time{}, ErrLeaseNotHeld
	}
	l := c.layout()
	r := newReply(scriptExtend.Run(ctx, s.rdb, connKeys(l, p.MaxProbes), s.args(p, l, token)...).Result())
	held, now := r.int(), r.int()
	if r.err != nil {
		return time.Time{}, unavailable("extend lease", r.err)
	}
	if held < 0 {
		return time.Time{}, ErrLeaseNotHeld
	}
	// Re-obtaining a redislock lock with its own token refreshes its TTL.
	if _, err := s.locks.Obtain(ctx, l.Lease(slot), ttl, &redislock.Options{Token: token}); err != nil {
		if errors.Is(err, redislock.ErrNotObtained) {
			return time.Time{}, ErrLeaseNotHeld
		}
		return time.Time{}, unavailable("extend lease", err)
	}
	return time.UnixMilli(now).Add(ttl), nil
}
