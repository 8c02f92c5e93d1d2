//go:build integration

package test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/test/storm/harness"
	"github.com/cooldownd/cooldownd/test/storm/worker"
)

// TestStorm runs the short outage storm with cooldownd — a real
// redis-server, 3 cooldownd replicas, 8 client processes of 3 goroutines
// and a fake provider, all separate processes on loopback — and checks
// every coordination property from the provider's own log of arrivals
// (docs/storm.md): at most max_probes probes in flight, no request while
// every replica says open, none before a Retry-After expires, every
// process back within the recovery bound after the heal, an instant
// fallback with no missed deadline, and a killed probe holder's lease
// expiring before another process probes. The fleet rules' scenarios
// (issue 18) check their rule: retries within the fleet's retry budget, the
// provider's load within the throttle's bound, one broken process opening
// the connection for no one under a trip quorum (and for everyone without
// it), and a shadow policy denying nothing while it publishes its opens.
func TestStorm(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		redistest.Missing(t, "redis-server")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	dir := t.TempDir()
	stormBin, err := harness.Build(ctx, dir, "github.com/cooldownd/cooldownd/test/storm")
	require.NoError(t, err)
	cdBin, err := harness.Build(ctx, dir, "github.com/cooldownd/cooldownd/cmd/cooldownd")
	require.NoError(t, err)
	rs := redistest.StartServer(t)

	timing := harness.ShortTiming()
	h, err := harness.Start(ctx, harness.Options{
		StormBin: stormBin, CooldowndBin: cdBin, RedisAddr: rs.Addr,
		K: 3, P: 8, G: 3, Policy: harness.DefaultPolicy(), Timing: timing, Dir: dir, Logf: t.Logf,
	})
	require.NoError(t, err)
	t.Cleanup(h.Close) // before Redis stops and the directory goes

	for _, sc := range harness.Scenarios(timing) {
		t.Run(sc.Name, func(t *testing.T) {
			if !sc.Runs(worker.Cooldownd) {
				t.Skipf("%s does not run with cooldownd", sc.Name)
			}
			r, err := h.Run(ctx, sc, worker.Cooldownd)
			require.NoError(t, err)
			m := r.Metrics()
			t.Logf("%s: %d requests reached the failing provider (%d after its first failure, %d probes), recovery %s, %d/%d user calls failed, p99 added %s, %d local admissions, %d poll rounds",
				sc.Name, m.Reached, m.AfterFirst, m.Probes, m.Recovery, m.Failed, m.Calls, m.P99Added, m.Local, r.Polls)
			if s := r.RuleSummary(); s != "" {
				t.Log(s)
			}
			for _, v := range harness.Check(r) {
				t.Errorf("property %s", v)
			}
			// The scenario must have exercised what it is about.
			assert.Positive(t, m.Reached, "the provider failed requests")
			assert.Positive(t, m.Calls, "the workers made calls")
			if sc.Heals {
				assert.True(t, m.Recovered, "every process recovered")
			}
			if sc.Kill {
				assert.NotNil(t, r.Kill, "a probe holder was killed")
			}
			if sc.Rule != "" {
				checkRule(ctx, t, h, sc, r)
				return
			}
			if sc.Heals {
				assert.Positive(t, m.Probes, "the fleet probed the failing provider")
			}
			open := 0
			for _, ivs := range r.Open {
				open += len(ivs)
			}
			assert.Positive(t, open, "the replicas were seen to agree the connection was open")
		})
	}
}

// checkRule asserts that a fleet rule's scenario exercised its rule, and,
// for the retry budget and the throttle, that the same fleet without
// coordination breaks the property the cooldownd run kept: the check is
// live.
func checkRule(ctx context.Context, t *testing.T, h *harness.Harness, sc harness.Scenario, r *harness.Result) {
	t.Helper()
	reporters := make(map[string]int)
	retryAdmits, shadowed := 0, 0
	for i, w := range r.Workers {
		if !assert.NotNil(t, w, "worker %d's result", i) {
			continue
		}
		assert.Len(t, w.Wire.Reporters, 1, "worker %d's client sends one reporter id", i)
		for _, id := range w.Wire.Reporters {
			reporters[id]++
		}
		assert.Zero(t, w.Wire.Undecoded, "worker %d: every Admit and Report was read off the wire", i)
		retryAdmits += w.Wire.RetryAdmits
		for _, n := range w.Wire.Shadowed {
			shadowed += n
		}
	}
	assert.Len(t, reporters, len(r.Workers), "every process has its own reporter id")
	switch sc.Rule {
	case harness.RuleRetryBudget:
		b := r.Budget()
		assert.Positive(t, retryAdmits, "the clients marked retries")
		assert.Positive(t, b.Denied, "retries over the budget were denied")
		assert.Greater(t, b.PerProcess, b.Bound(), "per-process budgets would allow more than the fleet's")
	case harness.RuleThrottle:
		assert.Positive(t, r.Throttle().Rejected, "the throttle rejected calls")
	case harness.RuleShadow:
		assert.Positive(t, shadowed, "the answers said what the policy would have denied")
	}
	if sc.Rule != harness.RuleRetryBudget && sc.Rule != harness.RuleThrottle {
		return
	}
	none, err := h.Run(ctx, sc, worker.NoCoordination)
	require.NoError(t, err)
	t.Log(none.RuleSummary())
	broke := false
	for _, v := range harness.Check(none) {
		broke = broke || v.Property == sc.Rule
	}
	assert.True(t, broke, "without coordination the fleet breaks the %s property: the check is live", sc.Rule)
}
