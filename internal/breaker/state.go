package breaker

import (
	"errors"
	"slices"
	"strconv"
)

// ErrLeaseNotHeld is returned when a lease token names no live lease.
var ErrLeaseNotHeld = errors.New("breaker: lease not held")

// Lease is one probe lease of a half-open connection.
type Lease struct {
	// Slot is the lease's slot, 0 to MaxProbes-1.
	Slot int
	// Token identifies the lease: "<revision>.<slot>.<granted ms>.<nonce>".
	Token string
	// Granted is when it was granted (Unix ms).
	Granted int64
	// Expires is when it lapses unless extended (Unix ms).
	Expires int64
}

// Window is the failure-rate rule's sliding window: two aligned buckets of
// Policy.Window, the previous one weighted by how much of it still overlaps.
type Window struct {
	Start     int64 // start of the current bucket (Unix ms), 0 when empty
	PrevCalls int64
	PrevFails int64
	CurCalls  int64
	CurFails  int64
}

// State is one connection's breaker state. The zero value is a connection
// never seen: closed at revision 0. State is not safe for concurrent use;
// the store serialises access.
type State struct {
	Phase         Phase
	Cause         Cause
	Revision      uint64
	OpenUntil     int64 // Unix ms; 0 when not open or open until changed
	Reopens       int
	Consecutive   int
	Window        Window
	Override      Override
	OverrideUntil int64 // Unix ms; 0 means until changed
	Leases        []Lease
	Successes     int64 // since the last transition
	Failures      int64 // since the last transition
	LastStatus    int
	LastOutcome   Outcome
	LastErrorCode string
	ChangedAt     int64
	UpdatedAt     int64
	// Fleet holds the fleet rules' counts; Reporters the trip quorum's
	// recent reporters of ambiguous failures, oldest first.
	Fleet     Fleet
	Reporters []Reporter
}

// Event is one state change.
type Event struct {
	At       int64 // Unix ms
	From, To Phase
	Cause    Cause
	Revision uint64
	Actor    string
	Reason   string
}

// Verdict is Admit's answer for one connection.
type Verdict struct {
	Decision   Decision
	Reason     DenyReason
	RetryAfter int64 // ms; on Deny
	Revision   uint64
	Phase      Phase
	Lease      *Lease // on AllowProbe
	// Shadowed is why a policy in shadow mode would have denied the call
	// that Decision allows (ReasonNone otherwise), and ShadowRetryAfter
	// the wait it would have given (ms).
	Shadowed         DenyReason
	ShadowRetryAfter int64
}

// Report is the outcome of one admitted call.
type Report struct {
	Revision   uint64
	LeaseToken string
	Outcome    Outcome
	RetryAfter int64 // ms, 0 when none
	HTTPStatus int
	ErrorCode  string
	// Count is how many successes admitted under Revision this report
	// stands for (a client's batch); 0 means one. Only for OutcomeSuccess.
	Count int64
	// Retry says the call was a retry on this connection: only first
	// attempts are the retry budget's base.
	Retry bool
	// Reporter is the reporting process, for the trip quorum; reports
	// without one count as one reporter together.
	Reporter string
}

// ReportResult says what a report did.
type ReportResult struct {
	Accepted bool // it carried the current revision or a live lease
	Changed  bool // it changed the state
}

// LeaseToken formats a lease token.
func LeaseToken(rev uint64, slot int, granted int64, nonce string) string {
	return strconv.FormatUint(rev, 10) + "." + strconv.Itoa(slot) + "." + strconv.FormatInt(granted, 10) + "." + nonce
}

func (s *State) phase() Phase {
	if s.Phase == 0 {
		return Closed
	}
	return s.Phase
}

// transition moves to phase to at time at, bumps the revision, drops every
// lease and returns the event.
//
// A connection's first transition takes at (Unix ms) as its revision, and
// each later one adds one: a connection that expired idle and comes back
// starts above every revision of its previous life (which would have
// needed more transitions than milliseconds passed to reach it), so a
// report held across that gap cannot match the new life.
func (s *State) transition(at int64, to Phase, cause Cause, actor, reason string) Event {
	s.Revision = nextRevision(s.Revision, at)
	ev := Event{At: at, From: s.phase(), To: to, Cause: cause, Revision: s.Revision, Actor: actor, Reason: reason}
	s.Phase = to
	s.Cause = cause
	s.ChangedAt = at
	s.Successes, s.Failures = 0, 0
	s.Leases = nil
	if to != Open {
		s.OpenUntil = 0
	}
	return ev
}

// nextRevision is the revision of a transition at time at after rev.
func nextRevision(rev uint64, at int64) uint64 {
	if rev == 0 && at > 0 {
		return uint64(at)
	}
	return rev + 1
}

func (s *State) resetCounts() {
	s.Consecutive = 0
	s.Window = Window{}
	s.Reporters = nil
}

// Settle applies what time alone does: expired leases lapse, an expired
// override ends, an ended open period turns half-open. Each timed
// transition is stamped with the instant it became due (the override's or
// the open's end), not with now, so that whoever applies it — an Admit, a
// reader or the store's sweeper — records the same event. Admit, Report,
// Force and ExtendLease settle first.
func (s *State) Settle(now int64) []Event {
	lapsed := func(l Lease) bool { return l.Expires <= now }
	if slices.ContainsFunc(s.Leases, lapsed) {
		// Filter a clone, never in place: s may be a reader's shallow copy
		// whose Leases share their array with the original.
		s.Leases = slices.DeleteFunc(slices.Clone(s.Leases), lapsed)
	}
	var evs []Event
	if s.Override != NoOverride && s.OverrideUntil > 0 && now >= s.OverrideUntil {
		forced, at := s.Override, s.OverrideUntil
		s.Override, s.OverrideUntil = NoOverride, 0
		if forced == ForcedOpen {
			evs = append(evs, s.transition(at, HalfOpen, CauseForceExpired, "", ""))
		} else {
			s.resetCounts()
			evs = append(evs, s.transition(at, Closed, CauseForceExpired, "", ""))
		}
	}
	if s.Override == NoOverride && s.phase() == Open && now >= s.OpenUntil {
		evs = append(evs, s.transition(s.OpenUntil, HalfOpen, CauseOpenExpired, "", ""))
	}
	return evs
}
