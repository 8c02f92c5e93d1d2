package client

import (
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// local is the in-process fallback: one breaker state per connection, run
// with the client's local policy for the calls cooldownd does not decide.
// It is safe for concurrent use.
type local struct {
	policy   breaker.Policy
	reporter string
	log      *slog.Logger

	capLogged atomic.Bool

	mu     sync.Mutex
	states map[ID]*breaker.State
	words  map[ID]lastWord // cooldownd's denials still in force
}

// newLocal returns the fallback for cfg's local policy. The retry budget
// and the adaptive throttle apply to this process's own calls; the trip
// quorum does not, since one process is one reporter: it would never trip
// on transient failures at all.
func newLocal(cfg config, log *slog.Logger) *local {
	p := cfg.policy
	p.TripQuorum = 0
	return &local{policy: p, reporter: cfg.reporter, log: log, states: make(map[ID]*breaker.State), words: make(map[ID]lastWord)}
}

// capped records that cooldownd refused a new connection because the
// tenant's connection cap is reached; it is logged once per client.
func (l *local) capped(err error) {
	if l.capLogged.CompareAndSwap(false, true) {
		l.log.Warn("cooldownd cannot track more connections of this tenant; their outcomes are not shared",
			slog.String("code", connect.CodeOf(err).String()))
	}
}

// forget drops the local states: cooldownd is the truth again.
func (l *local) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.states)
}

// maxLocalStates is how many connections the local breaker keeps before
// it drops the quiet ones.
const maxLocalStates = 4096

// state returns the state of id, creating it. l.mu must be held.
func (l *local) state(id ID) *breaker.State {
	s := l.states[id]
	if s != nil {
		return s
	}
	if len(l.states) >= maxLocalStates {
		for k, st := range l.states {
			if st.Phase != breaker.Open && st.Phase != breaker.HalfOpen && st.Consecutive == 0 {
				delete(l.states, k)
			}
		}
	}
	s = new(breaker.State)
	l.states[id] = s
	return s
}

// admit decides with the in-process breakers: the first candidate that may
// go, else a denial for the one available soonest. A candidate cooldownd
// last denied is denied until that denial runs out. retry[i] marks the
// candidates the call was already sent to: the local retry budget charges
// them, and the adaptive throttle draws for every candidate.
func (l *local) admit(now time.Time, cands []Conn, retry []bool) Admission {
	l.mu.Lock()
	defer l.mu.Unlock()
	nowMs := now.UnixMilli()
	var best Admission
	for i, c := range cands {
		r := isRetry(retry, i)
		if w, ok := l.word(c.id, nowMs, r); ok {
			a := Admission{Index: i, Conn: c, Decision: DecisionDeny, Local: true, Retry: r,
				Reason: w.reason, RetryAfter: time.Duration(w.until-nowMs) * time.Millisecond}
			if i == 0 || a.RetryAfter < best.RetryAfter {
				best = a
			}
			continue
		}
		v, _ := l.state(c.id).Admit(l.policy, nowMs, breaker.Attempt{Nonce: nonce(), Retry: r, Draw: mrand.Float64()})
		a := Admission{Index: i, Conn: c, Decision: Decision(v.Decision), Revision: v.Revision, Local: true, Retry: r,
			Shadowed: DenyReason(v.Shadowed), ShadowRetryAfter: time.Duration(max(v.ShadowRetryAfter, 0)) * time.Millisecond}
		switch v.Decision {
		case breaker.AllowProbe:
			a.LeaseToken, a.LeaseExpires = v.Lease.Token, time.UnixMilli(v.Lease.Expires)
			return a
		case breaker.Allow:
			return a
		}
		a.Reason, a.RetryAfter = DenyReason(v.Reason), time.Duration(max(v.RetryAfter, 0))*time.Millisecond
		if i == 0 || a.RetryAfter < best.RetryAfter {
			best = a
		}
	}
	return best
}

// localResult is what a report did to a connection.
type localResult struct {
	open bool // the connection is open after the report
}

// report applies an outcome to the in-process breaker of a.Conn. With
// fresh set (a call admitted by cooldownd, reported while it is
// unreachable) the report counts as current.
func (l *local) report(now time.Time, a Admission, cl Classification, fresh bool) localResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.state(a.Conn.id)
	rev := a.Revision
	if fresh {
		rev = s.Revision
	}
	s.Report(l.policy, now.UnixMilli(), breaker.Report{
		Revision: rev, LeaseToken: a.LeaseToken, Outcome: breaker.Outcome(cl.Outcome),
		RetryAfter: reportDelay(cl).Milliseconds(), HTTPStatus: cl.HTTPStatus, ErrorCode: cl.ErrorCode,
		Retry: a.Retry, Reporter: l.reporter,
	}, mrand.Float64())
	return localResult{open: s.Phase == breaker.Open}
}

// extend extends a local probe lease.
func (l *local) extend(now time.Time, a Admission, ttl time.Duration) (time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// The policy's LeaseTTL for 0, cut to its LeaseTTLMax, as cooldownd's.
	lease, _, err := l.state(a.Conn.id).ExtendLease(now.UnixMilli(), a.LeaseToken, l.policy.LeaseExtension(ttl.Milliseconds()))
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(lease.Expires), nil
}

// maxReportDelay is the longest delay a report carries; cooldownd rejects
// longer ones.
const maxReportDelay = MaxHint

// reportDelay is the delay a report carries: the server's Retry-After on a
// failure, or the proactive cooldown of a success, at most a day.
func reportDelay(cl Classification) time.Duration {
	return min(max(cl.RetryAfter, cl.Proactive), maxReportDelay)
}

// nonce returns a random lease-token nonce.
func nonce() string {
	var b [9]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:])
}
