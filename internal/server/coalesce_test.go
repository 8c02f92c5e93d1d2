package server_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/store"
)

// TestCoalescedReportsRoundTrip: over each protocol, 24 processes' success
// batches on one healthy connection are answered COALESCED at the revision
// the replica learned, held (Redis sees none of them) until the replica
// stops, and then leave the connection's state exactly as the same
// reports applied one by one (a control connection, through the store) —
// the sum counted once. A keyed report resent to another replica after
// the flush is answered from its key and counted once. Fails on the code
// before the coalescer (every answer is applied at once, so the state
// moves before the stop), and if the stop does not flush.
func TestCoalescedReportsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.srv.StartCoalescing(time.Hour) // no tick: only the stop flushes
			ctx := t.Context()
			id, control := newID(), newID()
			var controlID keys.ID
			copy(controlID[:], control)
			c := e.cooldown(p.opts...)
			first, err := c.Report(ctx, connect.NewRequest(&cooldownv1.ReportRequest{Connection: conn(id), Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, HttpStatus: 200}))
			require.NoError(t, err)
			assert.Equal(t, cooldownv1.ReportApplied_REPORT_APPLIED_UNSPECIFIED, first.Msg.GetApplied(), "not learned yet: applied at once")
			_, err = e.store.Report(ctx, store.Conn{Tenant: "default", ID: controlID}, breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200})
			require.NoError(t, err)
			rev := first.Msg.GetRevision()
			held := successes(t, e, id)
			require.Equal(t, int64(1), held, "the first success, applied at once")

			var wg sync.WaitGroup
			var mu sync.Mutex
			var reqs []*cooldownv1.ReportRequest
			for proc := range 24 {
				req := &cooldownv1.ReportRequest{Connection: conn(id), Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, Revision: rev,
					HttpStatus: 200, Count: uint32(proc + 1), Retry: proc%6 == 0}
				if proc%2 == 0 {
					req.IdempotencyKey = fmt.Sprintf("process-%02d-batch-0001", proc)
				}
				reqs = append(reqs, req)
				wg.Go(func() {
					pc := cooldownv1connect.NewCooldownServiceClient(e.http.Client(), e.http.URL, p.opts...)
					res, err := pc.Report(ctx, connect.NewRequest(req))
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					defer mu.Unlock()
					assert.Equal(t, cooldownv1.ReportApplied_REPORT_APPLIED_COALESCED, res.Msg.GetApplied())
					assert.Equal(t, rev, res.Msg.GetRevision())
					assert.Equal(t, cooldownv1.State_STATE_CLOSED, res.Msg.GetState())
					assert.True(t, res.Msg.GetAccepted())
				})
			}
			wg.Wait()
			assert.Equal(t, held, successes(t, e, id), "held until the flush: Redis saw none of them")
			for _, req := range reqs {
				_, err := e.store.Report(ctx, store.Conn{Tenant: "default", ID: controlID, ReportKey: req.GetIdempotencyKey()},
					breaker.Report{Revision: rev, Outcome: breaker.OutcomeSuccess, HTTPStatus: 200, Count: int64(req.GetCount()), Retry: req.GetRetry()})
				require.NoError(t, err)
			}

			e.srv.StopCoalescing(ctx)
			got, _, err := e.store.Get(ctx, "default", keyID(id), 0)
			require.NoError(t, err)
			want, _, err := e.store.Get(ctx, "default", controlID, 0)
			require.NoError(t, err)
			require.Equal(t, int64(1+24*25/2), want.State.Successes)
			assert.Equal(t, want.State.Successes, got.State.Successes, "the sum, counted once")
			assert.Equal(t, want.State.Window, got.State.Window)
			assert.Equal(t, want.State.Fleet, got.State.Fleet, "first attempts and retries told apart")
			assert.Equal(t, want.State.Revision, got.State.Revision)

			// Another replica (no coalescing) gets the resend of a keyed
			// report: answered from the key, not counted again.
			other, err := server.New(server.Options{Store: e.store})
			require.NoError(t, err)
			hs := httptest.NewServer(other.Handler())
			t.Cleanup(hs.Close)
			oc := cooldownv1connect.NewCooldownServiceClient(hs.Client(), hs.URL)
			res, err := oc.Report(ctx, connect.NewRequest(reqs[2]))
			require.NoError(t, err)
			assert.Equal(t, rev, res.Msg.GetRevision())
			assert.Equal(t, want.State.Successes, successes(t, e, id), "the resend counts nothing")

			// After the stop every report is applied at once.
			res, err = c.Report(ctx, connect.NewRequest(&cooldownv1.ReportRequest{Connection: conn(id), Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, Revision: rev}))
			require.NoError(t, err)
			assert.Equal(t, cooldownv1.ReportApplied_REPORT_APPLIED_UNSPECIFIED, res.Msg.GetApplied())
		})
	}
}

