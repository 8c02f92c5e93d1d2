package breaker

import "strconv"

// Phase is a connection's breaker state. The numbers match the wire enum.
type Phase uint8

// Phases.
const (
	Closed   Phase = 1
	Open     Phase = 2
	HalfOpen Phase = 3
)

var phaseNames = [...]string{"", "closed", "open", "half_open"}

// String returns "closed", "open" or "half_open".
func (p Phase) String() string { return name(phaseNames[:], p, "phase") }

// Cause is why a connection is open, or what caused its last transition.
// The numbers match the wire enum.
type Cause uint8

// Causes.
const (
	CauseNone         Cause = 0
	CauseBreaker      Cause = 1
	CauseRateLimit    Cause = 2
	CauseOverload     Cause = 3
	CauseQuota        Cause = 4
	CauseAuth         Cause = 5
	CauseForced       Cause = 6
	CauseReset        Cause = 7
	CauseProbeSuccess Cause = 8
	CauseOpenExpired  Cause = 9
	CauseForceExpired Cause = 10
	// CauseOverrideCleared: an operator cleared an override.
	CauseOverrideCleared Cause = 11
)

var causeNames = [...]string{"none", "breaker", "rate_limit", "overload", "quota", "auth", "forced", "reset", "probe_success", "open_expired", "force_expired", "override_cleared"}

// String returns the cause's snake_case name.
func (c Cause) String() string { return name(causeNames[:], c, "cause") }

// Outcome is what one provider call amounted to. The numbers match the wire
// enum.
type Outcome uint8

// Outcomes.
const (
	OutcomeSuccess          Outcome = 1
	OutcomeTransientFailure Outcome = 2
	OutcomeRateLimited      Outcome = 3
	OutcomeOverloaded       Outcome = 4
	OutcomeQuotaExhausted   Outcome = 5
	OutcomeAuthFailure      Outcome = 6
	OutcomeClientError      Outcome = 7
	OutcomeCanceled         Outcome = 8
)

var outcomeNames = [...]string{
	"unspecified", "success", "transient_failure", "rate_limited", "overloaded",
	"quota_exhausted", "auth_failure", "client_error", "canceled",
}

// String returns the outcome's snake_case name; the zero value, which no
// report may carry, is "unspecified" as on the wire.
func (o Outcome) String() string { return name(outcomeNames[:], o, "outcome") }

// Valid reports whether o is one of the defined outcomes.
func (o Outcome) Valid() bool { return o >= OutcomeSuccess && o <= OutcomeCanceled }

// Decision is Admit's answer. The numbers match the wire enum.
type Decision uint8

// Decisions.
const (
	Allow      Decision = 1
	AllowProbe Decision = 2
	Deny       Decision = 3
)

var decisionNames = [...]string{"", "allow", "allow_probe", "deny"}

// String returns "allow", "allow_probe" or "deny".
func (d Decision) String() string { return name(decisionNames[:], d, "decision") }

// DenyReason says why a call was denied. The numbers match the wire enum.
type DenyReason uint8

// Deny reasons.
const (
	ReasonNone          DenyReason = 0
	ReasonCooldown      DenyReason = 1
	ReasonOpen          DenyReason = 2
	ReasonProbeInFlight DenyReason = 3
	ReasonQuota         DenyReason = 4
	ReasonAuth          DenyReason = 5
	ReasonForcedOpen    DenyReason = 6
	ReasonOverloaded    DenyReason = 7
	// ReasonRetryBudget: a retry over the fleet's retry budget.
	ReasonRetryBudget DenyReason = 8
	// ReasonThrottled: the adaptive throttle rejected the call.
	ReasonThrottled DenyReason = 9
)

var reasonNames = [...]string{"none", "cooldown", "open", "probe_in_flight", "quota", "auth", "forced_open", "overloaded",
	"retry_budget", "throttled"}

// String returns the reason's snake_case name ("none" when not denied).
func (r DenyReason) String() string { return name(reasonNames[:], r, "reason") }

// ReasonFor maps the cause of an open state to the reason Admit gives.
func ReasonFor(c Cause) DenyReason {
	switch c {
	case CauseRateLimit:
		return ReasonCooldown
	case CauseOverload:
		return ReasonOverloaded
	case CauseQuota:
		return ReasonQuota
	case CauseAuth:
		return ReasonAuth
	case CauseForced:
		return ReasonForcedOpen
	}
	return ReasonOpen
}

// Override is an operator's forced state. The numbers match the wire enum.
type Override uint8

// Overrides.
const (
	NoOverride   Override = 0
	ForcedOpen   Override = 1
	ForcedClosed Override = 2
)

var overrideNames = [...]string{"none", "forced_open", "forced_closed"}

// String returns "none", "forced_open" or "forced_closed".
func (o Override) String() string { return name(overrideNames[:], o, "override") }

// name returns the name of v in names, or kind(N) for a value without one.
// Each enum's names table is its one definition: the client, the metrics
// labels and the logs all read it through String.
func name[T ~uint8](names []string, v T, kind string) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return kind + "(" + strconv.Itoa(int(v)) + ")"
}
