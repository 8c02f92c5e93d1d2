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
	assert.Equal(t, OK, s.At("primary", 0, 999*time.Millisecond).Kind)
	assert.Equal(t, Error, s.At("primary", 0, time.Second).Kind)
	assert.Equal(t, OK, s.At("fallback", 0, 1500*time.Millisecond).Kind)
	assert.Equal(t, OK, s.At("primary", 0, 2*time.Second).Kind, "To is exclusive")
	assert.Equal(t, Hang, s.At("fallback", 0, 3*time.Second).Kind, "an empty key matches every key")

	broken := Script{Phases: []Phase{{Key: "primary", Workers: []int{2}, From: 0, To: time.Second, Kind: Error}}}
	assert.Equal(t, Error, broken.At("primary", 2, 0).Kind, "the broken worker's path")
	assert.Equal(t, OK, broken.At("primary", 1, 0).Kind, "another worker")
	assert.Equal(t, OK, broken.At("fallback", 2, 0).Kind, "another key")
}

// TestCapacity: a capacity phase serves the first Capacity × slot
// requests of each slot and key and fails the rest with 500; a retry is
// logged as one.
func TestCapacity(t *testing.T) {
	t.Parallel()
	start := time.Now().Add(-time.Hour).Truncate(CapacitySlot) // far inside the phase: no slot boundary in the test
	p := New(Script{Phases: []Phase{{Key: "primary", From: 0, To: 2 * time.Hour, Kind: Capacity, Capacity: 30}}}, start)
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close)
	call := func(key string, retry bool) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/chat", nil)
		require.NoError(t, err)
		req.Header.Set(HeaderKey, key)
		if retry {
			req.Header.Set(HeaderRetry, "1")
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for {
		// 30/s is 3 per 100 ms slot: the first 3 of a slot are served.
		// Wait for a fresh slot so that the 5 calls share one.
		if time.Since(start)%CapacitySlot < CapacitySlot/2 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	got := []int{call("primary", false), call("primary", true), call("primary", false), call("primary", true), call("other", false)}
	log := p.Log()
	slotOf := func(a Arrival) int64 { return (a.At - start.UnixNano()) / int64(CapacitySlot) }
	if slotOf(log[0]) != slotOf(log[3]) {
		t.Skip("the machine was too slow to keep 4 calls in one slot")
	}
	assert.Equal(t, []int{200, 200, 200, 500, 200}, got, "3 served, the 4th over capacity; another key is not limited")
	assert.True(t, log[1].Retry)
	assert.False(t, log[0].Retry)
	assert.False(t, log[0].Failing(), "served within capacity")
	assert.True(t, log[3].Failing(), "over capacity")
	assert.Equal(t, Capacity, log[3].Kind)
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
