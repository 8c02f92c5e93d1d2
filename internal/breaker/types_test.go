package breaker

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

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

func TestEnumNames(t *testing.T) {
	t.Parallel()
	// Each enum's defined values have distinct snake_case names (the
	// metrics labels and the client's String read them); any other value
	// prints as kind(N).
	tests := []struct {
		kind    string
		names   []string // the names of the defined values, in order
		name    func(v uint8) string
		first   uint8 // the first defined value
		unknown uint8 // a value past the last
	}{
		{"phase", []string{"closed", "open", "half_open"}, func(v uint8) string { return Phase(v).String() }, 1, 4},
		{"cause", []string{"none", "breaker", "rate_limit", "overload", "quota", "auth", "forced", "reset", "probe_success",
			"open_expired", "force_expired", "override_cleared"}, func(v uint8) string { return Cause(v).String() }, 0, 12},
		{"outcome", []string{"unspecified", "success", "transient_failure", "rate_limited", "overloaded", "quota_exhausted",
			"auth_failure", "client_error", "canceled"}, func(v uint8) string { return Outcome(v).String() }, 0, 9},
		{"decision", []string{"allow", "allow_probe", "deny"}, func(v uint8) string { return Decision(v).String() }, 1, 4},
		{"reason", []string{"none", "cooldown", "open", "probe_in_flight", "quota", "auth", "forced_open", "overloaded",
			"retry_budget", "throttled"}, func(v uint8) string { return DenyReason(v).String() }, 0, 10},
		{"override", []string{"none", "forced_open", "forced_closed"}, func(v uint8) string { return Override(v).String() }, 0, 3},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			t.Parallel()
			seen := map[string]bool{}
			for i, want := range tt.names {
				got := tt.name(tt.first + uint8(i))
				assert.Equal(t, want, got)
				assert.Equal(t, strings.ToLower(got), got)
				assert.False(t, seen[got], "%s is used twice", got)
				seen[got] = true
			}
			if tt.first > 0 {
				assert.Equal(t, tt.kind+"(0)", tt.name(0))
			}
			assert.Equal(t, tt.kind+"("+strconv.Itoa(int(tt.unknown))+")", tt.name(tt.unknown))
			assert.Equal(t, tt.kind+"(255)", tt.name(255))
		})
	}
}

func TestEnumConstants(t *testing.T) {
	t.Parallel()
	// The constants and their names agree (a renumbering shows here).
	assert.Equal(t, "half_open", HalfOpen.String())
	assert.Equal(t, "force_expired", CauseForceExpired.String())
	assert.Equal(t, "canceled", OutcomeCanceled.String())
	assert.Equal(t, "client_error", OutcomeClientError.String())
	assert.Equal(t, "deny", Deny.String())
	assert.Equal(t, "overloaded", ReasonOverloaded.String())
	assert.Equal(t, "forced_closed", ForcedClosed.String())
	assert.Equal(t, "none", NoOverride.String())
}
