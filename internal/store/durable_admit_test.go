package store_test

import (
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/store"
)

// cmdLog records the names of the commands a client sends (a durable
// Admit's script, and its WAIT when it wrote).
type cmdLog struct {
	mu    sync.Mutex
	names []string
}

func (*cmdLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *cmdLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.mu.Lock()
		l.names = append(l.names, cmd.Name())
		l.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (*cmdLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// take returns the names recorded since the last take.
func (l *cmdLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.names
	l.names = nil
	return out
}

func waitsIn(names []string) int {
	n := 0
	for _, c := range names {
		if c == "wait" {
			n++
		}
	}
	return n
}

// sameOnReplica reports whether the replica holds c's state hash as the
// master does (its phase, revision and probe leases).
func sameOnReplica(t *testing.T, master, replica *redis.Client, c store.Conn) bool {
	t.Helper()
	ctx := context.Background()
	k := keys.Layout{Tenant: c.Tenant, ID: c.ID}.State()
	m, err := master.HGetAll(ctx, k).Result()
	require.NoError(t, err)
	r, err := replica.HGetAll(ctx, k).Result()
	require.NoError(t, err)
	return assert.ObjectsAreEqual(m, r)
}

// TestDurableAdmitWaitsWhenItWrites (issue 28 point 1): with Durability,
// an Admit that wrote (an open ended into half-open and a probe lease
// granted, a lapsed lease's slot granted again) is answered only once the
// replica has it, as a transition's report is; a healthy admission, an
// unknown connection and every denial are one script call and no WAIT.
// On the code before it no Admit waited: the grant was acknowledged while
// the replica lacked it, and a failover lost it (two processes then held
// the probe, the chaos run's stale accepts). A denial read right after
// the write it rests on is answered NotReplicated, still without a WAIT
// (TestFreshReadIsNotReplicated); the table's denials come later.
func TestDurableAdmitWaitsWhenItWrites(t *testing.T) {
	t.Parallel()
	master, replica, _ := replicated(t)
	log := &cmdLog{}
	master.AddHook(log)
	clock := newTestClock()
	p := breaker.DefaultPolicy()
	p.LeaseTTL = time.Minute
	st, err := store.New(master, store.Options{Clock: clock.Now, Policy: &p,
		Durability: store.Durability{Replicas: 1, Timeout: 5 * time.Second}}) // the replica must answer, even on a loaded machine
	require.NoError(t, err)
	ctx := context.Background()
	healthy := store.Conn{Tenant: "t", ID: testID(1)}
	opened := store.Conn{Tenant: "t", ID: testID(2)}
	_, err = st.Report(ctx, healthy, breaker.Report{Outcome: breaker.OutcomeSuccess})
	require.NoError(t, err)
	_, err = st.Report(ctx, opened, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 60_000})
	require.NoError(t, err)
	_, err = st.Admit(ctx, store.Conn{Tenant: "t", ID: testID(9)}) // the script cache is warm
	require.NoError(t, err)
	log.take()

	for _, tc := range []struct {
		name    string
		conn    store.Conn
		advance time.Duration
		want    breaker.Decision
		reason  breaker.DenyReason
		wrote   bool
	}{
		{name: "healthy", conn: healthy, want: breaker.Allow},
		{name: "unknown connection", conn: store.Conn{Tenant: "t", ID: testID(3)}, want: breaker.Allow},
		// Each read comes past the fresh window of the write it reads (2
		// timeouts and 2 polls: 10.05 s).
		{name: "denied: cooling down", conn: opened, advance: 20 * time.Second, want: breaker.Deny, reason: breaker.ReasonCooldown},
		{name: "open ended: half-open, probe granted", conn: opened, advance: time.Hour, want: breaker.AllowProbe, wrote: true},
		{name: "denied: probe in flight", conn: opened, advance: 20 * time.Second, want: breaker.Deny, reason: breaker.ReasonProbeInFlight},
		{name: "lapsed lease: its slot granted again", conn: opened, advance: p.LeaseTTL + time.Second, want: breaker.AllowProbe, wrote: true},
	} {
		// Sequential: each case starts from the state the one before left.
		clock.advance(tc.advance)
		d, err := st.Admit(ctx, tc.conn)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, d.Decision, tc.name)
		assert.Equal(t, tc.reason, d.Reason, tc.name)
		names := log.take()
		if !tc.wrote {
			assert.Len(t, names, 1, "%s: one script call, no WAIT: %v", tc.name, names)
			assert.Equal(t, store.ReplicationNone, d.Durability, tc.name)
			continue
		}
		assert.Equal(t, 1, waitsIn(names), "%s: the Admit waits for the replica: %v", tc.name, names)
		assert.Equal(t, store.Replicated, d.Durability, tc.name)
		assert.True(t, sameOnReplica(t, master, replica, tc.conn), "%s: acknowledged, so the replica has the grant", tc.name)
		log.take() // sameOnReplica's read
	}
}

