package store_test

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// BenchmarkStore measures one operation per iteration against a real
// Redis, single and a 3-master Cluster (RunParallel; use -cpu 1,2 for
// figures per core count):
//
//   - admit_healthy: the hot path, a closed connection's Admit (no write);
//   - admit_open: the storm path, every caller denied;
//   - report_success: a healthy connection's Report (a write);
//   - report_success_keyed: the same with a fresh idempotency key per
//     report, as the clients send (the key looked up and remembered);
//   - report_resent: the same key every time: a resend answered from it;
//   - floor_return1: EVALSHA of return 1, the script floor of the same run;
//   - admit3_2cooling: AdmitFirst of three candidates whose first two cool
//     down for an hour, so the third is admitted.
//
// Besides ns/op it reports, from Redis's INFO commandstats over the run
// (every master of a Cluster): redis-cmds/op, every command Redis ran
// (a script's own redis.call included, the EVALSHA counted once);
// script-µs/op, the time Redis spent in EVALSHA/EVAL (usec of
// commandstats: the scripts' own cost, what issue 14 item 3 targets); and
// round-trips/op, the commands and pipelines the store sent (one pipeline
// counts one round, whatever the nodes it spans).
func BenchmarkStore(b *testing.B) {
	for _, topo := range []struct {
		name string
		rdb  func(testing.TB) (redis.UniversalClient, func(context.Context) []*redis.Client)
	}{
		{"single", func(tb testing.TB) (redis.UniversalClient, func(context.Context) []*redis.Client) {
			c := redistest.Real(tb)
			return c, func(context.Context) []*redis.Client { return []*redis.Client{c} }
		}},
		{"cluster", func(tb testing.TB) (redis.UniversalClient, func(context.Context) []*redis.Client) {
			c := redistest.Cluster(tb)
			return c, func(ctx context.Context) []*redis.Client { return clusterMasters(ctx, tb, c) }
		}},
	} {
		b.Run(topo.name, func(b *testing.B) {
			rdb, masters := topo.rdb(b)
			rounds := &roundCounter{}
			rdb.AddHook(rounds)
			for _, pol := range benchPolicies() {
				b.Run(pol.name, func(b *testing.B) { benchStore(b, rdb, masters, rounds, pol.p) })
			}
		})
	}
}

// benchPolicies are the policies the store is measured with: the default
// (its retry budget counts first attempts), every fleet rule off (the cost
// before them), and the throttle on (its counters read by every Admit and
// written by every Report).
func benchPolicies() []struct {
	name string
	p    breaker.Policy
} {
	off, throttle := breaker.DefaultPolicy(), breaker.DefaultPolicy()
	off.RetryBudget = 0
	throttle.ThrottleK = 2
	return []struct {
		name string
		p    breaker.Policy
	}{{"default", breaker.DefaultPolicy()}, {"fleet_off", off}, {"throttle", throttle}}
}

