package client

import (
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// MaxCandidates is the most candidates one [Client.Admit] may name.
const MaxCandidates = 16

// Decision is Admit's answer. The numbers match the wire enum; values and
// names are the breaker's (internal/breaker), the one definition the
// server, its metrics and the in-process fallback share.
type Decision int

// Decisions.
const (
	// DecisionAllow lets the call go.
	DecisionAllow = Decision(breaker.Allow)
	// DecisionAllowProbe lets the call go as the recovery probe of a
	// half-open connection; report it with the lease token.
	DecisionAllowProbe = Decision(breaker.AllowProbe)
	// DecisionDeny says the call must not go now.
	DecisionDeny = Decision(breaker.Deny)
)

// String returns "allow", "allow_probe" or "deny".
func (d Decision) String() string { return breakerName[breaker.Decision](int(d), "decision") }

// DenyReason says why a call was denied. The numbers up to
// [ReasonThrottled] match the wire enum; values and names are the
// breaker's, as for [Decision].
type DenyReason int

// Deny reasons.
const (
	// ReasonNone: not denied.
	ReasonNone = DenyReason(breaker.ReasonNone)
	// ReasonCooldown: the provider rate-limited the connection; a shared
	// cooldown runs.
	ReasonCooldown = DenyReason(breaker.ReasonCooldown)
	// ReasonOpen: the breaker is open after repeated failures.
	ReasonOpen = DenyReason(breaker.ReasonOpen)
	// ReasonProbeInFlight: the connection is recovering and its probes are
	// in flight.
	ReasonProbeInFlight = DenyReason(breaker.ReasonProbeInFlight)
	// ReasonQuota: the credential's quota or billing is exhausted.
	ReasonQuota = DenyReason(breaker.ReasonQuota)
	// ReasonAuth: the provider rejected the credential.
	ReasonAuth = DenyReason(breaker.ReasonAuth)
	// ReasonForcedOpen: an operator forced the connection open.
	ReasonForcedOpen = DenyReason(breaker.ReasonForcedOpen)
	// ReasonOverloaded: the provider is overloaded; a cooldown runs.
	ReasonOverloaded = DenyReason(breaker.ReasonOverloaded)
	// ReasonRetryBudget: the call is a retry on the connection and the
	// fleet's retries there are over the connection's retry budget (a share
	// of the fleet's first attempts). Fall back to another connection, or
	// give up: waiting for it spends the budget others need. The guards do
	// not wait for it.
	ReasonRetryBudget = DenyReason(breaker.ReasonRetryBudget)
	// ReasonThrottled: the connection's adaptive throttle rejected this
	// call (the fleet's calls there fail too often; a share of them is
	// rejected at random). Another call may go at once: it is not a wait
	// for the connection. The guards fall back or give up, without
	// waiting.
	ReasonThrottled = DenyReason(breaker.ReasonThrottled)
	// ReasonUnavailable is client-side only: cooldownd is unreachable and
	// the client fails closed (see [FailClosed]).
	ReasonUnavailable DenyReason = 100
)

// String returns the reason's snake_case name.
func (r DenyReason) String() string {
	if r == ReasonUnavailable {
		return "unavailable"
	}
	return breakerName[breaker.DenyReason](int(r), "reason")
}

// breakerName returns the breaker's name of v, or kind(N) for a value the
// breaker's enum B cannot hold.
func breakerName[B interface {
	~uint8
	String() string
}](v int, kind string) string {
	if v < 0 || v > math.MaxUint8 {
		return kind + "(" + strconv.Itoa(v) + ")"
	}
	return B(v).String()
}

// Admission is the answer of [Client.Admit].
type Admission struct {
	// Index is the position among the candidates of the chosen candidate
	// or, on a denial, of the one that may be available soonest.
	Index int
	// Conn is the candidate at Index.
	Conn Conn
	// Decision is the answer.
	Decision Decision
	// Revision is the connection's revision; [Client.Report] sends it back.
	Revision uint64
	// LeaseToken is set on [DecisionAllowProbe]; [Client.Report] sends it
	// back, which releases the probe lease.
	LeaseToken string
	// LeaseExpires is when the probe lease lapses unless extended with
	// [Client.ExtendLease] (zero unless a probe).
	LeaseExpires time.Time
	// RetryAfter is, on a denial, how long until a candidate may be
	// available.
	RetryAfter time.Duration
	// Reason is why the candidate at Index was denied.
	Reason DenyReason
	// Retry reports that the call was already sent to Conn (see
	// [Attempt.Sent]): on that connection it is a retry, charged to its
	// fleet retry budget. [Client.Report] sends it back, so that only first
	// attempts count as the budget's base.
	Retry bool
	// Shadowed is, on an allowed call, why the connection's policy would
	// have denied it: the policy is in shadow mode (computed and published,
	// not enforced). The call may go; ReasonNone when not shadowed.
	Shadowed DenyReason
	// ShadowRetryAfter is, with Shadowed, the wait the policy would have
	// given.
	ShadowRetryAfter time.Duration
	// Local reports that the in-process breaker decided because cooldownd
	// was unreachable; its report goes to the in-process breaker too.
	Local bool
	// Mirrored reports that the client admitted the call from its mirror
	// of cooldownd's state, without a round trip (see [WithMirror]): the
	// connection was closed and healthy. Its success is reported in a
	// batch; any other outcome goes to cooldownd at once.
	Mirrored bool
	// NotReplicated reports that cooldownd applied what this Admit wrote
	// (the probe lease granted, a timed transition) on a Redis master with
	// too few replicas: a failover before they catch up may lose it. The
	// decision stands (a probe is the caller's probe); it is neither an
	// outage nor a reason to ask again (AdmitResponse.durability).
	NotReplicated bool
}

// Allowed reports whether the call may go (an allow or a probe).
func (a Admission) Allowed() bool {
	return a.Decision == DecisionAllow || a.Decision == DecisionAllowProbe
}

// LogValue implements [slog.LogValuer]. It leaves out the lease token.
func (a Admission) LogValue() slog.Value {
	attrs := []slog.Attr{slog.Any("conn", a.Conn), slog.String("decision", a.Decision.String())}
	if a.Decision == DecisionDeny {
		attrs = append(attrs, slog.String("reason", a.Reason.String()), slog.Duration("retry_after", a.RetryAfter))
	}
	if a.Shadowed != ReasonNone {
		attrs = append(attrs, slog.String("shadowed", a.Shadowed.String()))
	}
	if a.Retry {
		attrs = append(attrs, slog.Bool("retry", true))
	}
	if a.Local {
		attrs = append(attrs, slog.Bool("local", true))
	}
	if a.Mirrored {
		attrs = append(attrs, slog.Bool("mirrored", true))
	}
	return slog.GroupValue(attrs...)
}

// Attempt is one call to admit with [Client.AdmitAttempt]: its candidates,
// and the connections it was already sent to.
type Attempt struct {
	// Candidates in order of preference: the primary first (1 to
	// [MaxCandidates]).
	Candidates []Conn
	// Sent are the connections this call was already sent to (by an
	// earlier attempt that failed). On those the call is a retry, charged
	// to the connection's fleet retry budget; on every other candidate (a
	// fallback not tried yet) it is a first attempt. Connections that are
	// not candidates are ignored.
	Sent []Conn
}

// retries returns, per candidate, whether the call was sent to it.
func (a Attempt) retries() []bool {
	if len(a.Sent) == 0 {
		return nil
	}
	out := make([]bool, len(a.Candidates))
	found := false
	for i, c := range a.Candidates {
		for _, s := range a.Sent {
			if s.id == c.id {
				out[i], found = true, true
				break
			}
		}
	}
	if !found {
		return nil
	}
	return out
}
