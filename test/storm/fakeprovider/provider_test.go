package fakeprovider

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScriptAt(t *testing.T) {
	t.Parallel()
	s := Script{Phases: []Phase{
		{Key: "primary", From: time.Second, To: 2 * time.Second, Kind: Error},
		{From: 3 * time.Second, To: 4 * time.Second, Kind: Hang},
	}}
	assert.Equal(t, OK, s.At("primary", 999*time.Millisecond).Kind)
	assert.Equal(t, Error, s.At("primary", time.Second).Kind)
	assert.Equal(t, OK, s.At("fallback", 1500*time.Millisecond).Kind)
	assert.Equal(t, OK, s.At("primary", 2*time.Second).Kind, "To is exclusive")
	assert.Equal(t, Hang, s.At("fallback", 3*time.Second).Kind, "an empty key matches every key")
}

func TestProviderAnswersAndLogs(t *testing.T) {
	t.Parallel()
	start := time.Now()
	p := New(Script{Phases: []Phase{
		{Key: "limited", From: 0, To: time.Hour, Kind: RateLimit, RetryAfter: 1500 * time.Millisecond},
		{Key: "quota", From: 0, To: time.Hour, Kind: Quota},
		{Key: "hang", From: 0, To: time.Hour, Kind: Hang},
	}}, start)
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close)

	call := func(ctx context.Context, key string, probe bool) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat", nil)
		require.NoError(t, err)
		req.Header.Set(HeaderKey, key)
		req.Header.Set(HeaderWorker, "3")
		req.Header.Set(HeaderSentAt, "42")
		if probe {
			req.Header.Set(HeaderProbe, "1")
		}
		return srv.Client().Do(req)
	}
	resp, err := call(t.Context(), "ok", true)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	_ = resp.Body.Close()

	resp, err = call(t.Context(), "limited", false)
	require.NoError(t, err)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "1500", resp.Header.Get("Retry-After-Ms"))
	assert.Equal(t, "2", resp.Header.Get("Retry-After"), "whole seconds, rounded up")
	_ = resp.Body.Close()

	resp, err = call(t.Context(), "quota", false)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Contains(t, string(body), "insufficient_quota")

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err = call(ctx, "hang", true)
	require.Error(t, err, "a hanging answer lasts until the client gives up")
	require.Eventually(t, func() bool { return len(p.InFlight()) == 0 }, 2*time.Second, 5*time.Millisecond)

	log := p.Log()
	require.Len(t, log, 4)
	assert.True(t, log[0].Probe)
	assert.Equal(t, 3, log[0].Worker)
	assert.Equal(t, int64(42), log[0].SentAt)
	assert.Equal(t, 1, log[0].ProbesInFlight)
	assert.Equal(t, 1500*time.Millisecond, log[1].RetryAfter)
	assert.Equal(t, Quota, log[2].Kind)
	assert.Equal(t, Hang, log[3].Kind)
	assert.Zero(t, log[3].Status, "abandoned without an answer")
	assert.GreaterOrEqual(t, log[3].End, log[3].At)
}
