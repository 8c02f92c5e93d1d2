package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLocalFallbackAndRecovery(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	prov := newProvider(t)
	log, logs := newLogger()
	c := newClient(t, cd.URL, WithLogger(log), WithAdmitTimeout(time.Second), WithServiceRetry(100*time.Millisecond))
	cn := conn(t, c, prov.URL, "key-1", "")
	do := func() {
		t.Helper()
		resp, err := c.Do(t.Context(), cn, prov.get())
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}

	do()
	require.False(t, c.Degraded())
	served := cd.Calls()

	cd.Stop()
	for range 5 {
		do() // never blocked because cooldownd is down
	}
	assert.True(t, c.Degraded())
	assert.Equal(t, int64(6), prov.hits.Load())
	assert.Equal(t, 1, strings.Count(logs.String(), "cooldownd unreachable"), "the outage is logged once:\n%s", logs)
	a, err := c.Admit(t.Context(), cn)
	require.NoError(t, err)
	assert.True(t, a.Local, "decided in-process")
	require.NoError(t, c.Report(t.Context(), a, Classification{Outcome: OutcomeCanceled}))

	cd.restart(t)
	require.Eventually(t, func() bool {
		do()
		return !c.Degraded()
	}, 5*time.Second, 50*time.Millisecond, "goes back to cooldownd by itself")
	assert.Greater(t, cd.Calls(), served, "the new server answered")
	do()
	a, err = c.Admit(t.Context(), cn)
	require.NoError(t, err)
	assert.False(t, a.Local)
	require.NoError(t, c.Report(t.Context(), a, Classification{Outcome: OutcomeSuccess}))
	assert.Equal(t, 1, strings.Count(logs.String(), "cooldownd unreachable"), "logs:\n%s", logs)
	assert.Equal(t, 1, strings.Count(logs.String(), "cooldownd reachable again"), "recovery is logged once:\n%s", logs)
}

func TestLocalBreakerDecidesWhileDegraded(t *testing.T) {
	t.Parallel()
	p := DefaultPolicy()
	p.ConsecutiveFailures = 2
	p.OpenBase = time.Minute
	p.OpenMax = time.Minute
	prov := newProvider(t, reply{status: 500})
	c := newClient(t, "http://127.0.0.1:1", WithLocalPolicy(p), WithMaxRetries(5), WithNoWait())
	cn := conn(t, c, prov.URL, "key-1", "")
	_, err := c.Do(t.Context(), cn, prov.get())
	var d *DeniedError
	require.ErrorAs(t, err, &d, "the local breaker tripped and denied the third attempt")
	assert.True(t, d.Local)
	assert.Equal(t, ReasonOpen, d.Reason)
	assert.Equal(t, 2, d.Attempts)
	assert.Equal(t, int64(2), prov.hits.Load())
	var e *Error
	require.ErrorAs(t, err, &e, "the denial carries the last attempt's error")
	assert.Equal(t, http.StatusInternalServerError, e.HTTPStatus)
}

func TestFailClosed(t *testing.T) {
	t.Parallel()
	prov := newProvider(t)
	c := newClient(t, "http://127.0.0.1:1", WithFailMode(FailClosed))
	cn := conn(t, c, prov.URL, "key-1", "")

	_, err := c.Admit(t.Context(), cn)
	require.ErrorIs(t, err, ErrUnavailable)

	_, err = c.Do(t.Context(), cn, prov.get())
	var d *DeniedError
	require.ErrorAs(t, err, &d)
	assert.Equal(t, ReasonUnavailable, d.Reason)
	assert.ErrorIs(t, err, ErrUnavailable)
	assert.ErrorIs(t, err, ErrDenied)
	assert.Equal(t, int64(0), prov.hits.Load())
}

// TestSlowAdmit: one slow Admit is decided in-process for that call only;
// the client degrades after DefaultDegradeAfter of them in a row.
func TestSlowAdmit(t *testing.T) {
	t.Parallel()
	stall := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stall:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(stall) })
	c := newClient(t, hang.URL, WithAdmitTimeout(50*time.Millisecond))
	cn := conn(t, c, "https://api.example.com/v1", "key-1", "")
	for i := range DefaultDegradeAfter {
		start := time.Now()
		a, err := c.Admit(context.Background(), cn)
		require.NoError(t, err)
		assert.True(t, a.Local, "a slow call is decided in-process")
		assert.Less(t, time.Since(start), time.Second)
		assert.Equal(t, i == DefaultDegradeAfter-1, c.Degraded(), "degraded after call %d", i+1)
	}
	assert.Equal(t, uint64(1), c.Stats().Degradations)
	assert.Equal(t, uint64(DefaultDegradeAfter), c.Stats().LocalDecisions)
}

func TestTenantCapNotAnOutage(t *testing.T) {
	t.Parallel()
	for _, mode := range []FailMode{FailOpen, FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			cd := startCooldownd(t, fastPolicy(), "--max-connections-per-tenant=1")
			prov := newProvider(t)
			log, logs := newLogger()
			c := newClient(t, cd.URL, WithLogger(log), WithFailMode(mode))
			for _, key := range []string{"key-1", "key-2", "key-3"} {
				resp, err := c.Do(t.Context(), conn(t, c, prov.URL, key, ""), prov.get())
				require.NoError(t, err, "a connection over the cap is still called, fail-closed or not")
				require.NoError(t, resp.Body.Close())
			}
			assert.False(t, c.Degraded())
			assert.Equal(t, int64(3), prov.hits.Load())
			require.NoError(t, c.Flush(t.Context())) // with the mirror (the default) the successes go in a batch
			assert.Equal(t, 1, strings.Count(logs.String(), "cannot track more connections"), "logged once:\n%s", logs)
			assert.NotContains(t, logs.String(), "unreachable")
		})
	}
}