func keyID(b []byte) keys.ID {
	var id keys.ID
	copy(id[:], b)
	return id
}

// successes is the connection's success count in the store.
func successes(t *testing.T, e *env, id []byte) int64 {
	t.Helper()
	snap, _, err := e.store.Get(context.Background(), "default", keyID(id), 0)
	require.NoError(t, err)
	return snap.State.Successes
}

// TestCoalescedSuccessesGoBeforeALaterFailure: a replica holds ten
// successes of a healthy connection, then is sent a failure, a success and
// a failure, one after the other. internal/breaker, fed the reports in
// that order, counts 14 calls of which 2 failed: closed (FastPolicy opens
// at half of at least 4 calls). The replica applies the held successes
// before the failure (settle), so the store agrees. Fails on the code
// before settle: the store then sees 4 calls of which 2 failed, and the
// second failure opens a connection the model keeps closed.
func TestCoalescedSuccessesGoBeforeALaterFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.srv.StartCoalescing(time.Hour) // no tick: only settle applies the held successes
	ctx := t.Context()
	id := newID()
	c := e.cooldown()
	report := func(o cooldownv1.Outcome, rev uint64, count uint32) *cooldownv1.ReportResponse {
		t.Helper()
		res, err := c.Report(ctx, connect.NewRequest(&cooldownv1.ReportRequest{Connection: conn(id), Outcome: o, Revision: rev, HttpStatus: 200, Count: count}))
		require.NoError(t, err)
		return res.Msg
	}
	first := report(cooldownv1.Outcome_OUTCOME_SUCCESS, 0, 1)
	rev := first.GetRevision()
	held := report(cooldownv1.Outcome_OUTCOME_SUCCESS, rev, 10)
	require.Equal(t, cooldownv1.ReportApplied_REPORT_APPLIED_COALESCED, held.GetApplied())
	require.Equal(t, int64(1), successes(t, e, id), "held")

	report(cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE, rev, 1)
	assert.Equal(t, int64(11), successes(t, e, id), "the held successes reached the store before the failure")
	report(cooldownv1.Outcome_OUTCOME_SUCCESS, rev, 1)
	last := report(cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE, rev, 1)
	assert.Equal(t, cooldownv1.State_STATE_CLOSED, last.GetState(), "2 failures in 14 calls")

	m := breaker.State{Phase: breaker.Closed}
	p := fastPolicy()
	at := e.clock().UnixMilli()
	for _, r := range []breaker.Report{{Outcome: breaker.OutcomeSuccess}, {Outcome: breaker.OutcomeSuccess, Count: 10},
		{Outcome: breaker.OutcomeTransientFailure}, {Outcome: breaker.OutcomeSuccess}, {Outcome: breaker.OutcomeTransientFailure}} {
		r.Revision = m.Revision
		m.Report(p, at, r, 0)
	}
	assert.Equal(t, breaker.Closed, m.Phase, "the model")
	snap, _, err := e.store.Get(ctx, "default", keyID(id), 0)
	require.NoError(t, err)
	assert.Equal(t, m.Window, snap.State.Window, "the failure-rate window, as the model counts it")
}
