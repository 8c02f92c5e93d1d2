package server_test

import (
	"context"
	"strings"
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
	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/servertest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// The fleet rules through the real server and store (the scripts decide):
// each test runs on a miniredis whose clock stands still at t0, and the
// ones whose assertions do not depend on where the clock falls in a fleet
// window also on a real redis-server, on its own clock.

// backend is where a fleet test's store runs.
type backend struct {
	name string
	// real: a redis-server (its clock runs); else a miniredis held at t0.
	real bool
}

var bothBackends = []backend{{"miniredis", false}, {"redis", true}}

// fleetServer is a test server whose policy is chosen per connection
// label, as the policy file's label rules do, in the store and the server
// alike.
type fleetServer struct {
	ts  *servertest.Server
	api cooldownv1connect.CooldownServiceClient
	adm cooldownv1connect.AdminServiceClient
}

func startFleet(t *testing.T, b backend, policyFor func(label string) breaker.Policy) *fleetServer {
	t.Helper()
	pf := func(_, label string) breaker.Policy { return policyFor(label) }
	opts := []servertest.Option{
		servertest.WithStoreOptions(func(so *store.Options) { so.PolicyFor = pf }),
		servertest.WithServerOptions(func(so *server.Options) { so.PolicyFor = pf }),
	}
	if b.real {
		opts = append(opts, servertest.WithRedis(redistest.Real(t)))
	}
	ts := servertest.Start(t, opts...)
	if !b.real {
		ts.Mini.SetTime(t0)
	}
	hs := ts.HTTP()
	return &fleetServer{ts: ts,
		api: cooldownv1connect.NewCooldownServiceClient(hs.Client(), hs.URL),
		adm: cooldownv1connect.NewAdminServiceClient(hs.Client(), hs.URL)}
}

func labeled(id []byte, label string) *cooldownv1.Connection {
	return &cooldownv1.Connection{Id: id, Label: label}
}

func (f *fleetServer) admit(t *testing.T, retry []bool, cands ...*cooldownv1.Connection) *cooldownv1.AdmitResponse {
	t.Helper()
	res, err := f.api.Admit(t.Context(), connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: cands, Retry: retry}))
	require.NoError(t, err)
	return res.Msg
}

func (f *fleetServer) report(t *testing.T, r *cooldownv1.ReportRequest) *cooldownv1.ReportResponse {
	t.Helper()
	res, err := f.api.Report(t.Context(), connect.NewRequest(r))
	require.NoError(t, err)
	return res.Msg
}

func (f *fleetServer) get(t *testing.T, id []byte) *cooldownv1.GetConnectionResponse {
	t.Helper()
	res, err := f.api.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id, HistoryLimit: 10}))
	require.NoError(t, err)
	return res.Msg
}

func (f *fleetServer) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	return scrape(t, f.ts.HTTP().URL)
}

// watch opens a watch stream and returns its transitions as they come,
// once the stream is live (the end-of-snapshot marker has arrived).
func (f *fleetServer) watch(t *testing.T) <-chan *cooldownv1.WatchConnectionsResponse {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	stream, err := f.api.WatchConnections(ctx, connect.NewRequest(&cooldownv1.WatchConnectionsRequest{}))
	require.NoError(t, err)
	require.True(t, stream.Receive(), "the end-of-snapshot marker: %v", stream.Err())
	out := make(chan *cooldownv1.WatchConnectionsResponse, 64)
	go func() {
		defer close(out)
		for stream.Receive() {
			if m := stream.Msg(); m.GetTransition() != nil {
				out <- m
			}
		}
	}()
	return out
}

// fleetPolicy is the servertest FastPolicy with the fleet rules off but
// those edit turns on.
func fleetPolicy(edit func(p *breaker.Policy)) breaker.Policy {
	p := fastPolicy()
	p.FleetWindow = 10 * time.Minute
	if edit != nil {
		edit(&p)
	}
	return p
}

