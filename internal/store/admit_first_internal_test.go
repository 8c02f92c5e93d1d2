package store

import (
	"context"
	"fmt"
	"sync"
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

// rounds counts the round trips that run admit.lua: each such command and
// each pipeline holding one (a connection's handshake, and the wake entry
// a transition schedules, are other commands).
type rounds struct{ n atomic.Int64 }

func isAdmit(cmd redis.Cmder) bool {
	a := cmd.Args()
	return len(a) > 1 && (a[1] == scriptAdmit.sha || a[1] == scriptAdmit.src)
}

func (r *rounds) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *rounds) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isAdmit(cmd) {
			r.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (r *rounds) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if isAdmit(c) {
				r.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestAdmitFirst holds AdmitFirst's contract on single Redis and on a
// Cluster (candidates in different slots: pipelined rounds; in one slot:
// one script): the first admitted wins, no candidate after it is granted
// anything, the decisions returned stop at it, all denied picks the one
// available soonest; one round trip of admit.lua, and on a Cluster one more only when
// a later candidate needs a write to be decided.
func TestAdmitFirst(t *testing.T) {
	t.Parallel()
	single := redistest.Real(t)
	cluster := redistest.Cluster(t)
	type kind int
	const (
		healthy  kind = iota
		cooling       // rate limited for an hour
		cooling1      // rate limited for a minute
		recovers      // tripped; its open period ended (half-open, due)
		halfOpen      // half-open already, no probe out
	)
	cases := []struct {
		name  string
		cands []kind
		idx   int
		want  []breaker.Decision
		// rounds on a Cluster with the candidates' slots apart (single
		// Redis and one slot: always 1).
		clusterRounds int64
	}{
		{"one healthy", []kind{healthy}, 0, []breaker.Decision{breaker.Allow}, 1},
		{"two cooling then healthy", []kind{cooling, cooling, healthy}, 2,
			[]breaker.Decision{breaker.Deny, breaker.Deny, breaker.Allow}, 1},
		{"healthy first: no probe granted past it", []kind{healthy, halfOpen, recovers}, 0,
			[]breaker.Decision{breaker.Allow}, 1},
		{"a due recovery after a cooling one is probed, nothing past it", []kind{cooling, recovers, healthy}, 1,
			[]breaker.Decision{breaker.Deny, breaker.AllowProbe}, 2},
		{"a half-open one is probed", []kind{halfOpen, healthy}, 0, []breaker.Decision{breaker.AllowProbe}, 1},
		{"all denied: the one available soonest", []kind{cooling, cooling1, cooling}, 1,
			[]breaker.Decision{breaker.Deny, breaker.Deny, breaker.Deny}, 1},
	}
	topos := []struct {
		name     string
		rdb      redis.UniversalClient
		sameSlot bool
	}{{"single", single, false}, {"cluster", cluster, false}, {"cluster one slot", cluster, true}}
	// The scripts are cached first: a NOSCRIPT would add a round trip
	// (TestScriptsAfterFlush covers that).
	require.NoError(t, loadScripts(single))
	require.NoError(t, loadScripts(cluster))
	var seq atomic.Int64
	for _, topo := range topos {
		for _, tc := range cases {
			t.Run(topo.name+"/"+tc.name, func(t *testing.T) {
				ctx := context.Background()
				now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
				p := breaker.Policy{ConsecutiveFailures: 1, OpenBase: time.Second, OpenMax: time.Minute,
					RateLimitCooldown: time.Second, OverloadFloor: time.Second, QuotaBlock: time.Hour, AuthBlock: time.Hour,
					MaxProbes: 1, LeaseTTL: 30 * time.Second}
				clock := func() time.Time { return now }
				st, err := New(topo.rdb, Options{Policy: &p, Clock: clock})
				require.NoError(t, err)
				tenant := fmt.Sprintf("af%d", seq.Add(1))
				cands := conns(t, tenant, len(tc.cands), topo.sameSlot)
				for i, k := range tc.cands {
					var rep breaker.Report
					switch k {
					case healthy:
						rep = breaker.Report{Outcome: breaker.OutcomeSuccess}
					case cooling:
						rep = breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: time.Hour.Milliseconds()}
					case cooling1:
						rep = breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: time.Minute.Milliseconds()}
					case recovers, halfOpen:
						rep = breaker.Report{Outcome: breaker.OutcomeTransientFailure}
					}
					_, err := st.Report(ctx, cands[i], rep)
					require.NoError(t, err)
				}
				now = now.Add(2 * time.Second) // the trips' open periods (1 s) end
				for i, k := range tc.cands {
					if k == halfOpen { // settle it: half-open before the admit
						_, _, err := st.Get(ctx, tenant, cands[i].ID, 0)
						require.NoError(t, err)
					}
				}

				r := &rounds{}
				counted, err := New(hooked(t, topo.rdb, r), Options{Policy: &p, Clock: clock})
				require.NoError(t, err)
				idx, ds, err := counted.AdmitFirst(ctx, cands)
				require.NoError(t, err)
				assert.Equal(t, tc.idx, idx)
				var got []breaker.Decision
				for _, d := range ds {
					got = append(got, d.Decision)
				}
				assert.Equal(t, tc.want, got)
				wantRounds := int64(1)
				if _, ok := topo.rdb.(*redis.ClusterClient); ok && !topo.sameSlot {
					wantRounds = tc.clusterRounds
				}
				assert.Equal(t, wantRounds, r.n.Load(), "round trips")

				// Nothing past the chosen one was granted: every later
				// candidate that may probe has its slot free.
				for i := idx + 1; i < len(cands); i++ {
					snap, _, err := st.Get(ctx, tenant, cands[i].ID, 0)
					require.NoError(t, err)
					assert.Empty(t, snap.State.Leases, "candidate %d after the chosen one holds a lease", i)
				}
			})
		}
	}
}

