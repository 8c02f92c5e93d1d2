package client

import (
	"context"
	"io"
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
	admits, reports := counting(cd)
	c := mirrored(t, cd)
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