// TestShadowThroughServer: a connection whose policy is in shadow mode is
// allowed what its policy would deny, and the answer says why it would
// not have been (per candidate too); its state, history and watched
// transitions are marked shadow, its policy on the wire says so, and
// cooldownd_shadow_denials_total counts it. An operator's override is
// enforced all the same. A connection under an enforced policy beside it
// is untouched.
func TestShadowThroughServer(t *testing.T) {
	t.Parallel()
	for _, b := range bothBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := startFleet(t, b, func(label string) breaker.Policy {
				return fleetPolicy(func(p *breaker.Policy) { p.Shadow = strings.HasPrefix(label, "shadow ") })
			})
			sh, en := labeled(newID(), "shadow gpt"), labeled(newID(), "enforced gpt")
			events := f.watch(t)
			for _, c := range []*cooldownv1.Connection{sh, en} {
				res := f.report(t, &cooldownv1.ReportRequest{Connection: c, Outcome: cooldownv1.Outcome_OUTCOME_RATE_LIMITED,
					RetryAfter: durationpb.New(time.Hour), HttpStatus: 429})
				assert.Equal(t, cooldownv1.State_STATE_OPEN, res.GetState(), "%s: the transition is computed and stored", c.GetLabel())
				assert.Equal(t, c == sh, res.GetShadow(), "%s: the answer says whether the open is enforced", c.GetLabel())
			}

			got := f.admit(t, nil, sh)
			assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, got.GetDecision(), "shadow: allowed")
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_UNSPECIFIED, got.GetDenyReason())
			assert.Nil(t, got.GetRetryAfter())
			assert.Equal(t, cooldownv1.State_STATE_OPEN, got.GetState())
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, got.GetShadowDenyReason())
			ra := got.GetShadowRetryAfter().AsDuration()
			assert.LessOrEqual(t, ra, time.Hour)
			assert.Greater(t, ra, 59*time.Minute)
			if !b.real {
				assert.Equal(t, time.Hour, ra, "the clock stands still: the whole Retry-After")
			}

			got = f.admit(t, nil, en)
			assert.Equal(t, cooldownv1.Decision_DECISION_DENY, got.GetDecision(), "enforced: denied")
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, got.GetDenyReason())
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_UNSPECIFIED, got.GetShadowDenyReason())
			assert.Nil(t, got.GetShadowRetryAfter())

			got = f.admit(t, nil, en, sh)
			assert.Equal(t, uint32(1), got.GetCandidateIndex(), "the shadow fallback is the first allowed")
			require.Len(t, got.GetCandidates(), 2)
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, got.GetCandidates()[0].GetDenyReason())
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_UNSPECIFIED, got.GetCandidates()[0].GetShadowDenyReason())
			assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, got.GetCandidates()[1].GetDecision())
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, got.GetCandidates()[1].GetShadowDenyReason())
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, got.GetShadowDenyReason())

			for _, tc := range []struct {
				c      *cooldownv1.Connection
				shadow bool
			}{{sh, true}, {en, false}} {
				g := f.get(t, tc.c.GetId())
				assert.Equal(t, tc.shadow, g.GetConnection().GetShadow(), tc.c.GetLabel())
				assert.Equal(t, tc.shadow, g.GetPolicy().GetShadow(), tc.c.GetLabel())
				require.NotEmpty(t, g.GetHistory(), tc.c.GetLabel())
				for _, h := range g.GetHistory() {
					assert.Equal(t, tc.shadow, h.GetShadow(), "%s: history", tc.c.GetLabel())
				}
			}
			list, err := f.api.ListConnections(t.Context(), connect.NewRequest(&cooldownv1.ListConnectionsRequest{}))
			require.NoError(t, err)
			require.Len(t, list.Msg.GetConnections(), 2)
			for _, c := range list.Msg.GetConnections() {
				assert.Equal(t, c.GetConnection().GetLabel() == sh.GetLabel(), c.GetShadow(), c.GetConnection().GetLabel())
			}
			seen := map[string]bool{}
			for len(seen) < 2 {
				select {
				case ev := <-events:
					label := ev.GetConnection().GetConnection().GetLabel()
					seen[label] = true
					assert.Equal(t, label == sh.GetLabel(), ev.GetTransition().GetShadow(), "%s: watched transition", label)
					assert.Equal(t, label == sh.GetLabel(), ev.GetConnection().GetShadow(), "%s: watched state", label)
				case <-time.After(10 * time.Second):
					t.Fatalf("watched transitions: got %v", seen)
				}
			}

			// An operator's override is not the policy's decision.
			_, err = f.adm.ForceConnection(t.Context(), connect.NewRequest(&cooldownv1.ForceConnectionRequest{
				Id: sh.GetId(), Override: cooldownv1.Override_OVERRIDE_FORCED_OPEN, Reason: "incident",
			}))
			require.NoError(t, err)
			got = f.admit(t, nil, sh)
			assert.Equal(t, cooldownv1.Decision_DECISION_DENY, got.GetDecision(), "forced open in shadow mode too")
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_FORCED_OPEN, got.GetDenyReason())
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_UNSPECIFIED, got.GetShadowDenyReason())

			m := f.metrics(t)
			assert.Equal(t, 2.0, m["cooldownd_shadow_denials_total{reason=cooldown}"], "the two shadowed admits of sh")
			assert.Equal(t, 2.0, m["cooldownd_admits_total{decision=deny,reason=cooldown}"], "en, twice")
			assert.Equal(t, 2.0, m["cooldownd_admits_total{decision=allow,reason=}"], "sh, twice")
			assert.Equal(t, 1.0, m["cooldownd_admits_total{decision=deny,reason=forced_open}"])
		})
	}
}

