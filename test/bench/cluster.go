package main

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/proctest"
	"github.com/cooldownd/cooldownd/internal/server"
)

// goroutinesPerClient is how many calls one simulated client process has
// in flight at once.
const goroutinesPerClient = 4

// runCluster is the scaled-down real run of docs/scaling.md: a 3-master
// Redis Cluster, o.replicas cooldownds, o.clients client processes (each
// its own HTTP/2 connection to one replica) over o.conns connections; then
// the model, calibrated by the per-op Redis cost measured here.
func runCluster(ctx context.Context, o options, ps *proctest.Group) error {
	addrs, err := startCluster(ctx, ps, 3)
	if err != nil {
		return err
	}
	if coalesceOnly {
		return runCoalesceOnly(ctx, o, ps, addrs)
	}
	var reps []replica
	for i := range o.replicas {
		r, err := startCooldownd(ctx, ps, fmt.Sprintf("cooldownd-%d", i), o.bin, "--redis-mode", "cluster", "--redis-addrs", strings.Join(addrs, ","),
			"--redis-timeout", clusterRedisTimeout.String(), "--wait-replicas", "0")
		if err != nil {
			return err
		}
		reps = append(reps, r)
	}
	// As many replicas again, coalescing successes (decision 0054): the
	// coalesced phase's.
	creps, err := startCoalescing(ctx, ps, o, addrs)
	if err != nil {
		return err
	}
	m := &measurer{o: o, results: map[phaseKey][]measured{}}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		defer func() { _ = c.Close() }()
		m.mon = append(m.mon, c)
	}
	for _, r := range append(slices.Clone(reps), creps...) {
		m.cdPIDs = append(m.cdPIDs, r.pid)
	}
	ver, _ := m.mon[0].Info(ctx, "server").Result()
	kind := "client processes"
	if o.inproc {
		kind = "in-process clients (one HTTP/2 connection each)"
	}
	header(o, fmt.Sprintf("Redis Cluster %s, 3 masters; %d cooldownd replicas (and %d coalescing every %s); %d %s × %d goroutines; %d connections; all on loopback",
		infoField(ver, "redis_version"), o.replicas, o.replicas, coalesceInterval, o.clients, kind, goroutinesPerClient, o.conns))

	workers := o.clients * goroutinesPerClient
	cls := make([]cooldownv1connect.CooldownServiceClient, o.clients)
	for p := range o.clients {
		cls[p] = cooldownv1connect.NewCooldownServiceClient(h2c(), reps[p%len(reps)].url)
	}
	cl := func(w int) cooldownv1connect.CooldownServiceClient { return cls[w/goroutinesPerClient] }
	ccls := make([]cooldownv1connect.CooldownServiceClient, o.clients)
	for p := range o.clients {
		ccls[p] = cooldownv1connect.NewCooldownServiceClient(h2c(), creps[p%len(creps)].url)
	}
	conns := clusterConns(o.conns)
	fmt.Fprintf(os.Stderr, "registering %d connections…\n", len(conns))
	if err := register(ctx, cls, conns); err != nil {
		return err
	}
	rrd := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer func() { _ = rrd.Close() }()
	sha, err := rrd.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		return err
	}
	if err := awaitFirstLooks(ctx, rrd, len(conns)); err != nil {
		return err
	}
	ops := clusterOps(cl, conns)
	var dCoal, dDirect, cCoal, cDirect atomic.Int64 // answers of the two hot report phases
	ops["hotreport"] = hotReports(cl, conns[0], workers, &dCoal, &dDirect)
	ops["hotcoalesced"] = hotReports(func(w int) cooldownv1connect.CooldownServiceClient { return ccls[w/goroutinesPerClient] }, conns[0], workers, &cCoal, &cDirect)
	var bCoal, bDirect atomic.Int64
	ops["hotbatched"] = hotBatches(func(w int) cooldownv1connect.CooldownServiceClient { return ccls[w/goroutinesPerClient] }, conns, &bCoal, &bDirect)
	var pool *workerPool
	if !o.inproc {
		fmt.Fprintf(os.Stderr, "starting %d client processes…\n", o.clients)
		var urls []string
		for p := range o.clients {
			urls = append(urls, reps[p%len(reps)].url)
		}
		if pool, err = startWorkers(ps, urls, o.conns); err != nil {
			return err
		}
	}
	phases := []struct {
		id     string
		name   string
		rpcs   int  // RPCs per op
		inproc bool // driven from this process whatever -inproc says
	}{
		{"floor", "floor: EVALSHA return 1 (cluster client)", 0, true},
		{"admit", "Admit, uniform", 1, false},
		{"report", "Report SUCCESS, uniform", 1, false},
		{"admitreport", "Admit+Report, uniform", 2, false},
		{"hot", "Admit+Report, one hot connection", 2, false},
		// Both in-process, so that the two differ only in coalescing.
		{"hotreport", "Report SUCCESS keyed, one hot connection", 1, true},
		{"hotcoalesced", "the same, replicas coalescing every " + coalesceInterval.String() + routedNote(), 1, true},
		{"hotbatched", fmt.Sprintf("ReportBatch keyed of %d (the hot one + %d), the same replicas", batchWidth, batchWidth-1), 1, true},
	}
	type shardRow struct {
		id    string
		name  string
		rpcs  int
		s     sample
		shard []redisStats
		cd    time.Duration
	}
	var rows []shardRow
	var mix string
	for _, ph := range phases {
		var r0, r1 []redisStats
		var c0, c1 time.Duration
		var serr error
		per := func() []redisStats {
			var out []redisStats
			for _, c := range m.mon {
				s, err := readRedisStats(ctx, c)
				if err != nil {
					serr = err
				}
				out = append(out, s)
			}
			return out
		}
		start, end := func() { r0 = per(); c0 = m.cpu() }, func() { c1 = m.cpu(); r1 = per() }
		if mixPhase == ph.id {
			cm := &commandMix{mons: m.mon}
			s0, e0 := start, end
			start = func() { s0(); cm.open(ctx) }
			end = func() {
				e0()
				mix = fmt.Sprintf("the command mix of %q (-command-mix):\n%s", ph.name, cm.close(ctx, o.phase.Seconds()))
			}
		}
		var s sample
		switch {
		case ph.id == "floor":
			s = drive(ctx, workers, o.warm, o.phase, floorOp(rrd, sha), start, end)
		case pool != nil && !ph.inproc:
			if s, err = pool.run(ph.id, o.warm, o.phase, start, end); err != nil {
				return err
			}
		default:
			s = drive(ctx, workers, o.warm, o.phase, ops[ph.id], start, end)
		}
		if serr != nil {
			return fmt.Errorf("redis INFO: %w", serr)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		row := shardRow{id: ph.id, name: ph.name, rpcs: ph.rpcs, s: s, cd: c1 - c0}
		for i := range r0 {
			row.shard = append(row.shard, r1[i].sub(r0[i]))
		}
		rows = append(rows, row)
		fmt.Fprintf(os.Stderr, "%s done\n", ph.name)
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tops/s\tp50\tp99\terrors\tshard 0 cmds/s\tshard 1 cmds/s\tshard 2 cmds/s\thottest ÷ mean\tredis cmd/op\tredis CPU µs/op\tcooldownd CPU µs/RPC\t")
	var admitCPU, reportCPU, cdPerRPC float64
	for i, r := range rows {
		var tot redisStats
		var cells []string
		var hi float64
		for _, sh := range r.shard {
			tot = tot.add(sh)
			v := float64(sh.calls) / r.s.dur.Seconds()
			hi = math.Max(hi, v)
			cells = append(cells, fmt.Sprintf("%.0f", v))
		}
		mean := float64(tot.calls) / r.s.dur.Seconds() / float64(len(r.shard))
		n := math.Max(float64(r.s.n), 1)
		cpuOp := tot.cpu * 1e6 / n
		cd := "-"
		if r.rpcs > 0 {
			v := float64(r.cd.Microseconds()) / n / float64(r.rpcs)
			cd = fmt.Sprintf("%.0f", v)
			if i == 1 || i == 2 {
				cdPerRPC += v / 2
			}
		}
		switch i {
		case 1:
			admitCPU = cpuOp
		case 2:
			reportCPU = cpuOp
		}
		e := fmt.Sprint(r.s.errs)
		if r.s.err != nil {
			e += " (" + trunc(r.s.err.Error(), 50) + ")"
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t%.2f\t%.2f\t%.1f\t%s\t\n", r.name, r.s.rate(), ms(float64(r.s.pct(0.5))), ms(float64(r.s.pct(0.99))), e,
			strings.Join(cells, "\t"), hi/math.Max(mean, 1), float64(tot.calls)/n, cpuOp, cd)
	}
	_ = tw.Flush()
	fmt.Print(mix)
	// The hot connection's shard in the last two phases: store scripts per
	// second, without coalescing and with it, against the bound.
	// The hot master is the one with the most commands: at the bound its
	// scripts/s (12) can be fewer than a quiet master's sweeper scripts,
	// but every keyed report is a SET on it.
	hotShard := func(r shardRow) (redisStats, float64) {
		var hi redisStats
		for _, sh := range r.shard {
			if sh.calls > hi.calls {
				hi = sh
			}
		}
		return hi, r.s.dur.Seconds()
	}
	row := func(id string) shardRow {
		i := slices.IndexFunc(rows, func(r shardRow) bool { return r.id == id })
		return rows[i]
	}
	hotRep, hotCoal, hotBat := row("hotreport"), row("hotcoalesced"), row("hotbatched")
	direct, dsec := hotShard(hotRep)
	coal, csec := hotShard(hotCoal)
	bat, bsec := hotShard(hotBat)
	bound, why := coalesceBound(o)
	fmt.Printf("the hot connection's master: %.0f scripts/s for %.0f reports/s applied at once; %.0f scripts/s for %.0f reports/s coalesced (bound: %s = %.0f batches/s, one script each)\n",
		float64(direct.evalsha)/dsec, hotRep.s.rate(), float64(coal.evalsha)/csec, hotCoal.s.rate(), why, bound)
	// Calibration of the coalesced model: a batch costs one Report script
	// (decision 0063), and each keyed report in it a SET NX GET inside
	// that script: what is left of the coalesced phase's Redis CPU once
	// its batches are paid, per report.
	var ctot redisStats
	for _, sh := range hotCoal.shard {
		ctot = ctot.add(sh)
	}
	batches := float64(coal.evalsha)
	keyUS := math.Max(0, (ctot.cpu*1e6-batches*reportCPU)/math.Max(float64(hotCoal.s.n), 1))
	// Calibration of the batched model (decision 0065): each ReportBatch
	// is one claim script, the rest of its scripts are batches at a
	// Report's cost; a claim costs what is left, per ReportBatch.
	var btot redisStats
	for _, sh := range hotBat.shard {
		btot = btot.add(sh)
	}
	nb := math.Max(float64(hotBat.s.n), 1)
	claimUS := math.Max(0, (btot.cpu*1e6-math.Max(0, float64(btot.evalsha)-nb)*reportCPU)/nb)
	cdPerBatched := float64(hotBat.cd.Microseconds()) / (nb * batchWidth) // cooldownd CPU per report in a ReportBatch
	fmt.Printf("batched: %.0f reports/s in %.0f ReportBatch/s (answers, warm-up included: %d coalesced, %d applied at once); the hot master %.0f scripts/s; Redis CPU %.1f µs per report, %.1f µs per claim; keys written: one claim per ReportBatch\n",
		hotBat.s.rate()*batchWidth, hotBat.s.rate(), bCoal.Load(), bDirect.Load(), float64(bat.evalsha)/bsec, btot.cpu*1e6/(nb*batchWidth), claimUS)
	fmt.Printf("answers (warm-up included): applied at once %d and coalesced %d through the first replicas, %d and %d through the coalescing ones\n",
		dDirect.Load(), dCoal.Load(), cDirect.Load(), cCoal.Load())
	fmt.Printf("coalesced: %.0f batches in the window, Redis CPU %.1f µs per keyed report past its batch's script (%.1f µs)\n",
		batches, keyUS, reportCPU)
	var keys []string
	for i, sh := range rows[len(rows)-1].shard {
		keys = append(keys, fmt.Sprintf("shard %d: %d", i, sh.keys))
	}
	fmt.Printf("keys per shard: %s\n", strings.Join(keys, ", "))
	var rss []string
	for _, r := range reps {
		rss = append(rss, fmt.Sprintf("%.1f", float64(procStatusKB(r.pid, "VmHWM"))/1024))
	}
	fmt.Printf("cooldownd peak RSS (VmHWM) per replica, MB: %s\n\n", strings.Join(rss, ", "))
	fmt.Printf("model, calibrated above: Redis CPU %.1f µs per Admit, %.1f µs per Report (a batched report assumed to cost one Report); cooldownd CPU %.0f µs per RPC.\n",
		admitCPU, reportCPU, cdPerRPC)
	fmt.Printf("no mirror: every call is Admit + Report. mirror: one batched report per process per connection it used per %.0f s.\n", modelInterval)
	fmt.Printf("coalesced: the mirror's reports, merged by each of %d replicas per connection per %.0f s: a batch costs one Report script (%.1f µs), each keyed report in it %.1f µs.\n\n",
		modelReplicas, modelCoalesce, reportCPU, keyUS)
	for _, r := range o.modelRate {
		printModel(r, admitCPU, reportCPU, cdPerRPC, reportCPU, keyUS, claimUS, cdPerBatched)
	}
	return nil
}

// register creates every connection (Admit, then Report SUCCESS) from 64
// goroutines.
func register(ctx context.Context, cls []cooldownv1connect.CooldownServiceClient, conns []*cooldownv1.Connection) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
		next = make(chan *cooldownv1.Connection)
	)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := cls[g%len(cls)]
			for c := range next {
				_, err := cl.Admit(ctx, connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{c}}))
				if err == nil {
					_, err = cl.Report(ctx, connect.NewRequest(&cooldownv1.ReportRequest{Connection: c, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, HttpStatus: 200}))
				}
				if err != nil {
					mu.Lock()
					ferr = err
					mu.Unlock()
				}
			}
		}()
	}
	for _, c := range conns {
		next <- c
	}
	close(next)
	wg.Wait()
	return ferr
}

