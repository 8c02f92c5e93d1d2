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
// explicit count is kept. auto (decision 0055): none on the embedded
// Redis; one with Cluster (its manual failover hands over in step, and an
// automatic one elects the replica with the most data); with Sentinel and
// on a single Redis every replica its master reports at startup (at least
// one with Sentinel): in a manual Sentinel failover the demoted master
// keeps its other replicas until Sentinel repoints them, so a write one of
// them acknowledged may be lost; a single Redis without replicas waits for
// none (it would answer every transition NOT_REPLICATED).
func resolveWaitReplicas(ctx context.Context, cfg config, rdb redis.UniversalClient, log *slog.Logger) int {
	if cfg.waitReplicas != waitReplicasAuto {
		return cfg.waitReplicas
	}
	n := 0
	switch {
	case cfg.redis.embedded():
	case cfg.redis.mode == "cluster":
		n = 1
	default:
		if cfg.redis.mode == "sentinel" {
			n = 1 // at least: a Sentinel master has replicas
		}
		info, err := rdb.Info(ctx, "replication").Result()
		if err != nil {
			log.Warn("--wait-replicas auto: INFO replication failed", "err", err, "replicas", n)
			return n
		}
		n = min(max(n, connectedReplicas(info)), 16)
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
