package client

import (
	"log/slog"
	"strconv"
	"time"
)

// MaxCandidates is the most candidates one [Client.Admit] may name.
const MaxCandidates = 16

// Decision is Admit's answer. The numbers match the wire enum.
type Decision int

// Decisions.
const (
	// DecisionAllow lets the call go.
	DecisionAllow Decision = 1
	// DecisionAllowProbe lets the call go as the recovery probe of a
	// half-open connection; report it with the lease token.
	DecisionAllowProbe Decision = 2
	// DecisionDeny says the call must not go now.
	DecisionDeny Decision = 3
)

var decisionNames = [...]string{"", "allow", "allow_probe", "deny"}

// String returns "allow", "allow_probe" or "deny".
func (d Decision) String() string {
	if d > 0 && int(d) < len(decisionNames) {
		return decisionNames[d]
	}
	return "decision(" + strconv.Itoa(int(d)) + ")"
}

// DenyReason says why a call was denied. The numbers up to
// [ReasonOverloaded] match the wire enum.
type DenyReason int

// Deny reasons.
const (
	// ReasonNone: not denied.
	ReasonNone DenyReason = 0
	// ReasonCooldown: the provider rate-limited the connection; a shared
	// cooldown runs.
	ReasonCooldown DenyReason = 1
	// ReasonOpen: the breaker is open after repeated failures.
	ReasonOpen DenyReason = 2
	// ReasonProbeInFlight: the connection is recovering and its probes are
	// in flight.
	ReasonProbeInFlight DenyReason = 3
	// ReasonQuota: the credential's quota or billing is exhausted.
	ReasonQuota DenyReason = 4
	// ReasonAuth: the provider rejected the credential.
	ReasonAuth DenyReason = 5
	// ReasonForcedOpen: an operator forced the connection open.
	ReasonForcedOpen DenyReason = 6
	// ReasonOverloaded: the provider is overloaded; a cooldown runs.
	ReasonOverloaded DenyReason = 7
	// ReasonUnavailable is client-side only: cooldownd is unreachable and
	// the client fails closed (see [FailClosed]).
	ReasonUnavailable DenyReason = 100
)

var reasonNames = [...]string{
	"none", "cooldown", "open", "probe_in_flight", "quota", "auth", "forced_open", "overloaded",
}

// String returns the reason's snake_case name.
func (r DenyReason) String() string {
	switch {
	case r >= 0 && int(r) < len(reasonNames):
		return reasonNames[r]
	case r == ReasonUnavailable:
		return "unavailable"
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
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
	// Local reports that the in-process breaker decided because cooldownd
	// was unreachable; its report goes to the in-process breaker too.
	Local bool
	// Mirrored reports that the client admitted the call from its mirror
	// of cooldownd's state, without a round trip (see [WithMirror]): the
	// connection was closed and healthy. Its success is reported in a
	// batch; any other outcome goes to cooldownd at once.
	Mirrored bool
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
	if a.Local {
		attrs = append(attrs, slog.Bool("local", true))
	}
	if a.Mirrored {
		attrs = append(attrs, slog.Bool("mirrored", true))
	}
	return slog.GroupValue(attrs...)
}