func benchStore(b *testing.B, rdb redis.UniversalClient, masters func(context.Context) []*redis.Client,
	rounds *roundCounter, p breaker.Policy) {
	st, err := store.New(rdb, store.Options{Policy: &p})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	conn := func(i byte) store.Conn { return store.Conn{Tenant: "bench", ID: keys.ID{i}} }
	healthy, open := conn(1), conn(3)
	cands := []store.Conn{conn(4), conn(5), conn(6)}
	for c, rep := range map[store.Conn]breaker.Report{
		healthy:  {Outcome: breaker.OutcomeSuccess},
		open:     {Outcome: breaker.OutcomeQuotaExhausted},
		cands[0]: {Outcome: breaker.OutcomeRateLimited, RetryAfter: time.Hour.Milliseconds()},
		cands[1]: {Outcome: breaker.OutcomeRateLimited, RetryAfter: time.Hour.Milliseconds()},
		cands[2]: {Outcome: breaker.OutcomeSuccess},
	} {
		if _, err := st.Report(ctx, c, rep); err != nil {
			b.Fatal(err)
		}
	}
	admit := func(c store.Conn) func() error {
		return func() error { _, err := st.Admit(ctx, c); return err }
	}
	cases := []struct {
		name string
		op   func() error
	}{
		// The floor: EVALSHA of return 1 on the same client, the script
		// time every figure below is read beside (a script that does
		// nothing still costs the call, its KEYS and ARGV, and Lua).
		{"floor_return1", func() error { return floorScript.Run(ctx, rdb, nil).Err() }},
		{"admit_healthy", admit(healthy)},
		{"admit_open", admit(open)},
		{"report_success", func() error {
			_, err := st.Report(ctx, healthy, breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200})
			return err
		}},
		{"report_success_keyed", func() error {
			// A fresh idempotency key per report, as the clients send:
			// the key is looked up (a miss) and remembered.
			c := healthy
			c.ReportKey = "bench-" + strconv.FormatInt(benchKeys.Add(1), 10) + "-0000000000"
			_, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200})
			return err
		}},
		{"report_resent", func() error {
			// The same key every time: each report after the first is a
			// resend, answered from the key.
			c := healthy
			c.ReportKey = "bench-resent-0000000000"
			_, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200})
			return err
		}},
		{"admit_retry", func() error {
			r := healthy
			r.Retry = true
			_, err := st.Admit(ctx, r)
			return err
		}},
		{"admit3_2cooling", func() error {
			i, _, err := st.AdmitFirst(ctx, cands)
			if err == nil && i != 2 {
				b.Errorf("admit3: chose %d, want 2", i)
			}
			return err
		}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			before := readCommandStats(ctx, b, masters(ctx))
			r0 := rounds.n.Load()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := bc.op(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			after := readCommandStats(ctx, b, masters(ctx))
			n := float64(b.N)
			b.ReportMetric(float64(after.calls-before.calls)/n, "redis-cmds/op")
			b.ReportMetric(float64(after.scriptUsec-before.scriptUsec)/n, "script-µs/op")
			b.ReportMetric(float64(rounds.n.Load()-r0)/n, "round-trips/op")
		})
	}
}

// floorScript is BenchmarkStore's floor_return1.
var floorScript = redis.NewScript("return 1")

// benchKeys numbers report_success_keyed's keys across policies (which
// share a Redis and the connection): a key is never seen twice.
var benchKeys atomic.Int64

// commandStats sums INFO commandstats over some Redis servers.
type commandStats struct {
	calls      int64 // every command but INFO and CLUSTER (the bench's own)
	scriptUsec int64 // usec of EVALSHA and EVAL
}

func readCommandStats(ctx context.Context, tb testing.TB, nodes []*redis.Client) commandStats {
	tb.Helper()
	var st commandStats
	for _, c := range nodes {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			tb.Fatal(err)
		}
		sc := bufio.NewScanner(strings.NewReader(info))
		for sc.Scan() {
			name, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
			name, found := strings.CutPrefix(name, "cmdstat_")
			if !ok || !found || name == "info" || strings.HasPrefix(name, "cluster") {
				continue
			}
			var calls, usec int64
			for kv := range strings.SplitSeq(rest, ",") {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "calls":
					calls, _ = strconv.ParseInt(v, 10, 64)
				case "usec":
					usec, _ = strconv.ParseInt(v, 10, 64)
				}
			}
			st.calls += calls
			if name == "evalsha" || name == "eval" {
				st.scriptUsec += usec
			}
		}
	}
	return st
}

// clusterMasters returns a client on each master of the Cluster, closed
// at cleanup.
func clusterMasters(ctx context.Context, tb testing.TB, c *redis.ClusterClient) []*redis.Client {
	tb.Helper()
	var (
		mu    sync.Mutex // ForEachMaster calls fn concurrently
		addrs []string
	)
	if err := c.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		addrs = append(addrs, m.Options().Addr)
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	var out []*redis.Client
	for _, a := range addrs {
		m := redis.NewClient(&redis.Options{Addr: a})
		tb.Cleanup(func() { _ = m.Close() })
		out = append(out, m)
	}
	return out
}

// roundCounter counts the round trips a client makes: each command and
// each pipeline.
type roundCounter struct{ n atomic.Int64 }

func (r *roundCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}
