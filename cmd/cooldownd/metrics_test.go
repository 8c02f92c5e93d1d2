package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRedisLatencyIsMeasured: the go-redis hook feeds the Redis round-trip
// histogram on /metrics.
func TestRedisLatencyIsMeasured(t *testing.T) {
	t.Parallel()
	in := start(t, "--addr", "127.0.0.1:0")
	exercise(t, in.url())
	code, body := httpGet(t, in.url()+"/metrics")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `cooldownd_redis_duration_seconds_count{op="evalsha"}`)
}

// TestLivezDoesNotNeedRedis: liveness stays up while readiness follows Redis.
func TestLivez(t *testing.T) {
	t.Parallel()
	in := start(t, "--addr", "127.0.0.1:0")
	code, body := httpGet(t, in.url()+"/livez")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok\n", body)
}
