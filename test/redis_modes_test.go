//go:build integration

package test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// TestSentinelFailover proves that cooldownd keeps working across a
// Sentinel failover and keeps the state the replica had.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	s := redistest.Sentinel(t)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: []string{s.SentinelAddr},
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: 3})
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := store.New(rdb, store.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	c := store.Conn{Tenant: "t", ID: keys.ID{1, 2, 3}}
	_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeQuotaExhausted})
	require.NoError(t, err)
	// Wait until the replica has the state, then fail over.
	master := redis.NewClient(&redis.Options{Addr: s.Master.Addr})
	defer func() { _ = master.Close() }()
	acked, err := master.Do(ctx, "WAIT", 1, 5000).Int()
	require.NoError(t, err)
	require.Equal(t, 1, acked, "the replica must hold the state before the failover")
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.SentinelAddr})
	defer func() { _ = sc.Close() }()
	start := time.Now()
	require.NoError(t, sc.Failover(ctx, s.MasterName).Err())

	var d store.Decision
	deadline := time.Now().Add(15 * time.Second)
	for {
		addr, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
		if err == nil && addr[0]+":"+addr[1] == s.Replica.Addr {
			if d, err = st.Admit(ctx, c); err == nil {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "no working Admit within 15s of the failover: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("Admit answered from the new master %s after the failover", time.Since(start).Round(time.Millisecond))
	assert.Equal(t, breaker.Deny, d.Decision, "the quota block survived the failover")
	assert.Equal(t, breaker.ReasonQuota, d.Reason)
	_, err = st.Report(ctx, store.Conn{Tenant: "t", ID: keys.ID{9}}, breaker.Report{Outcome: breaker.OutcomeSuccess})
	require.NoError(t, err, "Report works on the new master")
}

// TestClusterSpreadsConnections runs Admit/Report/List on a 3-master Cluster.
func TestClusterSpreadsConnections(t *testing.T) {
	t.Parallel()
	cc := redistest.Cluster(t)
	st, err := store.New(cc, store.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 30 {
		_, err := st.Report(ctx, store.Conn{Tenant: "t", ID: keys.ID{byte(i), 7}}, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 60_000})
		require.NoError(t, err)
	}
	snaps, more, err := st.List(ctx, "t", "", 100)
	require.NoError(t, err)
	assert.False(t, more)
	assert.Len(t, snaps, 30)
	var mu sync.Mutex // ForEachMaster runs the function concurrently
	nodes := map[string]bool{}
	require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		mu.Lock()
		defer mu.Unlock()
		if n > 0 {
			nodes[m.Options().Addr] = true
		}
		return err
	}))
	assert.Len(t, nodes, 3, "connections spread over every master")
	d, err := st.Admit(ctx, store.Conn{Tenant: "t", ID: keys.ID{3, 7}})
	require.NoError(t, err)
	assert.Equal(t, breaker.ReasonCooldown, d.Reason)
}
