package main

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/redistest"
)

// seenHook records each command it sees by name, and whether its context
// had a deadline by then; the Cluster client's own topology reads (CLUSTER
// SLOTS, COMMAND), which it may send at any time, are left out.
type seenHook struct {
	mu       sync.Mutex
	names    []string
	deadline map[string]bool
}

func (h *seenHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *seenHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "cluster" || n == "command" {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		_, ok := ctx.Deadline()
		h.names = append(h.names, cmd.Name())
		if h.deadline == nil {
			h.deadline = map[string]bool{}
		}
		h.deadline[cmd.Name()] = ok
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *seenHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.names = append(h.names, "pipeline")
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *seenHook) take() ([]string, map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	names, dl := h.names, h.deadline
	h.names, h.deadline = nil, nil
	return names, dl
}

// TestClusterHooksSeeEachRoundTripOnce (issue 22): on a Cluster, a hook
// added to cooldownd's Redis client sees a command sent on one node's
// client directly (what a durable report does: its script and WAIT on a
// connection of its slot's master), and sees a command or pipeline that
// the ClusterClient routes exactly once. Before the fix the node clients
// had no hooks: the durable path ran without --redis-timeout and outside
// the latency histogram.
func TestClusterHooksSeeEachRoundTripOnce(t *testing.T) {
	t.Parallel()
	cc := redistest.Cluster(t)
	cfg := redisConfig{mode: "cluster", addrs: strings.Join(cc.Options().Addrs, ",")}
	rdb, _, err := cfg.client(func(string) string { return "" })
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err(), "node clients exist before the hooks are added")
	seen := &seenHook{}
	rdb.AddHook(timeoutHook{d: time.Minute})
	rdb.AddHook(seen) // inside the timeout: it sees the deadline the timeout set

	mk, ok := rdb.(interface {
		MasterForKey(context.Context, string) (*redis.Client, error)
	})
	require.True(t, ok, "the store must see a Cluster")
	for _, tc := range []struct {
		name string
		do   func(t *testing.T)
		want []string
	}{
		{"a routed command", func(t *testing.T) { require.NoError(t, rdb.Set(ctx, "{a}k", "v", 0).Err()) }, []string{"set"}},
		{"a routed pipeline", func(t *testing.T) {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, "{a}k"); p.Get(ctx, "{a}k"); return nil })
			require.NoError(t, err)
		}, []string{"pipeline"}},
		{"a held connection of a slot's master", func(t *testing.T) {
			node, err := mk.MasterForKey(ctx, "{a}k")
			require.NoError(t, err)
			conn := node.Conn()
			defer func() { _ = conn.Close() }()
			require.NoError(t, conn.Get(ctx, "{a}k").Err())
			require.NoError(t, conn.Wait(ctx, 0, 10*time.Millisecond).Err())
		}, []string{"get", "wait"}},
		{"a node client", func(t *testing.T) {
			node, err := mk.MasterForKey(ctx, "{b}k")
			require.NoError(t, err)
			require.NoError(t, node.Ping(ctx).Err())
		}, []string{"ping"}},
	} {
		// Not parallel: one hook records them all.
		seen.take()
		tc.do(t)
		names, deadline := seen.take()
		assert.Equal(t, tc.want, names, tc.name)
		for _, n := range tc.want {
			if n != "pipeline" {
				assert.True(t, deadline[n], "%s: %s ran without the timeout hook", tc.name, n)
			}
		}
	}
}

// TestClusterDurableReportIsMeasured (issue 22): cooldownd on a Cluster
// (without replicas) with --wait-replicas 1: a report that opens a
// connection waits on its slot's master, and that WAIT shows in the Redis
// latency histogram, once, as on single Redis. (That --redis-timeout
// bounds it is TestClusterHooksSeeEachRoundTripOnce's.)
func TestClusterDurableReportIsMeasured(t *testing.T) {
	t.Parallel()
	cc := redistest.Cluster(t)
	in := start(t, "--addr", "127.0.0.1:0", "--redis-mode", "cluster", "--redis-addrs", strings.Join(cc.Options().Addrs, ","),
		"--wait-replicas", "1", "--wait-timeout", "20ms")
	c := cooldownv1connect.NewCooldownServiceClient(h2c(), in.url())
	resp, err := c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
		Connection: &cooldownv1.Connection{Id: newID(5)}, Outcome: cooldownv1.Outcome_OUTCOME_RATE_LIMITED,
		RetryAfter: durationpb.New(time.Minute),
	}))
	require.NoError(t, err)
	assert.Equal(t, cooldownv1.Durability_DURABILITY_NOT_REPLICATED, resp.Msg.GetDurability(), "no replica acknowledged the open")
	code, body := httpGet(t, in.url()+"/metrics")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, 1, metricCount(t, body, `cooldownd_redis_duration_seconds_count{op="wait"}`), "the WAIT is measured once")
}

// metricCount is the value of a counter line of a /metrics body, 0 when
// absent.
func metricCount(t *testing.T, body, name string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\d+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}