// TestRetryBudgetThroughServer: AdmitRequest.retry marks each candidate,
// and a retry over its connection's budget is denied RETRY_BUDGET (the
// caller falls back: a fallback it was not sent to is a first attempt
// there); ReportRequest.retry keeps a retry's report out of the budget's
// base. The admit counter's reason is retry_budget.
func TestRetryBudgetThroughServer(t *testing.T) {
	t.Parallel()
	for _, b := range bothBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := startFleet(t, b, func(string) breaker.Policy {
				return fleetPolicy(func(p *breaker.Policy) { p.RetryBudget, p.RetryBudgetMin = 0.5, 0 })
			})
			a, fb := labeled(newID(), "primary"), labeled(newID(), "fallback")

			// No first attempt yet: no budget for a retry.
			got := f.admit(t, []bool{true}, a)
			assert.Equal(t, cooldownv1.Decision_DECISION_DENY, got.GetDecision())
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_RETRY_BUDGET, got.GetDenyReason())
			assert.Positive(t, got.GetRetryAfter().AsDuration())
			assert.LessOrEqual(t, got.GetRetryAfter().AsDuration(), 10*time.Minute, "at most the budget's bucket")

			got = f.admit(t, []bool{true}, a, fb)
			assert.Equal(t, uint32(1), got.GetCandidateIndex(), "the fallback is a first attempt: allowed")
			assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, got.GetDecision())
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_RETRY_BUDGET, got.GetCandidates()[0].GetDenyReason())

			got = f.admit(t, []bool{true, true}, a, fb)
			assert.Equal(t, cooldownv1.Decision_DECISION_DENY, got.GetDecision(), "a retry on both")
			require.Len(t, got.GetCandidates(), 2)
			for _, c := range got.GetCandidates() {
				assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_RETRY_BUDGET, c.GetDenyReason())
			}

			assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, f.admit(t, []bool{false}, a).GetDecision(), "a first attempt")
			assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, f.admit(t, nil, a).GetDecision(), "no entry: a first attempt")

			// Reports of retries are not the budget's base.
			f.report(t, &cooldownv1.ReportRequest{Connection: a, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, Retry: true, Count: 100})
			got = f.admit(t, []bool{true}, a)
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_RETRY_BUDGET, got.GetDenyReason(), "reported retries fund no retry")

			m := f.metrics(t)
			assert.Equal(t, 5.0, m["cooldownd_admits_total{decision=deny,reason=retry_budget}"], "per examined candidate")

			if b.real {
				return // the rest reads counts at a point of the window: the clock must stand still
			}
			// Two first attempts fund one retry at 0.5.
			f.report(t, &cooldownv1.ReportRequest{Connection: a, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, Count: 2})
			assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, f.admit(t, []bool{true}, a).GetDecision(), "within the budget")
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_RETRY_BUDGET, f.admit(t, []bool{true}, a).GetDenyReason(), "spent")
			fleet := f.get(t, a.GetId()).GetConnection().GetFleet()
			assert.Equal(t, 2.0, fleet.GetFirstAttempts())
			assert.Equal(t, 1.0, fleet.GetRetries())
			assert.Zero(t, fleet.GetRequests(), "the throttle is off: its counts are not kept")
			pol := f.get(t, a.GetId()).GetPolicy()
			assert.Equal(t, 0.5, pol.GetRetryBudget())
			assert.Zero(t, pol.GetRetryBudgetMin())
			assert.Equal(t, 10*time.Minute, pol.GetFleetWindow().AsDuration())
		})
	}
}

