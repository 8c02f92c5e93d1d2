package client

import (
	"context"
	"io"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// noop is a provider call that succeeds without a network.
func noop(context.Context) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("ok")), Header: http.Header{}}, nil
}

// counting counts the Admit and Report calls that reach cooldownd.
func counting(cd *cooldownd) (admits, reports *atomic.Int64) {
	admits, reports = new(atomic.Int64), new(atomic.Int64)
	cd.SetIntercept(func(_ http.ResponseWriter, r *http.Request) bool {
		switch {
		case isRPC(r, "Admit"):
			admits.Add(1)
		case isRPC(r, "Report"):
			reports.Add(1)
		}
		return false
	})
	return admits, reports
}

// admitMirrored admits cn twice: cooldownd's answer to the first puts it
// in the mirror, which admits the second.
func admitMirrored(t *testing.T, c *Client, cn Conn) Admission {
	t.Helper()
	_, err := c.Admit(t.Context(), cn)
	require.NoError(t, err)
	adm, err := c.Admit(t.Context(), cn)
	require.NoError(t, err)
	require.True(t, adm.Mirrored, "admitted from the mirror")
	return adm
}

func mirrored(t *testing.T, cd *cooldownd, opts ...Option) *Client {
	t.Helper()
	// A generous admit timeout: these tests are about the mirror, and a
	// call past the timeout on a loaded machine is rightly decided in-process.
	c := newClient(t, cd.URL, append([]Option{WithMirror(50 * time.Millisecond), WithAdmitTimeout(10 * time.Second)}, opts...)...)
	// The stream opens at cooldownd's first answer to an Admit.
	_, err := c.Admit(t.Context(), NewConn(ID{0xee}, "warm-up"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.Stats().Mirror.Live }, 5*time.Second, 5*time.Millisecond, "the watch stream is up")
	return c
}

// TestMirrorHealthyPathNoRoundTrip: on a closed, healthy connection the
// guard admits from the mirror and batches its successes: cooldownd sees
// one Admit and a report per batch, not one per call, and still counts
// every success.
func TestMirrorHealthyPathNoRoundTrip(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	c := mirrored(t, cd)
	admits, reports := counting(cd)
	cn := conn(t, c, "https://api.example.com/v1", "key-mirror", "")
	const calls = 2000
	for range calls {
		resp, err := c.Do(t.Context(), cn, noop)
		require.NoError(t, err)
		_ = resp.Body.Close()
	}
	require.NoError(t, c.Flush(t.Context()))
	st := c.Stats().Mirror
	assert.Equal(t, uint64(calls-1), st.Admits, "every call after the first admitted from the mirror")
	assert.Equal(t, int64(1), admits.Load())
	assert.Less(t, reports.Load(), int64(calls/10), "successes go in batches")
	assert.Equal(t, uint64(calls), st.Batched)
	got := cd.get(t, cn).GetConnection()
	// A batch whose answer was lost is sent again: at least once.
	assert.GreaterOrEqual(t, got.GetRecentSuccesses(), uint64(calls), "cooldownd counted every success")
	t.Logf("%d calls: %d Admits and %d Reports reached cooldownd", calls, admits.Load(), reports.Load())
}

// TestMirrorObeysAnotherProcessCooldown: a cooldown set by one process
// stops the local admits of another within one watch event's latency.
func TestMirrorObeysAnotherProcessCooldown(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	a := mirrored(t, cd)
	b := newClient(t, cd.URL)
	cn := conn(t, a, "https://api.example.com/v1", "key-shared", "")
	first, err := a.Admit(t.Context(), cn)
	require.NoError(t, err)
	require.NoError(t, a.Report(t.Context(), first, Classification{Outcome: OutcomeSuccess}))
	adm, err := a.Admit(t.Context(), cn)
	require.NoError(t, err)
	require.True(t, adm.Mirrored, "admitted from the mirror")

	other, err := b.Admit(t.Context(), cn)
	require.NoError(t, err)
	require.NoError(t, b.Report(t.Context(), other, Classification{Outcome: OutcomeRateLimited, RetryAfter: 10 * time.Second}))
	set := time.Now()
	var lag time.Duration
	require.Eventually(t, func() bool {
		adm, err := a.Admit(t.Context(), cn)
		if err != nil || adm.Mirrored {
			return false
		}
		lag = time.Since(set)
		assert.Equal(t, DecisionDeny, adm.Decision)
		assert.Equal(t, ReasonCooldown, adm.Reason)
		return true
	}, 2*time.Second, time.Millisecond, "the cooldown reached the mirror")
	t.Logf("a cooldown set by another process stopped local admits after %v", lag)
}

