package harness

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// TestLocalPolicyIsTheReplicasPolicy: the workers' in-process breakers run
// with the replicas' policy, every knob of it except the trip quorum,
// which client.Policy leaves to cooldownd.
func TestLocalPolicyIsTheReplicasPolicy(t *testing.T) {
	t.Parallel()
	p := DefaultPolicy()
	p.Shadow, p.ThrottleK, p.TripQuorum, p.RetryBudgetMin = true, 2, 3, 7
	lp, err := LocalPolicy(p)
	require.NoError(t, err)
	assert.Equal(t, p.ConsecutiveFailures, lp.ConsecutiveFailures)
	assert.Equal(t, p.OpenBase, lp.OpenBase)
	assert.Equal(t, p.LeaseTTL, lp.LeaseTTL)
	assert.True(t, lp.Shadow)
	assert.InDelta(t, 2.0, lp.ThrottleK, 0)
	assert.Equal(t, 7, lp.RetryBudgetMin)

	// Back through the knobs: only the trip quorum is lost.
	back := breaker.Policy{
		ConsecutiveFailures: lp.ConsecutiveFailures, FailureRate: lp.FailureRate, MinCalls: lp.MinCalls, Window: lp.Window,
		OpenBase: lp.OpenBase, OpenMax: lp.OpenMax, Jitter: lp.Jitter, RateLimitCooldown: lp.RateLimitCooldown,
		OverloadFloor: lp.OverloadFloor, QuotaBlock: lp.QuotaBlock, AuthBlock: lp.AuthBlock, MaxProbes: lp.MaxProbes,
		LeaseTTL: lp.LeaseTTL, RetryBudget: lp.RetryBudget, RetryBudgetMin: lp.RetryBudgetMin, ThrottleK: lp.ThrottleK,
		FleetWindow: lp.FleetWindow, Shadow: lp.Shadow, LeaseTTLMax: lp.LeaseTTLMax,
	}
	for _, k := range breaker.Knobs() {
		if k.Name == "trip-quorum" {
			continue
		}
		assert.Equal(t, k.Get(p), k.Get(back), "%s reaches the workers", k.Name)
	}
}