// TestThrottleThroughServer: the throttle's rejection probability is on
// every Report and Admit answer and in the fleet counts; a rejected call
// is THROTTLED with a 1 s retry_after (counted under reason throttled); a
// shadow policy allows it and says THROTTLED instead.
func TestThrottleThroughServer(t *testing.T) {
	t.Parallel()
	f := startFleet(t, backend{"miniredis", false}, func(label string) breaker.Policy {
		return fleetPolicy(func(p *breaker.Policy) {
			p.ConsecutiveFailures, p.FailureRate, p.RetryBudget = 0, 0, 0 // the throttle alone
			p.ThrottleK, p.FleetWindow = 1, 10*time.Second
			p.Shadow = label == "shadow"
		})
	})
	live, sh := labeled(newID(), "live"), labeled(newID(), "shadow")
	const failures = 20
	for _, c := range []*cooldownv1.Connection{live, sh} {
		for k := 1; k <= failures; k++ {
			res := f.report(t, &cooldownv1.ReportRequest{Connection: c, Outcome: cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE, HttpStatus: 503})
			// K=1, no accepts: k/(k+1) with the clock standing still.
			require.InDelta(t, float64(k)/float64(k+1), res.GetThrottleProbability(), 1e-9, "%s after %d failures", c.GetLabel(), k)
			require.Equal(t, cooldownv1.State_STATE_CLOSED, res.GetState())
		}
	}

	// Each admit is rejected with probability above 0.95: 40 in a row
	// all allowed would be a one in 10^52 draw.
	throttled, shadowed := 0, 0
	for range 40 {
		got := f.admit(t, nil, live)
		assert.Greater(t, got.GetThrottleProbability(), 0.95)
		if got.GetDecision() == cooldownv1.Decision_DECISION_DENY {
			throttled++
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_THROTTLED, got.GetDenyReason())
			assert.Equal(t, time.Second, got.GetRetryAfter().AsDuration())
			assert.Equal(t, cooldownv1.State_STATE_CLOSED, got.GetState(), "throttled while closed")
		}
		got = f.admit(t, nil, sh)
		assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, got.GetDecision(), "shadow: never throttled")
		assert.Greater(t, got.GetThrottleProbability(), 0.95)
		if got.GetShadowDenyReason() != cooldownv1.DenyReason_DENY_REASON_UNSPECIFIED {
			shadowed++
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_THROTTLED, got.GetShadowDenyReason())
			assert.Equal(t, time.Second, got.GetShadowRetryAfter().AsDuration())
		}
	}
	require.Positive(t, throttled)
	require.Positive(t, shadowed)

	// A rejected call is one of the throttle's requests; one shadow mode
	// let through counts when it is reported, as any allowed call.
	for _, tc := range []struct {
		c          *cooldownv1.Connection
		rejections int
	}{{live, throttled}, {sh, 0}} {
		fl := f.get(t, tc.c.GetId()).GetConnection().GetFleet()
		require.NotNil(t, fl, tc.c.GetLabel())
		rq := float64(failures + tc.rejections)
		assert.Equal(t, rq, fl.GetRequests(), "%s: the reported calls and the throttle's rejections", tc.c.GetLabel())
		assert.Zero(t, fl.GetAccepts())
		assert.InDelta(t, rq/(rq+1), fl.GetThrottleProbability(), 1e-9, tc.c.GetLabel())
	}
	m := f.metrics(t)
	assert.Equal(t, float64(throttled), m["cooldownd_admits_total{decision=deny,reason=throttled}"])
	assert.Equal(t, float64(shadowed), m["cooldownd_shadow_denials_total{reason=throttled}"])

	// Successes bring it down: each is a request and an accept.
	res := f.report(t, &cooldownv1.ReportRequest{Connection: live, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, Count: 1000})
	rq := float64(failures + throttled)
	assert.InDelta(t, rq/(rq+1000+1), res.GetThrottleProbability(), 1e-9)
	assert.Less(t, res.GetThrottleProbability(), 0.1)
}

