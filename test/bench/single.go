package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/client"
	"github.com/cooldownd/cooldownd/internal/proctest"
)

// measured is one phase of one round: the client's sample and the
// servers' deltas over its measured part.
type measured struct {
	s     sample
	redis redisStats
	cd    time.Duration // cooldownd CPU
	floor sample        // the floor of the same round and concurrency
}

// phaseKey names a phase; phases print in the order they first ran.
type phaseKey struct {
	c     int
	proto string
	op    string
}

// measurer runs phases and keeps their results by key, in order.
type measurer struct {
	o       options
	mon     []*redis.Client // one per Redis master
	cdPIDs  []int
	order   []phaseKey
	results map[phaseKey][]measured
}

func (m *measurer) stats(ctx context.Context) (redisStats, error) {
	var sum redisStats
	for _, c := range m.mon {
		s, err := readRedisStats(ctx, c)
		if err != nil {
			return sum, err
		}
		sum = sum.add(s)
	}
	return sum, nil
}

func (m *measurer) cpu() time.Duration {
	var sum time.Duration
	for _, pid := range m.cdPIDs {
		d, _ := procCPU(pid)
		sum += d
	}
	return sum
}

// phase measures f at concurrency c and records it under k.
func (m *measurer) phase(ctx context.Context, k phaseKey, f op, floor sample) (measured, error) {
	var (
		r0, r1 redisStats
		c0, c1 time.Duration
		err    error
	)
	s := drive(ctx, k.c, m.o.warm, m.o.phase, f, func() {
		r0, err = m.stats(ctx)
		c0 = m.cpu()
	}, func() {
		c1 = m.cpu()
		if err == nil {
			r1, err = m.stats(ctx)
		}
	})
	if err != nil {
		return measured{}, fmt.Errorf("redis INFO: %w", err)
	}
	if ctx.Err() != nil {
		return measured{}, ctx.Err()
	}
	res := measured{s: s, redis: r1.sub(r0), cd: c1 - c0, floor: floor}
	if _, ok := m.results[k]; !ok {
		m.order = append(m.order, k)
	}
	m.results[k] = append(m.results[k], res)
	return res, nil
}

// floorOp is the floor: EVALSHA of a trivial script through go-redis.
func floorOp(rdb redis.Scripter, sha string) op {
	return func(ctx context.Context, _ int) error {
		return rdb.EvalSha(ctx, sha, nil).Err()
	}
}

// noop is the guarded provider call of the guard phase: an immediate 200.
func noop(context.Context) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody}, nil
}

func runSingle(ctx context.Context, o options, ps *proctest.Group) error {
	addr, redisPID, err := startRedis(ctx, ps, "redis")
	if err != nil {
		return err
	}
	rep, err := startCooldownd(ctx, ps, "cooldownd", o.bin, "--redis-url", "redis://"+addr)
	if err != nil {
		return err
	}
	mon := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = mon.Close() }()
	ver, _ := mon.Info(ctx, "server").Result()
	header(o, "single redis-server "+infoField(ver, "redis_version")+", one cooldownd, all on loopback")

	// The floor's client has go-redis's default pool, as cooldownd's has.
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rdb.Close() }()
	sha, err := rdb.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		return err
	}
	maxC := slices.Max(o.conc)
	rpc := map[string]*rpcOps{}
	for _, p := range o.protos {
		opts, _ := protocolOpts(p)
		ops, err := newRPCOps(ctx, cooldownv1connect.NewCooldownServiceClient(h2c(), rep.url, opts...), maxC, p+"-")
		if err != nil {
			return err
		}
		rpc[p] = ops
	}
	gc, err := client.New(rep.url, client.WithAdmitTimeout(5*time.Second),
		client.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return err
	}
	defer func() { _ = gc.Close() }()
	var gconns []client.Conn
	for w := range maxC {
		c, err := gc.Connection("openai", "https://api.openai.com/v1", fmt.Sprintf("bench-credential-%d", w), "gpt-4o", fmt.Sprintf("bench guard %d", w))
		if err != nil {
			return err
		}
		gconns = append(gconns, c)
	}
	// The same guard with the client's mirror (client.WithMirror): a
	// closed healthy connection is admitted without a round trip, its
	// successes reported in batches every second.
	mc, err := client.New(rep.url, client.WithAdmitTimeout(5*time.Second), client.WithMirror(time.Second),
		client.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return err
	}
	defer func() { _ = mc.Close() }()
	do := func(cl *client.Client) op {
		return func(ctx context.Context, w int) error {
			resp, err := cl.Do(ctx, gconns[w], noop)
			if resp != nil {
				_ = resp.Body.Close()
			}
			return err
		}
	}
	guard, mirrored := do(gc), do(mc)
	m := &measurer{o: o, mon: []*redis.Client{mon}, cdPIDs: []int{rep.pid}, results: map[phaseKey][]measured{}}
	for round := range o.runs {
		for _, c := range o.conc {
			fl, err := m.phase(ctx, phaseKey{c, "redis", "floor: EVALSHA return 1"}, floorOp(rdb, sha), sample{})
			if err != nil {
				return err
			}
			for _, p := range o.protos {
				ops := rpc[p]
				for _, ph := range []struct {
					id, name string
					f        op
				}{{"admit", "Admit", ops.admit}, {"report", "Report SUCCESS", ops.report}, {"admitreport", "Admit+Report", ops.admitReport},
					{"admit3", "Admit 3 cand. (2 cooling)", ops.admit3}} {
					if !o.ops[ph.id] {
						continue
					}
					if _, err := m.phase(ctx, phaseKey{c, p, ph.name}, ph.f, fl.s); err != nil {
						return err
					}
				}
			}
			if o.ops["guard"] {
				if _, err := m.phase(ctx, phaseKey{c, "connect", "client.Do guard (no-op call)"}, guard, fl.s); err != nil {
					return err
				}
			}
			if o.ops["mirror"] {
				if _, err := m.phase(ctx, phaseKey{c, "connect", "client.Do guard, WithMirror"}, mirrored, fl.s); err != nil {
					return err
				}
			}
			if gc.Degraded() || mc.Degraded() {
				fmt.Println("note: the guard's client degraded (decided in-process) during this phase")
			}
		}
		fmt.Fprintf(os.Stderr, "round %d of %d done\n", round+1, o.runs)
	}
	m.print(os.Stdout)
	fmt.Printf("\ncooldownd peak RSS (VmHWM) %.1f MB, RSS now %.1f MB; redis-server peak RSS %.1f MB\n",
		float64(procStatusKB(rep.pid, "VmHWM"))/1024, float64(procStatusKB(rep.pid, "VmRSS"))/1024, float64(procStatusKB(redisPID, "VmHWM"))/1024)
	fmt.Println("Admit+Report is two RPCs per op; the guard's op is one client.Do. ×floor: req/s ÷ the floor's, p99 ÷ the floor's p99, same round and c.")
	return nil
}

