package client

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// TestMirrorHearsItsOwnFailures reproduces issue 22's first defect:
// cooldownd's unary calls fail while the watch stream stays up (the fake's
// down answers Admit and Report unavailable, its stream goes on). A
// mirrored call gets 429 Retry-After: 20; its report is not taken, the
// client degrades and its in-process breaker opens for 20 s. On bfb1358
// 5 of 5 first attempts were still admitted from the mirror, for up to
// the entry's 30 s age. Now the report takes the connection out of the
// mirror at once, and the in-process breaker denies every attempt.
func TestMirrorHearsItsOwnFailures(t *testing.T) {
	t.Parallel()
	svc := newFakeService(fastPolicy())
	c := servedMirror(t, svc)
	cn := NewConn(ID{22}, "p")
	adm := admitMirrored(t, c, cn)

	svc.down.Store(true)
	require.NoError(t, c.Report(t.Context(), adm, Classification{Outcome: OutcomeRateLimited, HTTPStatus: 429, RetryAfter: 20 * time.Second}))
	mirrored := 0
	for i := range 5 {
		a, err := c.Admit(t.Context(), cn)
		require.NoError(t, err)
		if a.Mirrored {
			mirrored++
			continue
		}
		assert.True(t, a.Local, "attempt %d: decided in-process", i)
		assert.Equal(t, DecisionDeny, a.Decision, "attempt %d: the in-process breaker is open", i)
		assert.Greater(t, a.RetryAfter, 15*time.Second, "attempt %d: for the provider's 20 s", i)
	}
	assert.Zero(t, mirrored, "first attempts admitted from the mirror after this process's 429")
	assert.True(t, c.Degraded())
	assert.True(t, c.Stats().Mirror.Live, "the watch stream stayed up throughout")
}

// TestMirrorLeavesOnItsOwnReports: every report of this process that says
// the connection is not healthy takes it out of the mirror at once, with
// cooldownd answering or not; a neutral one (the caller's fault, a cancel)
// leaves it in. Its way back is cooldownd's word that it is closed: the
// next Admit answer, sent after the report.
func TestMirrorLeavesOnItsOwnReports(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cl    Classification
		leave bool
	}{
		{"transient failure", Classification{Outcome: OutcomeTransientFailure, HTTPStatus: 503}, true},
		{"rate limited", Classification{Outcome: OutcomeRateLimited, HTTPStatus: 429, RetryAfter: 20 * time.Second}, true},
		{"overloaded", Classification{Outcome: OutcomeOverloaded, HTTPStatus: 529}, true},
		{"quota", Classification{Outcome: OutcomeQuotaExhausted, HTTPStatus: 429, ErrorCode: "insufficient_quota"}, true},
		{"auth", Classification{Outcome: OutcomeAuthFailure, HTTPStatus: 401}, true},
		{"success with a server delay hint", Classification{Outcome: OutcomeSuccess, HTTPStatus: 200, Proactive: 30 * time.Second}, true},
		{"client error", Classification{Outcome: OutcomeClientError, HTTPStatus: 400}, false},
		{"canceled", Classification{Outcome: OutcomeCanceled}, false},
	}
	for _, tt := range tests {
		for _, answers := range []bool{true, false} {
			name := tt.name + "/cooldownd takes the report"
			if !answers {
				name = tt.name + "/cooldownd does not answer"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				svc := newFakeService(fastPolicy())
				// Degradation is another rule: one unanswered report here.
				c := servedMirror(t, svc, WithDegradeAfter(100, time.Minute))
				cn := NewConn(ID{23}, "p")
				adm := admitMirrored(t, c, cn)
				svc.down.Store(!answers)
				require.NoError(t, c.Report(t.Context(), adm, tt.cl))
				before := svc.admits.Load()
				a, err := c.Admit(t.Context(), cn)
				require.NoError(t, err)
				if !tt.leave {
					assert.True(t, a.Mirrored, "a neutral report leaves the connection in the mirror")
					return
				}
				assert.False(t, a.Mirrored, "out of the mirror at once")
				assert.Equal(t, before+1, svc.admits.Load(), "asked cooldownd")
				if !answers {
					return
				}
				if a.Decision != DecisionAllow {
					return // cooldownd opened it: no way back yet
				}
				require.NoError(t, c.Report(t.Context(), a, Classification{Outcome: OutcomeSuccess}))
				a, err = c.Admit(t.Context(), cn)
				require.NoError(t, err)
				assert.True(t, a.Mirrored, "cooldownd answered closed at a revision at least as new: back in the mirror")
			})
		}
	}
}