// TestMirrorFailuresGoAtOnce: only successes are batched.
func TestMirrorFailuresGoAtOnce(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	_, reports := counting(cd)
	c := mirrored(t, cd, WithMirror(time.Hour))
	cn := conn(t, c, "https://api.example.com/v1", "key-fail", "")
	adm := admitMirrored(t, c, cn)
	before := reports.Load()
	err := c.Report(t.Context(), adm, Classification{Outcome: OutcomeTransientFailure, HTTPStatus: 500})
	require.NoError(t, err)
	assert.Equal(t, before+1, reports.Load(), "a failure is reported at once, not batched")
	assert.Equal(t, uint32(1), cd.get(t, cn).GetConnection().GetConsecutiveFailures())
}

// TestMirrorNeedsTheStream: while the watch stream is down, nothing is
// admitted from the mirror.
func TestMirrorNeedsTheStream(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	c := mirrored(t, cd)
	cn := conn(t, c, "https://api.example.com/v1", "key-down", "")
	admitMirrored(t, c, cn)
	cd.Stop()
	require.Eventually(t, func() bool { return !c.Stats().Mirror.Live }, 5*time.Second, 5*time.Millisecond)
	adm, err := c.Admit(t.Context(), cn)
	require.NoError(t, err)
	assert.False(t, adm.Mirrored, "no mirror without its stream")
	assert.True(t, adm.Local, "decided in-process: cooldownd is down")
	cd.restart(t)
	require.Eventually(t, func() bool { return c.Stats().Mirror.Live }, 10*time.Second, 10*time.Millisecond, "the stream comes back")
	var state cooldownv1.State
	require.Eventually(t, func() bool {
		adm, err := c.Admit(t.Context(), cn)
		state = cd.get(t, cn).GetConnection().GetState()
		return err == nil && !adm.Local
	}, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, cooldownv1.State_STATE_CLOSED, state)
}

// throttleHook makes the fake answer every Admit and Report with the
// throttle probability in p (float64 bits).
func throttleHook(svc *fakeService) *atomic.Uint64 {
	p := new(atomic.Uint64)
	svc.answerAdmit(func(_ *cooldownv1.AdmitRequest, out *cooldownv1.AdmitResponse) {
		out.ThrottleProbability = math.Float64frombits(p.Load())
	})
	svc.answerReport(func(_ *cooldownv1.ReportRequest, out *cooldownv1.ReportResponse) {
		out.ThrottleProbability = math.Float64frombits(p.Load())
	})
	return p
}

// servedMirror returns a client with a mirror on the fake served on
// loopback, its stream up, batches sent only by Flush.
// inMirror reports whether the mirror holds cn. Not Stats().Mirror.Mirrored,
// which counts every connection: servedMirror's warm-up one is mirrored too
// when the stream went live before cooldownd's answer to it was learned
// (TestMirrorHoldsCooldowndsAnswer waited on Mirrored == 1 and then found
// its own connection still out, once in ~400 runs under -race on a loaded
// machine).
func inMirror(c *Client, cn Conn) bool {
	c.mirror.mu.Lock()
	defer c.mirror.mu.Unlock()
	return c.mirror.entries[cn.id] != nil
}

func servedMirror(t *testing.T, svc *fakeService, opts ...Option) *Client {
	t.Helper()
	c := svc.serve(t, append([]Option{WithMirror(time.Hour)}, opts...)...)
	// The stream opens at cooldownd's first answer to an Admit.
	_, err := c.Admit(t.Context(), NewConn(ID{0xee}, "warm-up"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.Stats().Mirror.Live }, 5*time.Second, 5*time.Millisecond, "the watch stream is up")
	svc.forget()
	return c
}

// TestMirrorNeverAdmitsARetry: a retry always goes to cooldownd, which
// keeps the fleet's retry budget.
func TestMirrorNeverAdmitsARetry(t *testing.T) {
	t.Parallel()
	svc := newFakeService(fastPolicy())
	c := servedMirror(t, svc)
	cn := NewConn(ID{1}, "p")
	admitMirrored(t, c, cn)
	before := svc.admits.Load()
	a, err := c.AdmitAttempt(t.Context(), Attempt{Candidates: []Conn{cn}, Sent: []Conn{cn}})
	require.NoError(t, err)
	assert.False(t, a.Mirrored, "a retry is cooldownd's to admit")
	assert.True(t, a.Retry)
	assert.Equal(t, before+1, svc.admits.Load())
	reqs := svc.admitRequests()
	assert.Equal(t, []bool{true}, reqs[len(reqs)-1].GetRetry())

	// The guard's retry after a failure goes to cooldownd too.
	n := 0
	resp, err := c.Do(t.Context(), cn, func(context.Context) (*http.Response, error) {
		n++
		if n == 1 {
			return response(500, nil, ""), nil
		}
		return response(200, nil, "ok"), nil
	})
	require.NoError(t, err)
	_ = resp.Body.Close()
	reqs = svc.admitRequests()
	assert.Equal(t, []bool{true}, reqs[len(reqs)-1].GetRetry(), "the guard's retry was sent to cooldownd, marked")
}

