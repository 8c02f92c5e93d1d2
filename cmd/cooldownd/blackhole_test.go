package main

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/redistest"
)

// TestDeadlinesHoldWhenRedisIsBlackholed: with Redis answering nothing, an
// Admit sent with a 250 ms deadline answers within it, one without a
// deadline answers unavailable after the store timeout, and readiness
// answers within its own bound. (Before: 5.0 s and 5-6 s.)
func TestDeadlinesHoldWhenRedisIsBlackholed(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	bh := redistest.StartProxy(t, srv.Addr) // blackholes Redis on Swallow
	in := start(t, "--addr", "127.0.0.1:0", "--redis-url", "redis://"+bh.Addr(), "--readiness-timeout", "300ms", "--redis-timeout", "200ms")
	c := cooldownv1connect.NewCooldownServiceClient(h2c(), in.url())
	req := func() *connect.Request[cooldownv1.AdmitRequest] {
		return connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{{Id: newID(7)}}})
	}
	// Redis answers through the proxy. (A loaded test machine can exceed
	// the 200 ms store timeout once, on the first call that loads the
	// script: retry a few times.)
	var err error
	for range 20 {
		if _, err = c.Admit(t.Context(), req()); err == nil {
			break
		}
	}
	require.NoError(t, err, "Redis answers through the proxy")

	bh.Swallow(true)

	// bound is far above what each call should take (250 ms, 200 ms,
	// 300 ms) and far below what it took before (5 s and more).
	const bound = 2 * time.Second
	// The deadline is sent as Connect-Timeout-Ms with no deadline on the
	// test's side: what is measured is when the server answers.
	body := `{"candidates":[{"id":"` + base64.StdEncoding.EncodeToString(newID(7)) + `"}]}`
	hc := &http.Client{Timeout: 10 * time.Second}
	for i := range 3 { // pooled connections, then new dials: both are bounded
		hreq, err := http.NewRequestWithContext(t.Context(), http.MethodPost, in.url()+"/cooldown.v1.CooldownService/Admit", strings.NewReader(body))
		require.NoError(t, err)
		hreq.Header.Set("Content-Type", "application/json")
		hreq.Header.Set("Connect-Timeout-Ms", "250")
		began := time.Now()
		res, err := hc.Do(hreq)
		took := time.Since(began)
		require.NoError(t, err)
		answer, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		assert.NotEqual(t, http.StatusOK, res.StatusCode, "%s", answer)
		assert.Less(t, took, bound, "Admit %d with Connect-Timeout-Ms 250 took %s", i, took)
		t.Logf("Admit with Connect-Timeout-Ms 250, Redis blackholed: answered in %s: %s", took, answer)
	}

	began := time.Now()
	_, err = c.Admit(t.Context(), req())
	took := time.Since(began)
	require.Error(t, err)
	assert.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "the store timed out: clients may degrade")
	assert.Contains(t, err.Error(), "timed out")
	assert.Less(t, took, bound, "Admit without a deadline is bounded by --redis-timeout")
	t.Logf("Admit without a deadline, Redis blackholed: %s", took)

	began = time.Now()
	res, err := hc.Get(in.url() + "/healthz")
	took = time.Since(began)
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	assert.Less(t, took, bound, "/healthz answers within --readiness-timeout")
	t.Logf("/healthz with --readiness-timeout 300ms, Redis blackholed: %s", took)

	// And once the path answers again, so does cooldownd.
	bh.Swallow(false)
	bh.Reset()
	var lastErr error
	for range 100 {
		if _, lastErr = c.Admit(t.Context(), req()); lastErr == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, lastErr, "recovers when Redis answers again")
	assert.False(t, errors.Is(lastErr, context.DeadlineExceeded))
}
