package breaker

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPhaseString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		phase Phase
		want  string
	}{
		{"closed", Closed, "closed"},
		{"open", Open, "open"},
		{"half-open", HalfOpen, "half_open"},
		{"unknown", Phase(9), "phase(9)"},
		{"zero", Phase(0), "phase(0)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, tt.phase.String())
		})
	}
}

func TestCauseString(t *testing.T) {
	t.Parallel()
	// Every defined cause has a snake_case name of its own.
	seen := map[string]Cause{}
	for c := CauseNone; c <= CauseForceExpired; c++ {
		name := c.String()
		assert.NotContains(t, name, "cause(", "cause %d has a name", c)
		assert.Equal(t, strings.ToLower(name), name)
		if prev, dup := seen[name]; dup {
			t.Errorf("causes %d and %d share the name %q", prev, c, name)
		}
		seen[name] = c
	}
	assert.Equal(t, "rate_limit", CauseRateLimit.String())
	assert.Equal(t, "force_expired", CauseForceExpired.String())
	assert.Equal(t, "cause(11)", Cause(11).String())
}

func TestOutcomeValid(t *testing.T) {
	t.Parallel()
	for o := range Outcome(12) {
		assert.Equal(t, o >= OutcomeSuccess && o <= OutcomeCanceled, o.Valid(), "outcome %d", o)
	}
}

func TestReasonFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cause Cause
		want  DenyReason
	}{
		{"breaker", CauseBreaker, ReasonOpen},
		{"rate limit", CauseRateLimit, ReasonCooldown},
		{"overload", CauseOverload, ReasonOverloaded},
		{"quota", CauseQuota, ReasonQuota},
		{"auth", CauseAuth, ReasonAuth},
		{"forced", CauseForced, ReasonForcedOpen},
		{"none", CauseNone, ReasonOpen},
		{"open expired", CauseOpenExpired, ReasonOpen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, ReasonFor(tt.cause))
		})
	}
}

func TestLeaseToken(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "42.3.1800000000000.nonce", LeaseToken(42, 3, t0, "nonce"))
}