// awaitFirstLooks waits until the sweeper has looked once at each of the n
// connections just registered. A registration holds its connection's wake
// entry 10 s ahead (the store's registerGrace), so the sweeper looks at
// every new connection once that long after, rescheduling it to its
// expiry: three scripts each (a look, the resched, a look again), one
// connection after the other. At a few ms per round trip on a loaded
// machine the pass over thousands of connections took 10-20 s and fell in
// the last phases, on every master (docs/scaling.md). It is the cost of a
// connection's creation, not of its traffic, so it is kept out of the
// measured phases.
func awaitFirstLooks(ctx context.Context, rdb redis.Cmdable, n int) error {
	const horizon = time.Hour // rescheduled entries are an idle TTL (24 h) out
	start := time.Now()
	deadline := start.Add(3 * time.Minute)
	fmt.Fprintf(os.Stderr, "waiting for the sweeper's first look at %d new connections…\n", n)
	for {
		due, err := rdb.ZCount(ctx, keys.Wake(keys.DefaultTenant), "-inf", fmt.Sprint(time.Now().Add(horizon).UnixMilli())).Result()
		if err != nil {
			return fmt.Errorf("the sweeper's first looks: %w", err)
		}
		if due == 0 {
			fmt.Fprintf(os.Stderr, "the sweeper looked at them in %s\n", time.Since(start).Round(100*time.Millisecond))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the sweeper's first looks: %d of %d connections still due after %s", due, n, time.Since(start).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Model parameters: the fleet of issue 14.
const (
	modelProcs    = 1000
	modelReplicas = 16
	modelConns    = 10000
	modelInterval = 1.0 // s, the mirror's batch interval
	modelCoalesce = 1.0 // s, the replicas' --coalesce-interval
)

// coalesceInterval is the coalescing replicas' --coalesce-interval in the
// cluster run (-coalesce-interval).
var coalesceInterval = 250 * time.Millisecond

// clusterRedisTimeout is the replicas' --redis-timeout in the cluster run
// (-cluster-redis-timeout): on a loaded machine the default 200 ms cuts
// off round trips that a saturated loopback Cluster answers late. The
// replicas run with --wait-replicas 0: the run's masters have no replicas
// (auto would wait for one on a Cluster).
var clusterRedisTimeout = 200 * time.Millisecond

// coalesceOnly runs only the coalescing check (-coalesce-only).
var coalesceOnly bool

// coalesceRoute: the coalescing replicas route each connection's batches
// to its owner among them (-coalesce-route, decision 0064).
var coalesceRoute = true

// addClusterFlags adds the cluster run's own flags to fs.
func addClusterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&coalesceOnly, "coalesce-only", false, "with -cluster: only the coalescing check (coalescing replicas, keyed successes on one hot connection, then as keyed ReportBatch of 16 connections; the hot master's commands)")
	fs.BoolVar(&coalesceRoute, "coalesce-route", coalesceRoute, "with -cluster: the coalescing replicas route each connection's batches to one owner among them (--coalesce-peer-address); false: each applies its own")
	fs.DurationVar(&clusterRedisTimeout, "cluster-redis-timeout", clusterRedisTimeout, "with -cluster: the replicas' --redis-timeout")
	fs.DurationVar(&coalesceInterval, "coalesce-interval", coalesceInterval, "with -cluster: the coalescing replicas' --coalesce-interval")
	fs.StringVar(&mixPhase, "command-mix", "", "with -cluster: print each master's commands in this phase (floor, admit, report, admitreport, hot, hotreport, hotcoalesced, hotbatched; a SLOWLOG of every command slows it)")
}

// printModel prints the analytical model of docs/scaling.md: a fleet of
// 1,000 client processes × 16 replicas × 10,000 connections, each process
// making rate calls/s spread over the connections by a Zipf law (s = 1),
// on S Redis Cluster shards, calibrated by the Redis CPU per Admit and per
// Report and the cooldownd CPU per RPC measured above.
func printModel(rate, admitUS, reportUS, cdUS, batchUS, keyUS, claimUS, cdBatchedUS float64) {
	lambda := rate * modelProcs
	var h float64
	for i := 1; i <= modelConns; i++ {
		h += 1 / float64(i)
	}
	p1 := 1 / h // the hottest connection's share of calls
	// With the mirror, connection i costs one batched report per process
	// that used it in an interval: P·(1-e^(-r·p_i·T))/T reports/s.
	// Coalesced, each of R replicas sends connection i one batch per
	// interval Tc in which one of its processes reported on it: the
	// mirror's m_i reports/s spread over R replicas, R·(1-e^(-m_i·Tc/R))/Tc
	// batches/s, at most R/Tc.
	// Routed (decision 0064), connection i's batches meet at its one
	// owner: (1-e^(-m_i·Tc))/Tc batches/s, at most 1/Tc.
	// A replica forgets a connection after CoalesceQuietKeep+1 flushes in
	// a row without its successes (decision 0065); its next success then
	// goes at once, a keyed Report: R·(1-e^(-x))·e^(-(K+1)·x)/Tc reports/s
	// with x = m_i·Tc/R, whether routed or not (each replica learns what it
	// holds from its own answers).
	var mirrorOps, mirrorHot, batchOps, batchHot, routedOps, routedHot, relearn, relearnHot float64
	for i := 1; i <= modelConns; i++ {
		pi := 1 / (float64(i) * h)
		v := modelProcs * (1 - math.Exp(-rate*pi*modelInterval)) / modelInterval
		b := modelReplicas * (1 - math.Exp(-v*modelCoalesce/modelReplicas)) / modelCoalesce
		rb := (1 - math.Exp(-v*modelCoalesce)) / modelCoalesce
		x := v * modelCoalesce / modelReplicas
		rl := modelReplicas * (1 - math.Exp(-x)) * math.Exp(-float64(server.CoalesceQuietKeep+1)*x) / modelCoalesce
		mirrorOps += v
		batchOps += b
		routedOps += rb
		relearn += rl
		if i == 1 {
			mirrorHot, batchHot, routedHot, relearnHot = v, b, rb, rl
		}
	}
	// Batched (decision 0065): each process flushes its connections in
	// one ReportBatch per 1,024 of them per interval, one claim each;
	// routed, their successes are held unkeyed: the batches as routed,
	// and no key per report.
	perProc := mirrorOps * modelInterval / modelProcs
	claims := modelProcs * math.Ceil(perProc/1024) / modelInterval
	callUS := admitUS + reportUS
	fmt.Printf("%d client processes × %.0f calls/s = %.0f calls/s, %d replicas, %d connections (Zipf s=1: the hottest carries %.1f%%),\n",
		modelProcs, rate, lambda, modelReplicas, modelConns, 100*p1)
	fmt.Printf("store ops/s (one Admit or Report script each): %.0f without the mirror, %.0f with it; the hottest connection %.0f without, %.0f with (at most one per process per interval).\n",
		2*lambda, mirrorOps, 2*lambda*p1, mirrorHot)
	fmt.Printf("coalesced: %.0f batches/s (one script each) and %.0f keyed reports/s; the hottest connection %.0f batches/s (at most %d replicas × 1/%.0f s).\n",
		batchOps, mirrorOps, batchHot, modelReplicas, modelCoalesce)
	fmt.Printf("coalesced and routed: %.0f batches/s (one script each); the hottest connection %.1f batches/s (at most 1/%.0f s), and at most %d Merge calls/s between the replicas.\n",
		routedOps, routedHot, modelCoalesce, int(modelReplicas*(modelReplicas-1)/modelCoalesce))
	fmt.Printf("batched and routed (ReportBatch): %.0f batches/s as routed, and %.0f claims/s (each process's %.0f connections per interval in %.0f ReportBatch), no key per report.\n",
		routedOps, claims, perProc, math.Ceil(perProc/1024))
	fmt.Printf("coalesced, routed or not: %.0f keyed reports/s applied at once to learn a connection again after %d quiet intervals at a replica (in each column's scripts).\n",
		relearn, server.CoalesceQuietKeep+1)
	fmt.Printf("cooldownd: %.0f RPC/s per replica without the mirror (%.2f cores each), %.0f with it (%.2f cores; coalescing does not change it); batched, %.0f ReportBatch/s per replica (%.2f cores at %.1f µs per report in one).\n\n",
		2*lambda/modelReplicas, 2*lambda/modelReplicas*cdUS/1e6, mirrorOps/modelReplicas, mirrorOps/modelReplicas*cdUS/1e6,
		claims/modelReplicas, mirrorOps/modelReplicas*cdBatchedUS/1e6, cdBatchedUS)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shards\tno mirror: ops/s per shard\thottest shard ops/s\thottest shard CPU\tmax calls/s (hottest shard ≤ 1 core)\tmirror: ops/s per shard\thottest shard ops/s\thottest shard CPU\tcoalesced: scripts/s per shard\thottest shard scripts/s\thottest shard CPU\trouted: scripts/s per shard\thottest shard scripts/s\thottest shard CPU\tbatched: scripts/s per shard\thottest shard scripts/s\thottest shard CPU\t")
	for _, s := range []float64{1, 3, 6, 12, 24, 48} {
		hotShare := p1 + (1-p1)/s // the hot connection's slot plus an even share of the rest
		noHot := 2 * lambda * hotShare
		noCPU := lambda * hotShare * callUS / 1e6
		maxCalls := 1e6 / (callUS * hotShare)
		mHot := mirrorHot + (mirrorOps-mirrorHot)/s
		mCPU := mHot * reportUS / 1e6
		lHot := relearnHot + (relearn-relearnHot)/s
		bHot := batchHot + (batchOps-batchHot)/s + lHot
		bCPU := (bHot*batchUS + mHot*keyUS) / 1e6
		rHot := routedHot + (routedOps-routedHot)/s + lHot
		rCPU := (rHot*batchUS + mHot*keyUS) / 1e6
		cHot := rHot + claims/s // claims spread over the slots
		cCPU := (rHot*batchUS + lHot*keyUS + claims/s*claimUS) / 1e6
		fmt.Fprintf(tw, "%.0f\t%.0f\t%.0f\t%.0f%%\t%.0f\t%.0f\t%.0f\t%.0f%%\t%.0f\t%.0f\t%.0f%%\t%.0f\t%.0f\t%.0f%%\t%.0f\t%.0f\t%.0f%%\t\n", s, 2*lambda/s, noHot, 100*noCPU, maxCalls, mirrorOps/s, mHot, 100*mCPU,
			(batchOps+relearn)/s, bHot, 100*bCPU, (routedOps+relearn)/s, rHot, 100*rCPU, (routedOps+relearn+claims)/s, cHot, 100*cCPU)
	}
	_ = tw.Flush()
	fmt.Printf("without the mirror capacity grows with shards only up to the hot connection's slot: at most %.0f calls/s however many shards.\n\n", 1e6/(callUS*p1))
}

// clusterOps are the phases of the cluster run on worker w's client cl(w):
// Admit, Report SUCCESS and both on a connection picked at random, and both
// on one hot connection. Revisions are not tracked per connection: a
// healthy connection's success with revision 0 counts all the same (there
// is nothing open for it to close).
func clusterOps(cl func(w int) cooldownv1connect.CooldownServiceClient, conns []*cooldownv1.Connection) map[string]op {
	admitOn := func(ctx context.Context, w int, c *cooldownv1.Connection) error {
		r, err := cl(w).Admit(ctx, connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{c}}))
		if err == nil && r.Msg.GetDecision() != cooldownv1.Decision_DECISION_ALLOW {
			err = fmt.Errorf("admit: %v", r.Msg.GetDecision())
		}
		return err
	}
	reportOn := func(ctx context.Context, w int, c *cooldownv1.Connection) error {
		_, err := cl(w).Report(ctx, connect.NewRequest(&cooldownv1.ReportRequest{Connection: c, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, HttpStatus: 200}))
		return err
	}
	both := func(ctx context.Context, w int, c *cooldownv1.Connection) error {
		if err := admitOn(ctx, w, c); err != nil {
			return err
		}
		return reportOn(ctx, w, c)
	}
	pick := func() *cooldownv1.Connection { return conns[rand.N(len(conns))] }
	return map[string]op{
		"admit":       func(ctx context.Context, w int) error { return admitOn(ctx, w, pick()) },
		"report":      func(ctx context.Context, w int) error { return reportOn(ctx, w, pick()) },
		"admitreport": func(ctx context.Context, w int) error { return both(ctx, w, pick()) },
		"hot":         func(ctx context.Context, w int) error { return both(ctx, w, conns[0]) },
	}
}