// TestMirrorStopsWhileThrottled: once cooldownd says a connection's
// throttle is above 0 — in an Admit answer, a batched or direct report's
// answer, or an event — the mirror admits it no more until an Admit answer
// says 0 again.
func TestMirrorStopsWhileThrottled(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		show func(t *testing.T, svc *fakeService, c *Client, cn Conn, adm Admission)
	}{
		{"an Admit answer", func(t *testing.T, _ *fakeService, c *Client, cn Conn, _ Admission) {
			a, err := c.AdmitAttempt(t.Context(), Attempt{Candidates: []Conn{cn}, Sent: []Conn{cn}})
			require.NoError(t, err)
			require.False(t, a.Mirrored)
			require.NoError(t, c.Report(t.Context(), a, Classification{Outcome: OutcomeSuccess}))
		}},
		{"a batched report's answer", func(t *testing.T, _ *fakeService, c *Client, _ Conn, adm Admission) {
			require.NoError(t, c.Report(t.Context(), adm, Classification{Outcome: OutcomeSuccess}))
			require.NoError(t, c.Flush(t.Context()))
		}},
		{"a direct report's answer", func(t *testing.T, _ *fakeService, c *Client, _ Conn, adm Admission) {
			require.NoError(t, c.Report(t.Context(), adm, Classification{Outcome: OutcomeTransientFailure, HTTPStatus: 503}))
		}},
		{"an event", func(t *testing.T, svc *fakeService, c *Client, cn Conn, adm Admission) {
			require.NoError(t, c.Report(t.Context(), adm, Classification{Outcome: OutcomeSuccess}))
			svc.event(&cooldownv1.ConnectionState{Connection: wireConn(cn), State: cooldownv1.State_STATE_CLOSED,
				Revision: adm.Revision, Fleet: &cooldownv1.FleetCounts{ThrottleProbability: 0.4}})
			require.Eventually(t, func() bool { return !inMirror(c, cn) }, 5*time.Second, time.Millisecond)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := newFakeService(fastPolicy())
			p := throttleHook(svc)
			c := servedMirror(t, svc)
			cn := NewConn(ID{1}, "p")
			adm := admitMirrored(t, c, cn)

			p.Store(math.Float64bits(0.25))
			tt.show(t, svc, c, cn, adm)
			for i := range 3 {
				before := svc.admits.Load()
				a, err := c.Admit(t.Context(), cn)
				require.NoError(t, err)
				assert.False(t, a.Mirrored, "admit %d while throttled: asked cooldownd", i)
				assert.Equal(t, before+1, svc.admits.Load())
				require.NoError(t, c.Report(t.Context(), a, Classification{Outcome: OutcomeSuccess}))
			}

			p.Store(0)
			a, err := c.Admit(t.Context(), cn)
			require.NoError(t, err)
			assert.False(t, a.Mirrored, "cooldownd answers with 0 again")
			a, err = c.Admit(t.Context(), cn)
			require.NoError(t, err)
			assert.True(t, a.Mirrored, "and the mirror admits again")
		})
	}
}

// TestMirrorBatchesKeepRetriesApart: a batch is one report with one retry
// flag, so the successes of retries and of first attempts go in separate
// batches, each with the reporter.
func TestMirrorBatchesKeepRetriesApart(t *testing.T) {
	t.Parallel()
	svc := newFakeService(fastPolicy())
	c := servedMirror(t, svc, WithReporter("pod-a"))
	cn := NewConn(ID{1}, "p")
	admitMirrored(t, c, cn)
	before := len(svc.reportRequests())
	for range 3 {
		a, err := c.Admit(t.Context(), cn)
		require.NoError(t, err)
		require.True(t, a.Mirrored)
		require.NoError(t, c.Report(t.Context(), a, Classification{Outcome: OutcomeSuccess}))
	}
	for range 2 {
		a, err := c.AdmitAttempt(t.Context(), Attempt{Candidates: []Conn{cn}, Sent: []Conn{cn}})
		require.NoError(t, err)
		require.True(t, a.Retry)
		require.NoError(t, c.Report(t.Context(), a, Classification{Outcome: OutcomeSuccess}))
	}
	assert.Len(t, svc.reportRequests(), before, "successes wait for the batch")
	require.NoError(t, c.Flush(t.Context()))
	got := map[bool]uint32{}
	for _, r := range svc.reportRequests()[before:] {
		assert.Equal(t, "pod-a", r.GetReporter())
		assert.Equal(t, cooldownv1.Outcome_OUTCOME_SUCCESS, r.GetOutcome())
		got[r.GetRetry()] += r.GetCount()
	}
	assert.Equal(t, map[bool]uint32{false: 3, true: 2}, got)
	assert.Len(t, svc.reportRequests()[before:], 2, "one batch per retry flag")
}

