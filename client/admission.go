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
// [ReasonOverloaded] match the wire enum; values and names are the
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