// hotReports is the hot connection's keyed success reports, each worker
// carrying the revision its last answer named (a coalescing replica takes
// only a report at the revision it learned), each report with an
// idempotency key as the clients send it.
func hotReports(cl func(w int) cooldownv1connect.CooldownServiceClient, c *cooldownv1.Connection, workers int, coalesced, direct *atomic.Int64) op {
	revs := make([]atomic.Uint64, workers)
	return func(ctx context.Context, w int) error {
		var key [16]byte
		for i := range key {
			key[i] = byte(rand.N(256))
		}
		r, err := cl(w).Report(ctx, connect.NewRequest(&cooldownv1.ReportRequest{Connection: c, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS,
			HttpStatus: 200, Revision: revs[w].Load(), IdempotencyKey: base64.RawURLEncoding.EncodeToString(key[:])}))
		if err == nil {
			revs[w].Store(r.Msg.GetRevision())
			if r.Msg.GetApplied() == cooldownv1.ReportApplied_REPORT_APPLIED_COALESCED {
				coalesced.Add(1)
			} else {
				direct.Add(1)
			}
		}
		return err
	}
}

func clusterConns(n int) []*cooldownv1.Connection {
	conns := make([]*cooldownv1.Connection, n)
	for i := range conns {
		conns[i] = conn(fmt.Sprintf("cluster-%d", i))
	}
	return conns
}

