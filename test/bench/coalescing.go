package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/proctest"
)

// startCoalescing starts o.replicas cooldownd coalescing every
// -coalesce-interval on the Cluster at addrs; with -coalesce-route they
// route each connection's batches to its owner among them (decision
// 0064), and it returns once every one of them sees all the others.
func startCoalescing(ctx context.Context, ps *proctest.Group, o options, addrs []string) ([]replica, error) {
	var tok string
	if coalesceRoute {
		dir, err := os.MkdirTemp("", "cooldownd-bench-peers")
		if err != nil {
			return nil, err
		}
		tok = filepath.Join(dir, "peer-token")
		if err := os.WriteFile(tok, []byte("bench-peer-token-0123456789\n"), 0o600); err != nil {
			return nil, err
		}
	}
	var out []replica
	for i := range o.replicas {
		r, err := startServing(ctx, ps, fmt.Sprintf("cooldownd-coalescing-%d", i), func(addr string) *exec.Cmd {
			args := []string{"--addr", addr, "--log-level", "warn", "--redis-mode", "cluster", "--redis-addrs", strings.Join(addrs, ","),
				"--redis-timeout", clusterRedisTimeout.String(), "--wait-replicas", "0", "--coalesce-interval", coalesceInterval.String()}
			if tok != "" {
				args = append(args, "--coalesce-peer-address", addr, "--coalesce-peer-token-file", tok)
			}
			return exec.Command(o.bin, args...)
		})
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if tok == "" {
		return out, nil
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer func() { _ = rdb.Close() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, err := rdb.ZCard(ctx, keys.Peers).Result()
		if err == nil && n == int64(o.replicas) {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("coalescing replicas: %d of %d registered as peers (%v)", n, o.replicas, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Each renews every second: by then every one has read them all.
	time.Sleep(1500 * time.Millisecond)
	return out, nil
}

// coalesceBound is the hot connection's most batches/s with coalescing,
// and why: one owner per connection when routed, else each replica.
func coalesceBound(o options) (float64, string) {
	if coalesceRoute {
		return 1 / coalesceInterval.Seconds(), fmt.Sprintf("its owner × 1/%s (routed among %d replicas)", coalesceInterval, o.replicas)
	}
	return float64(o.replicas) / coalesceInterval.Seconds(), fmt.Sprintf("%d replicas × 1/%s", o.replicas, coalesceInterval)
}

// routedNote names routing in a phase's title.
func routedNote() string {
	if coalesceRoute {
		return ", routed to one owner"
	}
	return ""
}
