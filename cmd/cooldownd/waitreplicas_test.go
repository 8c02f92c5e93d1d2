package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/redistest"
)

// TestWaitReplicasAuto (issue 28 point 1, decision 0055): --wait-replicas
// defaults to auto, which waits for every replica the master reports at
// startup with Sentinel (at least one) and on a single Redis, for one on a
// Cluster, and for none on the embedded Redis or a single one without; an
// explicit count is kept. (Before decision 0055 auto was 1 with Sentinel
// whatever its replicas: a manual failover lost writes the demoted
// master's other replica had acknowledged.)
func TestWaitReplicasAuto(t *testing.T) {
	t.Parallel()
	lone := redistest.StartServer(t)
	withReplica := redistest.StartServer(t)
	_, port, err := net.SplitHostPort(withReplica.Addr)
	require.NoError(t, err)
	withTwo := redistest.StartServer(t)
	_, port2, err := net.SplitHostPort(withTwo.Addr)
	require.NoError(t, err)
	for _, r := range []*redistest.Server{
		redistest.StartServer(t, "--replicaof", "127.0.0.1", port),
		redistest.StartServer(t, "--replicaof", "127.0.0.1", port2),
		redistest.StartServer(t, "--replicaof", "127.0.0.1", port2),
	} {
		rc := redis.NewClient(&redis.Options{Addr: r.Addr})
		t.Cleanup(func() { _ = rc.Close() })
		for i := 0; ; i++ {
			info, err := rc.Info(t.Context(), "replication").Result()
			if err == nil && strings.Contains(info, "master_link_status:up") {
				break
			}
			require.Less(t, i, 200, "replica link not up after 10s: %v", err)
			time.Sleep(50 * time.Millisecond)
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name string
		args []string
		addr string // the Redis resolve reads, for a single one
		want int
	}{
		{"embedded", nil, "", 0},
		{"sentinel, two replicas", []string{"--redis-mode", "sentinel", "--redis-addrs", "127.0.0.1:1", "--redis-master-name", "m"}, withTwo.Addr, 2},
		{"sentinel, one replica", []string{"--redis-mode", "sentinel", "--redis-addrs", "127.0.0.1:1", "--redis-master-name", "m"}, withReplica.Addr, 1},
		{"sentinel, none yet", []string{"--redis-mode", "sentinel", "--redis-addrs", "127.0.0.1:1", "--redis-master-name", "m"}, lone.Addr, 1},
		{"cluster", []string{"--redis-mode", "cluster", "--redis-addrs", "127.0.0.1:1"}, "", 1},
		{"single without a replica", []string{"--redis-url", "redis://" + lone.Addr}, lone.Addr, 0},
		{"single with a replica", []string{"--redis-url", "redis://" + withReplica.Addr}, withReplica.Addr, 1},
		{"single with two replicas", []string{"--redis-url", "redis://" + withTwo.Addr}, withTwo.Addr, 2},
		{"explicit 0 with a replica", []string{"--redis-url", "redis://" + withReplica.Addr, "--wait-replicas", "0"}, withReplica.Addr, 0},
		{"explicit 2", []string{"--redis-url", "redis://" + lone.Addr, "--wait-replicas", "2"}, lone.Addr, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := parseConfig(tc.args, nil, io.Discard)
			require.NoError(t, err)
			var rdb redis.UniversalClient
			if tc.addr != "" {
				c := redis.NewClient(&redis.Options{Addr: tc.addr})
				t.Cleanup(func() { _ = c.Close() })
				rdb = c
			}
			assert.Equal(t, tc.want, resolveWaitReplicas(context.Background(), cfg, rdb, log))
		})
	}
}
