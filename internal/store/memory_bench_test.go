package store_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// BenchmarkIdleConnectionMemory measures what an idle connection costs in
// Redis (issue 25 point 4): it creates COOLDOWN_BENCH_CONNS connections
// (100,000 unless set) of one tenant on a fresh real redis-server, each
// with one Admit and one Report SUCCESS, and reports per connection the
// used_memory delta (bytes/conn: the state hash, its key and expiry, and
// the tenant's index and wake entries), the state hash's MEMORY USAGE
// (state-bytes) and the index's and wake set's (index-bytes, wake-bytes).
// It ignores b.N; run it once:
//
//	go test ./internal/store -run '^$' -bench IdleConnectionMemory -benchtime 1x
func BenchmarkIdleConnectionMemory(b *testing.B) {
	n := 100_000
	if s := os.Getenv("COOLDOWN_BENCH_CONNS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			b.Fatalf("COOLDOWN_BENCH_CONNS=%q", s)
		}
	}
	for _, pol := range benchPolicies() {
		b.Run(pol.name, func(b *testing.B) {
			rdb := redistest.Real(b)
			ctx := context.Background()
			p := pol.p
			st, err := store.New(rdb, store.Options{Policy: &p})
			if err != nil {
				b.Fatal(err)
			}
			conn := func(i int) store.Conn {
				var id keys.ID
				id[0], id[1], id[2], id[31] = byte(i>>16), byte(i>>8), byte(i), 0xee
				return store.Conn{Tenant: "mem", ID: id}
			}
			idle := func(c store.Conn) error {
				if _, err := st.Admit(ctx, c); err != nil {
					return err
				}
				_, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200})
				return err
			}
			// The tenant's keys exist before the count starts.
			if err := idle(conn(n)); err != nil {
				b.Fatal(err)
			}
			before := usedMemory(ctx, b, rdb)
			b.ResetTimer()
			const workers = 16
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Go(func() {
					for i := w; i < n; i += workers {
						if err := idle(conn(i)); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			after := usedMemory(ctx, b, rdb)
			per := func(key string) float64 { return float64(rdb.MemoryUsage(ctx, key).Val()) / float64(n+1) }
			b.ReportMetric(float64(after-before)/float64(n), "bytes/conn")
			b.ReportMetric(float64(rdb.MemoryUsage(ctx, keys.Layout{Tenant: "mem", ID: conn(0).ID}.State()).Val()), "state-bytes")
			b.ReportMetric(per(keys.Index("mem")), "index-bytes")
			b.ReportMetric(per(keys.Wake("mem")), "wake-bytes")
		})
	}
}

// usedMemory is INFO memory's used_memory.
func usedMemory(ctx context.Context, tb testing.TB, rdb *redis.Client) int64 {
	tb.Helper()
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for l := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatal("INFO memory has no used_memory")
	return 0
}
