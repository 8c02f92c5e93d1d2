package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
)

// narrow is a client with the RedisClient commands and nothing else (the
// way a test wrapper or another client library would provide them).
type narrow struct{ RedisClient }

// wrappedCluster and wrappedClient are wrappers that embed a go-redis
// client, as a fault-injecting test client does.
type (
	wrappedCluster struct{ *redis.ClusterClient }
	wrappedClient  struct{ *redis.Client }
)

var wrappedTenants atomic.Int64

// TestRedisClients runs every command of RedisClient through the store on
// each kind of client it accepts: a single Redis behind the bare
// interface, a Cluster behind a wrapper (still a Cluster: AdmitFirst over
// candidates in three slots, which one script would fail with CROSSSLOT)
// and a Sentinel failover client behind a wrapper, with Durability (an
// opening report is on the replica when it returns).
func TestRedisClients(t *testing.T) {
	t.Parallel()
	sentinel := redistest.Sentinel(t)
	failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sentinel.MasterName, SentinelAddrs: []string{sentinel.SentinelAddr}})
	t.Cleanup(func() { _ = failover.Close() })
	master := redis.NewClient(&redis.Options{Addr: sentinel.Master.Addr})
	replica := redis.NewClient(&redis.Options{Addr: sentinel.Replica.Addr})
	t.Cleanup(func() { _ = master.Close(); _ = replica.Close() })
	type durable struct{ master, replica *redis.Client }
	topos := []struct {
		name string
		rdb  RedisClient
		opts Options
		// set: each opening report waits (WAIT on the master) and is on
		// the replica when it returns.
		durable *durable
	}{
		{"single behind the interface", narrow{redistest.Real(t)}, Options{}, nil},
		{"cluster behind a wrapper", wrappedCluster{redistest.Cluster(t)}, Options{}, nil},
		// A generous timeout: this is about where WAIT runs, not how fast.
		{"sentinel behind a wrapper, durable", wrappedClient{failover},
			Options{Durability: Durability{Replicas: 1, Timeout: 10 * time.Second}}, &durable{master, replica}},
	}
	for _, topo := range topos {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st, err := New(topo.rdb, topo.opts)
			require.NoError(t, err)
			require.NoError(t, st.Ping(ctx))
			tenant := fmt.Sprintf("rc%d", wrappedTenants.Add(1))
			cands := conns(t, tenant, 3, false)

			wctx, stop := context.WithCancel(ctx)
			defer stop()
			events, err := st.Watch(wctx, tenant)
			require.NoError(t, err)
			for i, c := range cands[:2] {
				_, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: time.Hour.Milliseconds()})
				require.NoError(t, err)
				if d := topo.durable; d != nil {
					assert.Equal(t, int64(i+1), waitCalls(t, d.master), "opening reports waited for the replica")
					n, err := d.replica.Exists(ctx, c.layout().State()).Result()
					require.NoError(t, err)
					assert.Equal(t, int64(1), n, "the replica holds the opening report")
				}
			}
			_, err = st.Report(ctx, cands[2], breaker.Report{Outcome: breaker.OutcomeSuccess})
			require.NoError(t, err)
			if d := topo.durable; d != nil {
				assert.Equal(t, int64(2), waitCalls(t, d.master), "a success does not wait")
			}
			// Both openings are published. Their order is not kept across
			// Cluster masters: each publishes on its own node, and the
			// subscriber's node hears the other's over the cluster bus.
			opened := map[keys.ID]breaker.Phase{}
			deadline := time.After(30 * time.Second)
			for opened[cands[0].ID] == 0 || opened[cands[1].ID] == 0 {
				select {
				case tr := <-events:
					opened[tr.ID] = tr.To
				case <-deadline:
					t.Fatalf("transitions published within 30s: %v, want both openings", opened)
				}
			}
			assert.Equal(t, breaker.Open, opened[cands[0].ID])
			assert.Equal(t, breaker.Open, opened[cands[1].ID])

			idx, ds, err := st.AdmitFirst(ctx, cands)
			require.NoError(t, err)
			assert.Equal(t, 2, idx)
			require.Len(t, ds, 3)
			assert.Equal(t, []breaker.Decision{breaker.Deny, breaker.Deny, breaker.Allow},
				[]breaker.Decision{ds[0].Decision, ds[1].Decision, ds[2].Decision})

			page, more, err := st.List(ctx, tenant, "", 2)
			require.NoError(t, err)
			require.Len(t, page, 2)
			assert.True(t, more)
			rest, more, err := st.List(ctx, tenant, page[1].ID.String(), 2)
			require.NoError(t, err)
			assert.Len(t, rest, 1)
			assert.False(t, more)
			n, err := st.Count(ctx, tenant)
			require.NoError(t, err)
			assert.Equal(t, int64(3), n)

			tenants, err := st.Tenants(ctx)
			require.NoError(t, err)
			assert.Contains(t, tenants, tenant)
			require.NoError(t, st.Sweep(ctx))
			lock := st.newSweepLock() // redislock, on the same client
			held, err := lock.hold(ctx)
			require.NoError(t, err)
			require.True(t, held, "each topology is a Redis of its own: nobody else holds the lock")
			lock.release(ctx)
		})
	}
}

// TestNewChecksDurability: Durability needs a connection of the client's
// own for WAIT; New refuses a client that cannot give one rather than
// acknowledge reports it did not wait for.
func TestNewChecksDurability(t *testing.T) {
	t.Parallel()
	_, rdb := redistest.Mini(t)
	durable := Options{Durability: Durability{Replicas: 1}}
	cases := []struct {
		name string
		rdb  RedisClient
		opts Options
		ok   bool
	}{
		{"a client, durable", rdb, durable, true},
		{"a wrapper embedding a client, durable", wrappedClient{rdb}, durable, true},
		{"the bare interface", narrow{rdb}, Options{}, true},
		{"the bare interface, durable", narrow{rdb}, durable, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tc.rdb, tc.opts)
			if tc.ok {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "durability")
		})
	}
}

// waitCalls is how many WAIT commands a Redis server has run.
func waitCalls(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_wait:calls="); ok {
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest+",", ',')], 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	return 0
}