func infoField(info, key string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), key+":"); ok {
			return v
		}
	}
	return "?"
}

// print writes the table of medians over rounds.
func (m *measurer) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "c\tproto\top\treq/s\t÷floor\tp50\tp99\tp99.9\tp99 ×floor\tredis cmd/op\tredis CPU µs/op\tlua µs/call\tcooldownd CPU µs/op\terrors\t")
	last := 0
	for _, k := range m.order {
		rs := m.results[k]
		if k.c != last && last != 0 {
			fmt.Fprintln(tw, "\t\t\t\t\t\t\t\t\t\t\t\t\t\t")
		}
		last = k.c
		var errs int64
		var firstErr error
		for _, r := range rs {
			errs += r.s.errs
			if firstErr == nil {
				firstErr = r.s.err
			}
		}
		med := func(f func(measured) float64) float64 {
			v := make([]float64, 0, len(rs))
			for _, r := range rs {
				v = append(v, f(r))
			}
			return median(v)
		}
		perOp := func(f func(measured) float64) float64 {
			return med(func(r measured) float64 {
				if r.s.n == 0 {
					return 0
				}
				return f(r) / float64(r.s.n)
			})
		}
		rate := med(func(r measured) float64 { return r.s.rate() })
		p := func(q float64) string { return ms(med(func(r measured) float64 { return float64(r.s.pct(q)) })) }
		ratio, p99r := "1", "1"
		if k.proto != "redis" {
			ratio = fmt.Sprintf("%.2f", med(func(r measured) float64 { return r.s.rate() / r.floor.rate() }))
			p99r = fmt.Sprintf("%.1f", med(func(r measured) float64 { return float64(r.s.pct(0.99)) / float64(r.floor.pct(0.99)) }))
		}
		cmds := perOp(func(r measured) float64 { return float64(r.redis.calls) })
		rcpu := perOp(func(r measured) float64 { return r.redis.cpu * 1e6 })
		lua := med(func(r measured) float64 {
			if r.redis.evalsha == 0 {
				return 0
			}
			return float64(r.redis.luaUsec) / float64(r.redis.evalsha)
		})
		cd := "-"
		if k.proto != "redis" {
			cd = fmt.Sprintf("%.0f", perOp(func(r measured) float64 { return float64(r.cd.Microseconds()) }))
		}
		e := fmt.Sprint(errs)
		if firstErr != nil {
			e += " (" + trunc(firstErr.Error(), 60) + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%.3g\t%.3g\t%.1f\t%s\t%s\t\n", k.c, k.proto, k.op, rate, ratio,
			p(0.50), p(0.99), p(0.999), p99r, cmds, rcpu, lua, cd, e)
	}
	_ = tw.Flush()
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// ms formats a duration given in ns as milliseconds.
func ms(ns float64) string { return fmt.Sprintf("%.2fms", ns/1e6) }

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
