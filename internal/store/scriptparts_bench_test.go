package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// BenchmarkScriptParts measures what the healthy fast paths are made of,
// inside Redis: each part runs partLoops times in a loop inside one
// EVALSHA on a healthy connection's state hash (the default policy's: the
// fields admit_fast.lua and report_fast.lua read), and part-µs is Redis's
// script time per iteration (INFO commandstats' usec ÷ calls ÷ partLoops),
// so the call's own cost (the floor, floor_return1 in BenchmarkStore) is
// not in it. docs/benchmarks.md reads the fast paths' script time from
// these parts.
func BenchmarkScriptParts(b *testing.B) {
	rdb := redistest.Real(b)
	ctx := context.Background()
	p := breaker.DefaultPolicy()
	st, err := store.New(rdb, store.Options{Policy: &p})
	if err != nil {
		b.Fatal(err)
	}
	c := store.Conn{Tenant: "parts", ID: keys.ID{1}}
	for range 2 {
		if _, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200}); err != nil {
			b.Fatal(err)
		}
	}
	key := keys.Layout{Tenant: c.Tenant, ID: c.ID}.State()
	policy := "86400000,5000,60000,30000,2000,0,0,5,20"
	for _, part := range []struct{ name, lua string }{
		{"nothing", "local x = 1"},
		{"time", "local t = redis.call('TIME') local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)"},
		{"ping", "redis.call('PING')"},
		// admit_fast.lua's read, and report_fast.lua's for the default policy.
		{"hmget5", "local x = redis.call('HMGET', KEYS[1], 'ph', 'ov', 'rv', 'ou', 'ca')"},
		{"hmget14", "local x = redis.call('HMGET', KEYS[1], 'ph', 'ov', 'rv', 'sc', 'cf', 'ls', 'lo', 'le', 'lb', 'ws', 'wcc', 'xp', 'fs', 'fcf')"},
		{"hset4", "redis.call('HSET', KEYS[1], 'uat', '1796178249937', 'sc', '12', 'wcc', '12', 'fcf', '12')"},
		{"policy_head", "local a, b, c, d, e, f, g = string.match(ARGV[1], '^([^,]+),([^,]+),([^,]+),([^,]+),([^,]+),([^,]+),([^,]+),')"},
		{"format", "local x = string.format('%d', 1796178249937)"},
	} {
		b.Run(part.name, func(b *testing.B) {
			sc := redis.NewScript(fmt.Sprintf("local function f()\n%s\nend\nfor i = 1, %d do f() end\nreturn 1\n", part.lua, partLoops))
			if err := sc.Load(ctx, rdb).Err(); err != nil {
				b.Fatal(err)
			}
			before := readCommandStats(ctx, b, []*redis.Client{rdb})
			b.ResetTimer()
			for range b.N {
				if err := sc.EvalSha(ctx, rdb, []string{key}, policy).Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			after := readCommandStats(ctx, b, []*redis.Client{rdb})
			b.ReportMetric(float64(after.scriptUsec-before.scriptUsec)/float64(b.N)/partLoops, "part-µs")
		})
	}
}

// partLoops is how many times BenchmarkScriptParts runs a part per call.
const partLoops = 200