// throttledAnswer hands m a report answer for id at revision 4, closed,
// with throttle probability p.
func throttledAnswer(m *mirror, id ID, p float64) {
	m.reportAnswer(NewConn(id, "p"), &cooldownv1.ReportResponse{State: cooldownv1.State_STATE_CLOSED, Revision: 4, ThrottleProbability: p})
}

// TestMirrorThrottleTicket: an Admit answer is learned only when no
// throttle was seen for its connection after the Admit was sent, and
// never when it carries a throttle or a shadow denial.
func TestMirrorThrottleTicket(t *testing.T) {
	t.Parallel()
	cn := NewConn(ID{1}, "p")
	allow := Admission{Conn: cn, Decision: DecisionAllow, Revision: 4}
	closed := cooldownv1.State_STATE_CLOSED
	tests := []struct {
		name  string
		steps func(m *mirror, now time.Time)
		retry bool
		want  bool // admitted from the mirror afterwards
	}{
		{"a healthy answer is learned", func(m *mirror, now time.Time) {
			_, tk, _ := m.admit(cn, false, false, now)
			m.learn(allow, closed, 0, tk, now)
		}, false, true},
		{"a retry is never admitted", func(m *mirror, now time.Time) {
			_, tk, _ := m.admit(cn, false, false, now)
			m.learn(allow, closed, 0, tk, now)
		}, true, false},
		{"an answer with a throttle is not learned", func(m *mirror, now time.Time) {
			_, tk, _ := m.admit(cn, false, false, now)
			m.learn(allow, closed, 0.01, tk, now)
		}, false, false},
		{"a shadow denial is not learned", func(m *mirror, now time.Time) {
			_, tk, _ := m.admit(cn, false, false, now)
			a := allow
			a.Shadowed = ReasonThrottled
			m.learn(a, closed, 0, tk, now)
		}, false, false},
		{"an answer sent before a throttle was seen is not learned", func(m *mirror, now time.Time) {
			_, tk, _ := m.admit(cn, false, false, now)
			throttledAnswer(m, cn.id, 0.5)
			m.learn(allow, closed, 0, tk, now)
		}, false, false},
		{"an answer sent after it is", func(m *mirror, now time.Time) {
			throttledAnswer(m, cn.id, 0.5)
			_, tk, _ := m.admit(cn, false, false, now)
			m.learn(allow, closed, 0, tk, now)
		}, false, true},
		{"a throttle of another connection does not matter", func(m *mirror, now time.Time) {
			_, tk, _ := m.admit(cn, false, false, now)
			throttledAnswer(m, ID{2}, 0.5)
			m.learn(allow, closed, 0, tk, now)
		}, false, true},
		{"a report answer with 0 does not end a throttle", func(m *mirror, now time.Time) {
			_, tk, _ := m.admit(cn, false, false, now)
			m.learn(allow, closed, 0, tk, now)
			throttledAnswer(m, cn.id, 0.5)
			throttledAnswer(m, cn.id, 0)
		}, false, false},
		{"a throttled event drops the entry", func(m *mirror, now time.Time) {
			_, tk, _ := m.admit(cn, false, false, now)
			m.learn(allow, closed, 0, tk, now)
			m.event(&cooldownv1.ConnectionState{Connection: wireConn(cn), State: closed, Revision: 5,
				Fleet: &cooldownv1.FleetCounts{ThrottleProbability: 0.1}}, now)
		}, false, false},
		{"a healthy event keeps it", func(m *mirror, now time.Time) {
			_, tk, _ := m.admit(cn, false, false, now)
			m.learn(allow, closed, 0, tk, now)
			m.event(&cooldownv1.ConnectionState{Connection: wireConn(cn), State: closed, Revision: 5,
				Fleet: &cooldownv1.FleetCounts{}}, now)
		}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := newMirror(nil, time.Hour)
			m.up()
			now := time.Unix(1_700_000_000, 0)
			tt.steps(m, now)
			_, _, ok := m.admit(cn, tt.retry, false, now)
			assert.Equal(t, tt.want, ok)
		})
	}
}