// runCoalesceOnly is the coalescing check alone (-cluster -coalesce-only):
// o.replicas replicas coalescing every -coalesce-interval on the 3-master
// Cluster at addrs, the bench's goroutines sending keyed successes on one
// hot connection, and the hot master's commands over the window against
// the bound of replicas × 1/interval batches (one script each).
func runCoalesceOnly(ctx context.Context, o options, ps *proctest.Group, addrs []string) error {
	creps, err := startCoalescing(ctx, ps, o, addrs)
	if err != nil {
		return err
	}
	var cls []cooldownv1connect.CooldownServiceClient
	for _, r := range creps {
		cls = append(cls, cooldownv1connect.NewCooldownServiceClient(h2c(), r.url))
	}
	var mons []*redis.Client
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		defer func() { _ = c.Close() }()
		mons = append(mons, c)
	}
	workers := o.clients * goroutinesPerClient
	header(o, fmt.Sprintf("Redis Cluster, 3 masters; %d cooldownd replicas coalescing every %s%s; %d goroutines on one hot connection, keyed successes",
		o.replicas, coalesceInterval, routedNote(), workers))
	var co, di atomic.Int64
	f := hotReports(func(w int) cooldownv1connect.CooldownServiceClient { return cls[(w/goroutinesPerClient)%len(cls)] }, clusterConns(1)[0], workers, &co, &di)
	var r0, r1 []redisStats
	per := func() (out []redisStats) {
		for _, c := range mons {
			st, _ := readRedisStats(ctx, c)
			out = append(out, st)
		}
		return out
	}
	s := drive(ctx, workers, o.warm, o.phase, f, func() { r0 = per() }, func() { r1 = per() })
	var hot redisStats
	for i := range r0 {
		if d := r1[i].sub(r0[i]); d.calls > hot.calls { // as hotShard's
			hot = d
		}
	}
	sec := s.dur.Seconds()
	bound, _ := coalesceBound(o)
	fmt.Printf("%.0f reports/s (errors %d; answers, warm-up included: %d coalesced, %d applied at once)\n", s.rate(), s.errs, co.Load(), di.Load())
	fmt.Printf("the hot master: %.0f scripts/s, %.0f commands/s (%.2f scripts per report); bound %.0f batches/s, one script each; Redis CPU %.1f µs per report\n",
		float64(hot.evalsha)/sec, float64(hot.calls)/sec, float64(hot.evalsha)/math.Max(float64(s.n), 1), bound, hot.cpu*1e6/math.Max(float64(s.n), 1))

	// The same successes as the mirror flushes them (decision 0065): one
	// keyed ReportBatch of the hot connection and 15 others per op.
	co.Store(0)
	di.Store(0)
	b := hotBatches(func(w int) cooldownv1connect.CooldownServiceClient { return cls[(w/goroutinesPerClient)%len(cls)] }, clusterConns(1+batchPool), &co, &di)
	s = drive(ctx, workers, o.warm, o.phase, b, func() { r0 = per() }, func() { r1 = per() })
	var all redisStats
	hot = redisStats{}
	for i := range r0 {
		d := r1[i].sub(r0[i])
		all = all.add(d)
		if d.calls > hot.calls {
			hot = d
		}
	}
	sec = s.dur.Seconds()
	n := math.Max(float64(s.n), 1) * batchWidth
	e := ""
	if s.err != nil {
		e = " (" + trunc(s.err.Error(), 80) + ")"
	}
	fmt.Printf("batched: %.0f reports/s in %.0f ReportBatch/s of %d (errors %d%s; answers, warm-up included: %d coalesced, %d applied at once)\n",
		s.rate()*batchWidth, s.rate(), batchWidth, s.errs, e, co.Load(), di.Load())
	fmt.Printf("the hot master: %.0f scripts/s, %.0f commands/s; every master: %.2f commands per report, Redis CPU %.1f µs per report\n",
		float64(hot.evalsha)/sec, float64(hot.calls)/sec, float64(all.calls)/n, all.cpu*1e6/n)
	return nil
}