// TestMirrorHoldsCooldowndsAnswer reproduces issue 22's second case:
// cooldownd answers a report of this process with a non-closed state or a
// newer revision, and on bfb1358 the mirror went on admitting until a watch
// event arrived (the fake sends none here). Now the answer takes the
// connection out at once, until cooldownd says it is closed again at a
// revision at least as new: here an event.
func TestMirrorHoldsCooldowndsAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		state cooldownv1.State
		bump  uint64 // the answer's revision past the admission's
	}{
		{"open", cooldownv1.State_STATE_OPEN, 1},
		{"half-open", cooldownv1.State_STATE_HALF_OPEN, 2},
		{"closed at a newer revision", cooldownv1.State_STATE_CLOSED, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := newFakeService(fastPolicy())
			c := servedMirror(t, svc)
			cn := NewConn(ID{24}, "p")
			adm := admitMirrored(t, c, cn)
			svc.answerReport(func(_ *cooldownv1.ReportRequest, out *cooldownv1.ReportResponse) {
				out.State, out.Revision = tt.state, adm.Revision+tt.bump
			})
			// A batch of successes: the answer is the only word of the change.
			require.NoError(t, c.Report(t.Context(), adm, Classification{Outcome: OutcomeSuccess, HTTPStatus: 200}))
			require.NoError(t, c.Flush(t.Context()))
			a, err := c.Admit(t.Context(), cn)
			require.NoError(t, err)
			assert.False(t, a.Mirrored, "cooldownd's answer took it out of the mirror")
			svc.answerReport(nil)

			svc.event(&cooldownv1.ConnectionState{Connection: wireConn(cn), State: cooldownv1.State_STATE_CLOSED,
				Revision: adm.Revision + tt.bump + 1, Fleet: &cooldownv1.FleetCounts{}})
			require.Eventually(t, func() bool { return inMirror(c, cn) }, 5*time.Second, time.Millisecond,
				"an event closed at a newer revision brings it back")
			a, err = c.Admit(t.Context(), cn)
			require.NoError(t, err)
			assert.True(t, a.Mirrored)
			assert.Equal(t, adm.Revision+tt.bump+1, a.Revision)
		})
	}
}

// TestMirrorNothingWhileDegraded: while the client is degraded every call
// is decided in-process, a connection the mirror holds included; when
// cooldownd answers again the mirror learns from its answers anew.
func TestMirrorNothingWhileDegraded(t *testing.T) {
	t.Parallel()
	svc := newFakeService(fastPolicy())
	c := servedMirror(t, svc, WithServiceRetry(time.Hour))
	cn, other := NewConn(ID{25}, "p"), NewConn(ID{26}, "q")
	admitMirrored(t, c, cn)
	svc.down.Store(true)
	for range DefaultDegradeAfter {
		_, err := c.Admit(t.Context(), other)
		require.NoError(t, err)
	}
	require.True(t, c.Degraded())
	require.True(t, c.Stats().Mirror.Live, "the watch stream stayed up")
	for i := range 3 {
		a, err := c.Admit(t.Context(), cn)
		require.NoError(t, err)
		assert.False(t, a.Mirrored, "call %d while degraded: not from the mirror", i)
		assert.True(t, a.Local, "call %d: decided in-process", i)
	}
	assert.Zero(t, c.Stats().Mirror.Mirrored, "degrading empties the mirror")

	svc.down.Store(false)
	c.health.success() // as the next retry interval's answer would
	a, err := c.Admit(context.Background(), cn)
	require.NoError(t, err)
	assert.False(t, a.Mirrored, "the first call after the outage goes to cooldownd")
	a, err = c.Admit(context.Background(), cn)
	require.NoError(t, err)
	assert.True(t, a.Mirrored, "and its answer mirrors the connection again")
}
