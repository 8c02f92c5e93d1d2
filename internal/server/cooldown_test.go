package server_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// TestCooldownEndToEnd walks one connection through a shared cooldown and
// its recovery probe, over each protocol, with two independent callers.
func TestCooldownEndToEnd(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			first, second := e.cooldown(p.opts...), e.cooldown(p.opts...)
			id := newID()

			// A new connection is closed: ALLOW.
			res := admit(t, first, id)
			assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, res.GetDecision())
			assert.Equal(t, cooldownv1.State_STATE_CLOSED, res.GetState())
			assert.Zero(t, res.GetCandidateIndex())
			assert.Empty(t, res.GetLeaseToken())

			// A 429 with Retry-After: 30 from the first caller...
			rep := rateLimit(t, first, id, 30*time.Second)
			assert.True(t, rep.GetAccepted())
			assert.True(t, rep.GetChanged())
			assert.Equal(t, cooldownv1.State_STATE_OPEN, rep.GetState())

			// ...is obeyed by the second on its next Admit, counting down.
			var last time.Duration
			for i, want := range []time.Duration{30 * time.Second, 20 * time.Second, time.Second} {
				if i > 0 {
					e.advance(last - want)
				}
				res = admit(t, second, id)
				require.Equal(t, cooldownv1.Decision_DECISION_DENY, res.GetDecision(), "step %d", i)
				assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, res.GetDenyReason())
				assert.Equal(t, cooldownv1.State_STATE_OPEN, res.GetState())
				ra := res.GetRetryAfter().AsDuration()
				assert.Positive(t, ra)
				assert.LessOrEqual(t, ra, want)
				if i > 0 {
					assert.Less(t, ra, last, "retry_after counts down")
				}
				assert.WithinDuration(t, e.clock().Add(ra), res.GetAvailableAt().AsTime(), time.Millisecond)
				last = ra
			}

			// When it elapses the first caller becomes the one probe...
			e.advance(last)
			probe := admit(t, first, id)
			require.Equal(t, cooldownv1.Decision_DECISION_ALLOW_PROBE, probe.GetDecision())
			assert.Equal(t, cooldownv1.State_STATE_HALF_OPEN, probe.GetState())
			assert.NotEmpty(t, probe.GetLeaseToken())
			assert.Equal(t, e.clock().Add(fastPolicy().LeaseTTL), probe.GetLeaseExpiresAt().AsTime())

			// ...and everyone else waits for it.
			res = admit(t, second, id)
			assert.Equal(t, cooldownv1.Decision_DECISION_DENY, res.GetDecision())
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_PROBE_IN_FLIGHT, res.GetDenyReason())
			assert.Empty(t, res.GetLeaseToken())

			// The probe's success closes the connection for everyone.
			ok, err := first.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
				Connection: conn(id), Revision: probe.GetRevision(), LeaseToken: probe.GetLeaseToken(),
				Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, HttpStatus: 200,
			}))
			require.NoError(t, err)
			assert.True(t, ok.Msg.GetAccepted())
			assert.True(t, ok.Msg.GetChanged())
			assert.Equal(t, cooldownv1.State_STATE_CLOSED, ok.Msg.GetState())
			res = admit(t, second, id)
			assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, res.GetDecision())
			assert.Equal(t, ok.Msg.GetRevision(), res.GetRevision())
		})
	}
}

func TestAdmitCandidates(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := e.cooldown(p.opts...)
			primary, fallback1, fallback2 := newID(), newID(), newID()

			rateLimit(t, c, primary, 30*time.Second)
			res := admit(t, c, primary, fallback1, fallback2)
			assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, res.GetDecision())
			assert.EqualValues(t, 1, res.GetCandidateIndex(), "the first fallback is chosen")
			require.Len(t, res.GetCandidates(), 2, "it stops at the first admitted candidate")
			assert.Equal(t, cooldownv1.Decision_DECISION_DENY, res.GetCandidates()[0].GetDecision())
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, res.GetCandidates()[0].GetDenyReason())
			assert.Equal(t, 30*time.Second, res.GetCandidates()[0].GetRetryAfter().AsDuration())
			assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, res.GetCandidates()[1].GetDecision())
			assert.Nil(t, res.GetAvailableAt())

			// Every candidate denied: DENY, pointing at the soonest.
			rateLimit(t, c, fallback1, 10*time.Second)
			rateLimit(t, c, fallback2, 20*time.Second)
			res = admit(t, c, primary, fallback1, fallback2)
			assert.Equal(t, cooldownv1.Decision_DECISION_DENY, res.GetDecision())
			assert.EqualValues(t, 1, res.GetCandidateIndex())
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, res.GetDenyReason())
			assert.Equal(t, 10*time.Second, res.GetRetryAfter().AsDuration())
			assert.Equal(t, e.clock().Add(10*time.Second), res.GetAvailableAt().AsTime())
			require.Len(t, res.GetCandidates(), 3)
			for i, want := range []time.Duration{30 * time.Second, 10 * time.Second, 20 * time.Second} {
				assert.Equal(t, cooldownv1.Decision_DECISION_DENY, res.GetCandidates()[i].GetDecision(), "candidate %d", i)
				assert.Equal(t, want, res.GetCandidates()[i].GetRetryAfter().AsDuration(), "candidate %d", i)
			}
		})
	}
}

// TestStaleSuccessDoesNotClear: a success admitted before a newer failure
// carries an old revision and cannot clear it.
func TestStaleSuccessDoesNotClear(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.cooldown()
	id := newID()
	before := admit(t, c, id)
	rateLimit(t, c, id, 30*time.Second)
	e.advance(30 * time.Second)
	probe := admit(t, c, id)
	require.Equal(t, cooldownv1.Decision_DECISION_ALLOW_PROBE, probe.GetDecision())

	res, err := c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
		Connection: conn(id), Revision: before.GetRevision(), Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS,
	}))
	require.NoError(t, err)
	assert.False(t, res.Msg.GetAccepted())
	assert.False(t, res.Msg.GetChanged())
	assert.Equal(t, cooldownv1.State_STATE_HALF_OPEN, res.Msg.GetState())
}

func TestExtendLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.cooldown(connect.WithGRPC())
	id := newID()
	rateLimit(t, c, id, time.Second)
	e.advance(time.Second)
	probe := admit(t, c, id)
	require.Equal(t, cooldownv1.Decision_DECISION_ALLOW_PROBE, probe.GetDecision())

	res, err := c.ExtendLease(t.Context(), connect.NewRequest(&cooldownv1.ExtendLeaseRequest{
		Connection: conn(id), LeaseToken: probe.GetLeaseToken(), Ttl: durationpb.New(2 * time.Second),
	}))
	require.NoError(t, err)
	assert.Equal(t, e.clock().Add(2*time.Second), res.Msg.GetLeaseExpiresAt().AsTime())
	// The original TTL has passed, but the lease is still held.
	e.advance(time.Second)
	assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_PROBE_IN_FLIGHT, admit(t, c, id).GetDenyReason())

	_, err = c.ExtendLease(t.Context(), connect.NewRequest(&cooldownv1.ExtendLeaseRequest{
		Connection: conn(id), LeaseToken: "1.0.1.nope",
	}))
	requireCode(t, err, connect.CodeFailedPrecondition, "lease not held")
}
