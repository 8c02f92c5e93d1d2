package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// waitReplicasAuto is --wait-replicas auto (the default), see
// resolveWaitReplicas and decision 0047.
const waitReplicasAuto = math.MinInt32

// waitReplicasFlag is --wait-replicas: "auto" or a count.
type waitReplicasFlag struct{ n *int }

func (f waitReplicasFlag) String() string {
	if f.n == nil || *f.n == waitReplicasAuto {
		return "auto"
	}
	return strconv.Itoa(*f.n)
}

func (f waitReplicasFlag) Set(s string) error {
	if strings.EqualFold(strings.TrimSpace(s), "auto") {
		*f.n = waitReplicasAuto
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("want auto or a number of replicas, got %q", s)
	}
	*f.n = n
	return nil
}

// resolveWaitReplicas is how many replicas a transition waits for. An
// explicit count is kept. auto: none on the embedded Redis; one with
// Sentinel or Cluster (replicas are what they are for); on a single Redis
// one when its master reports a connected replica at startup, else none
// (a standalone without replicas would answer every transition
// NOT_REPLICATED).
func resolveWaitReplicas(ctx context.Context, cfg config, rdb redis.UniversalClient, log *slog.Logger) int {
	if cfg.waitReplicas != waitReplicasAuto {
		return cfg.waitReplicas
	}
	n := 0
	switch {
	case cfg.redis.embedded():
	case cfg.redis.mode == "sentinel" || cfg.redis.mode == "cluster":
		n = 1
	default:
		info, err := rdb.Info(ctx, "replication").Result()
		if err != nil {
			log.Warn("--wait-replicas auto: INFO replication failed; transitions do not wait for replicas", "err", err)
			return 0
		}
		if connectedReplicas(info) > 0 {
			n = 1
		}
	}
	log.Info("--wait-replicas auto", "replicas", n)
	return n
}

// connectedReplicas reads connected_slaves from INFO replication.
func connectedReplicas(info string) int {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}