// loadScripts loads admit.lua on every master.
func loadScripts(rdb redis.UniversalClient) error {
	ctx := context.Background()
	if c, ok := rdb.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.ScriptLoad(ctx, scriptAdmit.src).Err()
		})
	}
	return rdb.ScriptLoad(ctx, scriptAdmit.src).Err()
}

// TestScriptsAfterFlush runs every path of the scripts on Redis servers
// whose script cache was just flushed (a restart, a failover to a replica
// that never saw them): EVALSHA meets NOSCRIPT and the script is sent in
// full, also inside a Cluster's pipelined round.
func TestScriptsAfterFlush(t *testing.T) {
	t.Parallel()
	for _, rdb := range []redis.UniversalClient{redistest.Real(t), redistest.Cluster(t)} {
		ctx := context.Background()
		st, err := New(rdb, Options{})
		require.NoError(t, err)
		cands := conns(t, "flush", 2, false)
		_, err = st.Report(ctx, cands[0], breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: time.Hour.Milliseconds()})
		require.NoError(t, err)
		flush := func() {
			if c, ok := rdb.(*redis.ClusterClient); ok {
				require.NoError(t, c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
					return m.ScriptFlush(ctx).Err()
				}))
				return
			}
			require.NoError(t, rdb.ScriptFlush(ctx).Err())
		}
		flush()
		idx, ds, err := st.AdmitFirst(ctx, cands)
		require.NoError(t, err)
		assert.Equal(t, 1, idx)
		assert.Len(t, ds, 2)
		flush()
		res, err := st.Report(ctx, cands[1], breaker.Report{Outcome: breaker.OutcomeSuccess})
		require.NoError(t, err)
		assert.True(t, res.Accepted)
		flush()
		_, err = st.Force(ctx, "flush", cands[1].ID, breaker.ForcedOpen, time.Minute, "test", "flush")
		require.NoError(t, err)
	}
}

// hooked returns a new client on the servers of rdb that counts its round
// trips in r.
func hooked(t *testing.T, rdb redis.UniversalClient, r *rounds) redis.UniversalClient {
	t.Helper()
	var c redis.UniversalClient
	switch rdb := rdb.(type) {
	case *redis.ClusterClient:
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: clusterAddrs(t, rdb)})
	case *redis.Client:
		c = redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	default:
		t.Fatalf("client %T", rdb)
	}
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(r)
	return c
}

func clusterAddrs(t *testing.T, c *redis.ClusterClient) []string {
	t.Helper()
	var (
		mu    sync.Mutex // ForEachMaster calls fn concurrently
		addrs []string
	)
	require.NoError(t, c.ForEachMaster(context.Background(), func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		addrs = append(addrs, m.Options().Addr)
		return nil
	}))
	return addrs
}

// conns returns n connections of tenant, all in one hash slot when
// sameSlot, else each in a slot of its own.
func conns(t *testing.T, tenant string, n int, sameSlot bool) []Conn {
	t.Helper()
	var out []Conn
	slots := map[int]bool{}
	for i := 0; len(out) < n; i++ {
		require.Less(t, i, 1<<22, "no ids found")
		var id keys.ID
		id[0], id[1], id[2] = byte(i), byte(i>>8), byte(i>>16)
		c := Conn{Tenant: tenant, ID: id}
		slot := hashSlot(c.layout().State())
		switch {
		case sameSlot && len(out) > 0 && slot != hashSlot(out[0].layout().State()):
			continue
		case !sameSlot && slots[slot]:
			continue
		}
		slots[slot] = true
		out = append(out, c)
	}
	return out
}

// TestHashSlot holds hashSlot to Redis's own CLUSTER KEYSLOT.
func TestHashSlot(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	ctx := context.Background()
	for _, k := range []string{"", "foo", "123456789", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "{", "}{x}",
		Conn{Tenant: "t", ID: keys.ID{1, 2, 3}}.layout().State(), Conn{Tenant: "t", ID: keys.ID{1, 2, 3}}.layout().History()} {
		want, err := c.ClusterKeySlot(ctx, k).Result()
		require.NoError(t, err)
		assert.Equal(t, int(want), hashSlot(k), "key %q", k)
	}
}
