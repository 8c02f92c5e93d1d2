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
// expiring before another process probes.
func TestStorm(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		redistest.Missing(t, "redis-server")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
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
			r, err := h.Run(ctx, sc, worker.Cooldownd)
			require.NoError(t, err)
			m := r.Metrics()
			t.Logf("%s: %d requests reached the failing provider (%d after its first failure, %d probes), recovery %s, %d/%d user calls failed, p99 added %s, %d local admissions, %d poll rounds",
				sc.Name, m.Reached, m.AfterFirst, m.Probes, m.Recovery, m.Failed, m.Calls, m.P99Added, m.Local, r.Polls)
			for _, v := range harness.Check(r) {
				t.Errorf("property %s", v)
			}
			// The scenario must have exercised what it is about.
			assert.Positive(t, m.Reached, "the provider failed requests")
			assert.Positive(t, m.Calls, "the workers made calls")
			if sc.Heals {
				assert.Positive(t, m.Probes, "the fleet probed the failing provider")
				assert.True(t, m.Recovered, "every process recovered")
			}
			if sc.Kill {
				assert.NotNil(t, r.Kill, "a probe holder was killed")
			}
			open := 0
			for _, ivs := range r.Open {
				open += len(ivs)
			}
			assert.Positive(t, open, "the replicas were seen to agree the connection was open")
		})
	}
}