// TestTripQuorumThroughServer: ReportRequest.reporter reaches the store:
// ambiguous failures trip only once two distinct reporters saw them,
// reports without a reporter count as one reporter together, and an
// explicit answer (a 429) is authoritative from one.
func TestTripQuorumThroughServer(t *testing.T) {
	t.Parallel()
	for _, b := range bothBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := startFleet(t, b, func(string) breaker.Policy {
				return fleetPolicy(func(p *breaker.Policy) {
					p.ConsecutiveFailures, p.FailureRate, p.TripQuorum = 1, 0, 2
					// Opens that outlast the test: read back after a loaded moment,
					// fastPolicy's 100 ms open had already ended (OPEN_EXPIRED).
					p.OpenBase, p.OpenMax = time.Minute, time.Minute
				})
			})
			fail := func(c *cooldownv1.Connection, reporter string) cooldownv1.State {
				return f.report(t, &cooldownv1.ReportRequest{Connection: c, Outcome: cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE,
					HttpStatus: 502, Reporter: reporter}).GetState()
			}
			a := labeled(newID(), "a")
			assert.Equal(t, cooldownv1.State_STATE_CLOSED, fail(a, "pod-a"))
			assert.Equal(t, cooldownv1.State_STATE_CLOSED, fail(a, "pod-a"), "the same reporter again")
			g := f.get(t, a.GetId())
			assert.Equal(t, uint32(1), g.GetConnection().GetFleet().GetFailureReporters())
			assert.Equal(t, uint32(2), g.GetPolicy().GetTripQuorum())
			assert.Equal(t, cooldownv1.State_STATE_OPEN, fail(a, "pod-b"), "a second reporter")
			assert.Equal(t, cooldownv1.Cause_CAUSE_BREAKER, f.get(t, a.GetId()).GetConnection().GetCause())

			anon := labeled(newID(), "anonymous")
			assert.Equal(t, cooldownv1.State_STATE_CLOSED, fail(anon, ""))
			assert.Equal(t, cooldownv1.State_STATE_CLOSED, fail(anon, ""), "no reporter is one reporter")
			assert.Equal(t, cooldownv1.State_STATE_OPEN, fail(anon, "pod-c"))

			limited := labeled(newID(), "limited")
			res := f.report(t, &cooldownv1.ReportRequest{Connection: limited, Outcome: cooldownv1.Outcome_OUTCOME_RATE_LIMITED,
				RetryAfter: durationpb.New(time.Minute), HttpStatus: 429, Reporter: "pod-a"})
			assert.Equal(t, cooldownv1.State_STATE_OPEN, res.GetState(), "a 429 from one reporter")
		})
	}
}
