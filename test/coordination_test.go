//go:build integration

package test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/servertest"
)

// replicas starts n cooldownd servers sharing one real Redis and returns a
// Connect client for each.
func replicas(t *testing.T, n int, p breaker.Policy) []cooldownv1connect.CooldownServiceClient {
	t.Helper()
	rdb := redistest.Real(t)
	var out []cooldownv1connect.CooldownServiceClient
	for range n {
		s := servertest.Start(t, servertest.WithRedis(rdb), servertest.WithPolicy(p), servertest.WithProtocol(servertest.TLS))
		out = append(out, cooldownv1connect.NewCooldownServiceClient(s.Client(), s.URL))
	}
	return out
}

func TestAtMostMaxProbesInFlightAcrossReplicas(t *testing.T) {
	t.Parallel()
	for _, maxProbes := range []int{1, 2} {
		p := breaker.Policy{
			ConsecutiveFailures: 2, OpenBase: 20 * time.Millisecond, OpenMax: 80 * time.Millisecond, Jitter: 0.2,
			RateLimitCooldown: 20 * time.Millisecond, MaxProbes: maxProbes, LeaseTTL: 5 * time.Second,
		}
		clients := replicas(t, 3, p)
		conn := &cooldownv1.Connection{Id: make([]byte, 32), Label: "storm"}
		conn.Id[0] = byte(maxProbes)
		// Run until enough recoveries happened (or a bounded 20 s on a slow
		// machine), so the assertion below is never vacuous.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		const wantProbes = 30
		_, err := clients[0].Report(ctx, connect.NewRequest(&cooldownv1.ReportRequest{Connection: conn, Outcome: cooldownv1.Outcome_OUTCOME_RATE_LIMITED}))
		require.NoError(t, err)

		// Probes in flight per recovery (the half-open revision that granted
		// them). A probe of an earlier recovery may still be running when a
		// later one starts (close → trip → open → half-open): its lease died
		// with the transition and its report will be stale, so it is not a
		// probe of the new recovery.
		var mu sync.Mutex
		inFlight := map[uint64]int64{}
		var peak, probes, allowed atomic.Int64
		var wg sync.WaitGroup
		for g := range 48 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				c := clients[g%len(clients)]
				for ctx.Err() == nil {
					res, err := c.Admit(ctx, connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{conn}}))
					if err != nil {
						return // the deadline ended the run
					}
					m := res.Msg
					switch m.GetDecision() {
					case cooldownv1.Decision_DECISION_ALLOW_PROBE:
						if probes.Add(1) >= wantProbes {
							cancel()
						}
						rev := m.GetRevision()
						mu.Lock()
						inFlight[rev]++
						if n := inFlight[rev]; n > peak.Load() {
							peak.Store(n)
						}
						mu.Unlock()
						time.Sleep(time.Duration(1+rng.IntN(4)) * time.Millisecond)
						mu.Lock()
						inFlight[rev]--
						mu.Unlock()
						// Probes fail half the time so the connection keeps recovering.
						out := cooldownv1.Outcome_OUTCOME_SUCCESS
						if rng.IntN(2) == 0 {
							out = cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE
						}
						_, _ = c.Report(context.WithoutCancel(ctx), connect.NewRequest(&cooldownv1.ReportRequest{
							Connection: conn, Revision: m.GetRevision(), LeaseToken: m.GetLeaseToken(), Outcome: out}))
					case cooldownv1.Decision_DECISION_ALLOW:
						allowed.Add(1)
						// Closed traffic trips the breaker again now and then.
						out := cooldownv1.Outcome_OUTCOME_SUCCESS
						if rng.IntN(2) == 0 {
							out = cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE
						}
						_, _ = c.Report(context.WithoutCancel(ctx), connect.NewRequest(&cooldownv1.ReportRequest{
							Connection: conn, Revision: m.GetRevision(), Outcome: out}))
					default:
						time.Sleep(time.Millisecond)
					}
				}
			})
		}
		wg.Wait()
		t.Logf("max_probes=%d: %d probes, %d allowed calls, peak probes in flight %d", maxProbes, probes.Load(), allowed.Load(), peak.Load())
		require.GreaterOrEqual(t, probes.Load(), int64(wantProbes/3), "the run must exercise many recoveries")
		assert.LessOrEqual(t, peak.Load(), int64(maxProbes), "probes in flight of one recovery across replicas")
	}
}

func TestCooldownSetThroughOneReplicaIsObeyedThroughAnother(t *testing.T) {
	t.Parallel()
	clients := replicas(t, 2, breaker.DefaultPolicy())
	ctx := context.Background()
	conn := &cooldownv1.Connection{Id: make([]byte, 32)}
	conn.Id[5] = 5
	_, err := clients[0].Report(ctx, connect.NewRequest(&cooldownv1.ReportRequest{
		Connection: conn, Outcome: cooldownv1.Outcome_OUTCOME_RATE_LIMITED, RetryAfter: durationpb.New(30 * time.Second), HttpStatus: http.StatusTooManyRequests}))
	require.NoError(t, err)
	res, err := clients[1].Admit(ctx, connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{conn}}))
	require.NoError(t, err)
	assert.Equal(t, cooldownv1.Decision_DECISION_DENY, res.Msg.GetDecision())
	assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, res.Msg.GetDenyReason())
	ra := res.Msg.GetRetryAfter().AsDuration()
	assert.Greater(t, ra, 29*time.Second)
	assert.LessOrEqual(t, ra, 30*time.Second)
}
