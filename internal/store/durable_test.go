package store_test

import (
	"context"
	"encoding/binary"
	"net"
	"slices"
	"strings"
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

// replicated starts a master and a replica that replicates through a
// proxy the test can stall, and returns a client of each.
func replicated(tb testing.TB) (master, replica *redis.Client, link *redistest.Proxy) {
	tb.Helper()
	m := redistest.StartServer(tb)
	link = redistest.StartProxy(tb, m.Addr)
	_, port, err := net.SplitHostPort(link.Addr())
	require.NoError(tb, err)
	r := redistest.StartServer(tb, "--replicaof", "127.0.0.1", port)
	master = redis.NewClient(&redis.Options{Addr: m.Addr})
	replica = redis.NewClient(&redis.Options{Addr: r.Addr})
	tb.Cleanup(func() { _ = master.Close(); _ = replica.Close() })
	waitLink(tb, replica)
	return master, replica, link
}

func waitLink(tb testing.TB, replica *redis.Client) {
	tb.Helper()
	for i := 0; ; i++ {
		info, err := replica.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return
		}
		if i == 200 {
			tb.Fatalf("replica link not up after 10s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func onReplica(t *testing.T, replica *redis.Client, c store.Conn) bool {
	t.Helper()
	n, err := replica.Exists(context.Background(), keys.Layout{Tenant: c.Tenant, ID: c.ID}.State()).Result()
	require.NoError(t, err)
	return n == 1
}

// TestDurableReportsWaitForTheReplica: with Durability, a report that
// opens a connection is acknowledged only once the replica has it, so a
// failover cannot lose it; when the replica does not answer, the report
// fails unavailable instead of being acknowledged. Without it the report
// is acknowledged while the replica lacks it: the loss window of a
// failover.
func TestDurableReportsWaitForTheReplica(t *testing.T) {
	t.Parallel()
	master, replica, link := replicated(t)
	ctx := context.Background()
	durable, err := store.New(master, store.Options{Durability: store.Durability{Replicas: 1, Timeout: 100 * time.Millisecond}})
	require.NoError(t, err)
	async, err := store.New(master, store.Options{})
	require.NoError(t, err)
	open := breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 60_000}

	c1 := store.Conn{Tenant: "t", ID: testID(1)}
	_, err = durable.Report(ctx, c1, open)
	require.NoError(t, err)
	assert.True(t, onReplica(t, replica, c1), "acknowledged: the replica has it")

	link.Swallow(true) // the replication link stalls
	t.Cleanup(func() { link.Swallow(false); link.Reset() })
	c2 := store.Conn{Tenant: "t", ID: testID(2)}
	_, err = durable.Report(ctx, c2, open)
	require.ErrorIs(t, err, store.ErrUnavailable, "not acknowledged by the replica: not acknowledged")
	assert.Contains(t, err.Error(), "0 of 1 replicas")

	c3 := store.Conn{Tenant: "t", ID: testID(3)}
	_, err = durable.Report(ctx, c3, breaker.Report{Outcome: breaker.OutcomeSuccess})
	require.NoError(t, err, "a report that opens nothing does not wait")

	c4 := store.Conn{Tenant: "t", ID: testID(4)}
	_, err = async.Report(ctx, c4, open)
	require.NoError(t, err, "asynchronous: acknowledged at once")
	assert.False(t, onReplica(t, replica, c4), "…while the replica does not have it")
}

// BenchmarkReportReplicated measures what Durability costs on a master and
// a replica on loopback: a report that opens a connection (a 429 on a new
// connection), asynchronous and with WAIT 1, and a success with WAIT 1 on
// (it holds a connection but does not wait).
func BenchmarkReportReplicated(b *testing.B) {
	master, _, _ := replicated(b)
	ctx := context.Background()
	cases := []struct {
		name string
		d    store.Durability
		rep  breaker.Report
	}{
		{"opening/async", store.Durability{}, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 60_000}},
		{"opening/wait1", store.Durability{Replicas: 1}, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 60_000}},
		{"success/async", store.Durability{}, breaker.Report{Outcome: breaker.OutcomeSuccess}},
		{"success/wait1", store.Durability{Replicas: 1}, breaker.Report{Outcome: breaker.OutcomeSuccess}},
	}
	for ci, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			st, err := store.New(master, store.Options{Durability: tc.d})
			require.NoError(b, err)
			var took []time.Duration
			i := 0
			for b.Loop() {
				var id keys.ID
				binary.BigEndian.PutUint64(id[:], uint64(i))
				id[8] = byte(ci)
				i++
				began := time.Now()
				if _, err := st.Report(ctx, store.Conn{Tenant: "bench", ID: id}, tc.rep); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(began))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
		})
	}
}
