package breaker

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDecisionAndReasonNames(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "allow", Allow.String())
	assert.Equal(t, "allow_probe", AllowProbe.String())
	assert.Equal(t, "deny", Deny.String())
	assert.Equal(t, "decision(9)", Decision(9).String())
	assert.Equal(t, "probe_in_flight", ReasonProbeInFlight.String())
	assert.Equal(t, "overloaded", ReasonOverloaded.String())
	assert.Equal(t, "reason(42)", DenyReason(42).String())
}

func TestFailureRateBelowOneBasisPointIsRejected(t *testing.T) {
	t.Parallel()
	p := DefaultPolicy()
	p.FailureRate = 0.00004
	assert.ErrorIs(t, p.Validate(), ErrInvalidPolicy)
	p.FailureRate = 0.0001
	assert.NoError(t, p.Validate())
}
