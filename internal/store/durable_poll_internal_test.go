package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
)

// TestPollMarksReplicasShort: a process that has not written since its
// master lost a replica learns it from the master's INFO (Store.Run polls
// it every replicaPoll), not only from a WAIT of its own: then the calls
// that wrote nothing are answered NotReplicated too. In the chaos run's
// manual failover another process's denial, read from a write answered
// NOT_REPLICATED to its writer and then lost, was answered as if firm.
func TestPollMarksReplicasShort(t *testing.T) {
	t.Parallel()
	m := redistest.StartServer(t, "--repl-diskless-sync-delay", "0")
	r := redistest.StartServer(t, "--replicaof", "127.0.0.1", m.Addr[strings.LastIndexByte(m.Addr, ':')+1:])
	master := redis.NewClient(&redis.Options{Addr: m.Addr})
	t.Cleanup(func() { _ = master.Close() })
	connected := func() bool {
		info, err := master.Info(context.Background(), "replication").Result()
		require.NoError(t, err)
		return !strings.Contains(info, "connected_slaves:0")
	}
	for i := 0; !connected(); i++ {
		require.Less(t, i, 200, "the replica did not connect in 10 s")
		time.Sleep(50 * time.Millisecond)
	}
	st, err := New(master, Options{Durability: Durability{Replicas: 1}})
	require.NoError(t, err)
	ctx := context.Background()

	st.pollReplicas(ctx)
	repl, err := st.awaitReplicas(ctx, nil, false, false)
	require.NoError(t, err)
	assert.Equal(t, ReplicationNone, repl, "the replica is connected: a call that wrote nothing says nothing")

	r.Stop()
	for i := 0; connected(); i++ {
		require.Less(t, i, 200, "the master still counts the replica after 10 s")
		time.Sleep(50 * time.Millisecond)
	}
	st.pollReplicas(ctx)
	repl, err = st.awaitReplicas(ctx, nil, false, false)
	require.NoError(t, err)
	assert.Equal(t, NotReplicated, repl, "the master has no replica: what it read may be lost")
	d, err := st.Admit(ctx, Conn{Tenant: "t", ID: keys.ID{1}})
	require.NoError(t, err)
	assert.Equal(t, NotReplicated, d.Durability, "…and so is a healthy Admit, without a WAIT of its own")
}
