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
	cd    time.Duration // CPU of the process that served the phase (cooldownd, a no-op, ratelimit)
}

// phaseKey names a phase; phases print in the order they first ran.
type phaseKey struct {
	c     int
	proto string
	op    string
}

// The phases' names (phaseKey.op).
const (
	opFloor          = "floor: EVALSHA return 1"
	opAdmit          = "Admit"
	opReport         = "Report SUCCESS"
	opAdmitReport    = "Admit+Report"
	opAdmit3         = "Admit 3 cand. (2 cooling)"
	opNoopAdmit      = "no-op Admit"
	opNoopReport     = "no-op Report"
	opNoopRedisAdmit = "no-op+EVALSHA Admit"
	opRatelimit      = "ratelimit ShouldRateLimit"
	opGuard          = "client.Do guard (no-op call)"
	opMirror         = "client.Do guard, WithMirror"
)

// measurer runs phases and keeps their results by key, in order: the
// i-th result of every key is from round i.
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

func (m *measurer) cpu() time.Duration { return cpuOf(m.cdPIDs) }

func cpuOf(pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		d, _ := procCPU(pid)
		sum += d
	}
	return sum
}

// phase measures f at concurrency k.c, the CPU of the processes pids,
// and records it under k.
func (m *measurer) phase(ctx context.Context, k phaseKey, f op, pids ...int) (measured, error) {
	var (
		r0, r1 redisStats
		c0, c1 time.Duration
		err    error
	)
	s := drive(ctx, k.c, m.o.warm, m.o.phase, f, func() {
		r0, err = m.stats(ctx)
		c0 = cpuOf(pids)
	}, func() {
		c1 = cpuOf(pids)
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
	res := measured{s: s, redis: r1.sub(r0), cd: c1 - c0}
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

// rpcServer is one process a protocol's RPC phases run against.
type rpcServer struct {
	pid int
	ops map[string]*rpcOps // by protocol
}

func newServer(ctx context.Context, o options, r replica, maxC int, prefix string) (*rpcServer, error) {
	sv := &rpcServer{pid: r.pid, ops: map[string]*rpcOps{}}
	for _, name := range o.protos {
		p, _ := protocolByName(name)
		ops, err := newRPCOps(ctx, cooldownv1connect.NewCooldownServiceClient(p.httpClient(maxC), r.url, p.opts...), maxC, prefix+name+"-")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		sv.ops[name] = ops
	}
	return sv, nil
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
	nop, err := startNoop(ctx, ps, "noop", "")
	if err != nil {
		return err
	}
	nopRedis, err := startNoop(ctx, ps, "noop-redis", addr)
	if err != nil {
		return err
	}
	var rl *replica
	if o.ratelimit != "" {
		r, err := startRatelimit(ctx, ps, o.ratelimit, addr)
		if err != nil {
			return err
		}
		rl = &r
	}
	mon := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = mon.Close() }()
	ver, _ := mon.Info(ctx, "server").Result()
	header(o, "single redis-server "+infoField(ver, "redis_version")+", one cooldownd, the no-op references"+
		map[bool]string{true: ", envoyproxy/ratelimit " + o.ratelimit, false: ""}[rl != nil]+", all on loopback")

	// The floor's client has go-redis's default pool, as cooldownd's has.
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rdb.Close() }()
	sha, err := rdb.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		return err
	}
	maxC := slices.Max(o.conc)
	cd, err := newServer(ctx, o, rep, maxC, "")
	if err != nil {
		return err
	}
	nopSv, err := newServer(ctx, o, nop, maxC, "noop-")
	if err != nil {
		return err
	}
	nopRedisSv, err := newServer(ctx, o, nopRedis, maxC, "noop-redis-")
	if err != nil {
		return err
	}
	var rlOp op
	if rl != nil {
		rlOp = ratelimitOp(rl.url, maxC)
	}
	gc, err := client.New(rep.url, client.WithAdmitTimeout(5*time.Second), client.WithoutMirror(),
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
	type step struct {
		k   phaseKey
		f   op
		pid int
	}
	for round := range o.runs {
		for _, c := range o.conc {
			// One round at c: the floor, then per protocol its no-op
			// references beside cooldownd's phases (ratelimit after the
			// goals' Admit), then the guard; every ratio compares phases of
			// the same round and c.
			steps := []step{{phaseKey{c, "redis", opFloor}, floorOp(rdb, sha), 0}}
			for i, p := range o.protos {
				n, nr, ops := nopSv.ops[p], nopRedisSv.ops[p], cd.ops[p]
				steps = append(steps,
					step{phaseKey{c, p, opNoopAdmit}, n.admit, nop.pid},
					step{phaseKey{c, p, opNoopReport}, n.report, nop.pid},
					step{phaseKey{c, p, opNoopRedisAdmit}, nr.admit, nopRedis.pid})
				for _, ph := range []struct {
					id, name string
					f        op
				}{{"admit", opAdmit, ops.admit}, {"report", opReport, ops.report}, {"admitreport", opAdmitReport, ops.admitReport},
					{"admit3", opAdmit3, ops.admit3}} {
					// -short measures the two-RPC and multi-candidate
					// phases on the first protocol only.
					if !o.ops[ph.id] || (o.short && i > 0 && (ph.id == "admitreport" || ph.id == "admit3")) {
						continue
					}
					steps = append(steps, step{phaseKey{c, p, ph.name}, ph.f, rep.pid})
					// ratelimit right after the Admit the goals hold to it,
					// so the two rates are measured seconds apart.
					if ph.id == "admit" && p == o.goalProto && rlOp != nil {
						steps = append(steps, step{phaseKey{c, "grpc", opRatelimit}, rlOp, rl.pid})
					}
				}
			}
			if rlOp != nil && !slices.Contains(o.protos, o.goalProto) {
				steps = append(steps, step{phaseKey{c, "grpc", opRatelimit}, rlOp, rl.pid})
			}
			if o.ops["guard"] {
				steps = append(steps, step{phaseKey{c, "connect", opGuard}, guard, rep.pid})
			}
			if o.ops["mirror"] {
				steps = append(steps, step{phaseKey{c, "connect", opMirror}, mirrored, rep.pid})
			}
			for _, st := range steps {
				pids := []int{st.pid}
				if st.pid == 0 {
					pids = nil
				}
				if _, err := m.phase(ctx, st.k, st.f, pids...); err != nil {
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
	fmt.Printf("\ncooldownd peak RSS (VmHWM) %.1f MB, RSS now %.1f MB; redis-server peak RSS %.1f MB; no-op peak RSS %.1f MB",
		float64(procStatusKB(rep.pid, "VmHWM"))/1024, float64(procStatusKB(rep.pid, "VmRSS"))/1024, float64(procStatusKB(redisPID, "VmHWM"))/1024,
		float64(procStatusKB(nop.pid, "VmHWM"))/1024)
	if rl != nil {
		fmt.Printf("; ratelimit peak RSS %.1f MB", float64(procStatusKB(rl.pid, "VmHWM"))/1024)
	}
	fmt.Println()
	fmt.Println("Admit+Report is two RPCs per op; the guard's op is one client.Do. ×floor: req/s ÷ the floor's, p99 ÷ the floor's p99, same round and c.")
	fmt.Println("server CPU: of the process that served the phase (cooldownd, the no-op, ratelimit); the floor's client talks to Redis directly.")
	fmt.Println()
	m.printRatios(os.Stdout, rl != nil)
	fmt.Println()
	m.printGoals(os.Stdout, rl != nil)
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
	fmt.Fprintln(tw, "c\tproto\top\treq/s\t÷floor\tp50\tp99\tp99.9\tp99 ×floor\tredis cmd/op\tredis CPU µs/op\tlua µs/call\tserver CPU µs/op\terrors\t")
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
		med := func(f func(measured) float64) float64 { return medianOf(rs, f) }
		p := func(q float64) string { return ms(med(func(r measured) float64 { return float64(r.s.pct(q)) })) }
		ratio, p99r := "1", "1"
		if k.proto != "redis" {
			floor := phaseKey{k.c, "redis", opFloor}
			ratio = m.ratio(k, floor, func(a, b measured) float64 { return a.s.rate() / b.s.rate() }).format("%.2f")
			p99r = m.ratio(k, floor, func(a, b measured) float64 { return p99(a) / p99(b) }).format("%.1f")
		}
		cd := "-"
		if k.proto != "redis" {
			cd = fmt.Sprintf("%.0f", med(cpuPerOp))
		}
		e := fmt.Sprint(errs)
		if firstErr != nil {
			e += " (" + trunc(firstErr.Error(), 60) + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%.3g\t%.3g\t%.1f\t%s\t%s\t\n", k.c, k.proto, k.op, med(rate), ratio,
			p(0.50), p(0.99), p(0.999), p99r, med(cmdsPerOp), med(redisCPUPerOp), med(luaPerCall), cd, e)
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