// TestDurableAdmitNotReplicated: when the replica does not acknowledge an
// Admit's grant in time, the Admit is answered (the grant stands on the
// master) NotReplicated, not failed; for Recheck the next writing Admits
// and reports are answered so without a WAIT (one window for both), and so
// is a healthy Admit meanwhile, without a WAIT either: what it read may be
// a write a failover loses. Without Durability a grant never waits.
func TestDurableAdmitNotReplicated(t *testing.T) {
	t.Parallel()
	master, _, link := replicated(t)
	log := &cmdLog{}
	master.AddHook(log)
	clock := newTestClock()
	st, err := store.New(master, store.Options{Clock: clock.Now,
		Durability: store.Durability{Replicas: 1, Timeout: 100 * time.Millisecond, Recheck: time.Minute}})
	require.NoError(t, err)
	async, err := store.New(master, store.Options{Clock: clock.Now})
	require.NoError(t, err)
	ctx := context.Background()
	open := breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 60_000}
	conns := make([]store.Conn, 4)
	for i := range conns {
		conns[i] = store.Conn{Tenant: "t", ID: testID(10 + byte(i))}
		_, err := st.Report(ctx, conns[i], open)
		require.NoError(t, err)
	}
	clock.advance(time.Hour) // every open ended
	log.take()

	link.Swallow(true) // the replication link stalls
	t.Cleanup(func() { link.Swallow(false); link.Reset() })
	d, err := st.Admit(ctx, conns[0])
	require.NoError(t, err, "a grant the replica did not acknowledge is answered, never failed")
	assert.Equal(t, breaker.AllowProbe, d.Decision)
	assert.NotEmpty(t, d.LeaseToken, "…and it stands: the lease is the caller's")
	assert.Equal(t, store.NotReplicated, d.Durability)
	assert.Equal(t, 1, waitsIn(log.take()), "the first one waits")

	d, err = st.Admit(ctx, conns[1])
	require.NoError(t, err)
	assert.Equal(t, breaker.AllowProbe, d.Decision)
	assert.Equal(t, store.NotReplicated, d.Durability, "within Recheck: answered so at once")
	rep, err := st.Report(ctx, conns[2], open)
	require.NoError(t, err)
	assert.Equal(t, store.NotReplicated, rep.Durability, "a report's transition shares the window")
	d, err = st.Admit(ctx, store.Conn{Tenant: "t", ID: testID(20)})
	require.NoError(t, err)
	assert.Equal(t, breaker.Allow, d.Decision)
	assert.Equal(t, store.NotReplicated, d.Durability, "a healthy Admit wrote nothing, but what it read may be lost too")
	assert.Zero(t, waitsIn(log.take()), "none waits within Recheck")

	d, err = async.Admit(ctx, conns[3])
	require.NoError(t, err)
	assert.Equal(t, breaker.AllowProbe, d.Decision)
	assert.Equal(t, store.ReplicationNone, d.Durability)
	assert.Zero(t, waitsIn(log.take()), "without Durability a grant does not wait")
}

// BenchmarkAdmitReplicated measures what Durability costs an Admit on a
// master and a replica on loopback: a healthy admission (one script on a
// held connection, no WAIT) and a probe grant (its WAIT 1), each
// asynchronous and with Durability, in interleaved rounds
// (-count: compare within one run).
func BenchmarkAdmitReplicated(b *testing.B) {
	master, _, _ := replicated(b)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		d     store.Durability
		grant bool
	}{
		{"healthy/async", store.Durability{}, false},
		{"healthy/wait1", store.Durability{Replicas: 1}, false},
		{"grant/async", store.Durability{}, true},
		{"grant/wait1", store.Durability{Replicas: 1}, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			clock := newTestClock()
			st, err := store.New(master, store.Options{Durability: tc.d, Clock: clock.Now})
			require.NoError(b, err)
			conn := func(i int) store.Conn {
				var id keys.ID
				binary.BigEndian.PutUint64(id[:], uint64(i))
				copy(id[8:], tc.name)
				return store.Conn{Tenant: "bench", ID: id}
			}
			var took []time.Duration
			i := 0
			for b.Loop() {
				c := conn(i)
				i++
				if tc.grant {
					b.StopTimer()
					if _, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 1000}); err != nil {
						b.Fatal(err)
					}
					clock.advance(time.Hour) // its open ended: the Admit grants the probe
					b.StartTimer()
				}
				began := time.Now()
				d, err := st.Admit(ctx, c)
				if err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(began))
				if tc.grant && d.Decision != breaker.AllowProbe {
					b.Fatalf("decision %v, want a probe", d.Decision)
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
		})
	}
}
