package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/anishathalye/porcupine"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/test/chaos/history"
)

// drive runs the traffic and the fault schedule, then checks everything.
func (c *cluster) drive(dir string) int {
	hot, cold := randomIDs(c.o.hot), randomIDs(c.o.cold)
	t0 := time.Now()
	until := t0.Add(c.o.d)
	if err := c.startWorkers(dir, hot, cold, until); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	warm := min(5*time.Second, c.o.d/8)
	sleepUntil(t0.Add(warm))
	gor0, rss0 := c.baseline()
	c.logf("baseline: replica goroutines %v, RSS MB %v", gor0, mb(rss0))

	if !c.o.soak {
		fs := c.faults()
		span := c.o.d - warm - 4*time.Second
		gap := span / time.Duration(len(fs))
		for i, f := range fs {
			at := t0.Add(warm + time.Duration(i)*gap)
			sleepUntil(at)
			hold := min(f.hold, gap*6/10)
			c.logf("fault: %s (%v)", f.name, hold)
			f.on()
			time.Sleep(hold)
			f.off()
			if f.hold > 0 {
				c.recovered(f.name, time.Now())
			}
		}
	}
	sleepUntil(until)
	// The workers stop at until, flush their queues and print a summary.
	for _, w := range c.workers {
		select {
		case <-w.p.Done():
		case <-time.After(15 * time.Second):
			c.logf("worker-%02d did not stop; killed", w.index)
			w.p.Kill()
		}
		select {
		case <-w.read:
		case <-time.After(5 * time.Second):
		}
	}
	// Every lease is settled or expires by its TTL: after one TTL, no
	// connection may hold a probe.
	time.Sleep(chaosPolicy().LeaseTTL + 500*time.Millisecond)
	stuck := c.probesLeft(append(slices.Clone(hot), cold...))
	time.Sleep(2 * time.Second)
	gor1, rss1 := c.baseline()
	c.logf("end: replica goroutines %v, RSS MB %v", gor1, mb(rss1))
	return c.report(dir, stuck, gor0, gor1, rss0, rss1)
}

func mb(xs []float64) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%.1f", x/(1<<20))
	}
	return out
}

// probesLeft returns the connections that still hold a probe lease.
func (c *cluster) probesLeft(ids []string) []string {
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	api := cooldownv1connect.NewCooldownServiceClient(&http.Client{Transport: &http.Transport{Protocols: &h2c}}, c.cds[len(c.cds)-1].url())
	var out []string
	for _, s := range ids {
		id, err := keys.ParseID(s)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := api.GetConnection(ctx, connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id.Bytes()}))
		cancel()
		if err == nil && resp.Msg.GetConnection().GetProbesInFlight() > 0 {
			out = append(out, s)
		}
	}
	return out
}

// report checks the histories and the summaries and prints the verdict.
func (c *cluster) report(dir string, stuck []string, gor0, gor1, rss0, rss1 []float64) int {
	ops, err := history.Read(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos: read histories:", err)
		return 2
	}
	var failures []string
	fail := func(format string, args ...any) { failures = append(failures, fmt.Sprintf(format, args...)) }

	kinds, codes := map[history.Kind]int{}, map[string]int{}
	var lat []int64
	rpcs, batches, entries := 0, 0, 0
	for _, o := range ops {
		switch {
		case o.Entry == 0:
			kinds[o.Kind]++
		case o.FirstOfRPC():
			batches++
			entries++
		default:
			entries++
			continue // one RPC: its code and latency counted once
		}
		rpcs++
		code := o.Code
		if code == "" {
			code = "ok"
			lat = append(lat, o.Return-o.Call)
		}
		codes[code]++
	}
	slices.Sort(lat)
	pct := func(p float64) int64 {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	fmt.Printf("\nrecorded %d RPCs %v and %d ReportBatches of %d reports; answers by code %v; latency of answered RPCs p50 %d ms, p99 %d ms, p99.9 %d ms\n",
		rpcs, kinds, batches, entries, codes, pct(0.5), pct(0.99), pct(0.999))
	for i, o := range c.failoverCosts(ops) {
		fmt.Printf("failover %d: %v\n", i+1, o)
	}

	var calls, provider, fallback, watch int64
	for _, w := range c.workers {
		w.mu.Lock()
		s := w.summary
		w.mu.Unlock()
		if s == nil {
			if !w.killed {
				fail("worker-%02d ended without a summary (crashed?): see %s", w.index, filepath.Join(dir, fmt.Sprintf("worker-%02d.log", w.index)))
			}
			continue
		}
		calls, provider, fallback, watch = calls+s.Calls, provider+s.Provider, fallback+s.Fallback, watch+s.Watch
		for k, n := range s.Errors {
			fail("worker-%02d: %d application calls failed with %s (neither the provider nor a fallback decision)", w.index, n, k)
		}
		fmt.Printf("worker-%02d: %d calls, %d to the provider, %d fallback decisions; local decisions %d, degradations %d, reports queued %d delivered %d dropped %d stale %d\n",
			w.index, s.Calls, s.Provider, s.Fallback, s.Stats.LocalDecisions, s.Stats.Degradations,
			s.Stats.Reports.Queued, s.Stats.Reports.Delivered, s.Stats.Reports.Dropped, s.Stats.Reports.Stale)
	}
	fmt.Printf("application calls: %d, to the provider %d, fallback decisions %d; watch events %d\n", calls, provider, fallback, watch)
	if watch == 0 && !c.o.soak {
		fail("no watch event was received")
	}
	for _, s := range stuck {
		fail("connection …%s still holds a probe lease one TTL after the run", s[:8])
	}
	for i := range gor0 {
		if i < len(gor1) && gor1[i] > gor0[i]*1.5+30 {
			fail("replica %d: goroutines %v at the end, %v at the start", i, gor1[i], gor0[i])
		}
		if i < len(rss1) && rss1[i] > 2*rss0[i]+64<<20 {
			fail("replica %d: RSS %.0f MB at the end, %.0f MB at the start", i, rss1[i]/(1<<20), rss0[i]/(1<<20))
		}
	}
	if panics := grepLogs(dir, "panic"); len(panics) > 0 {
		fail("panics in %v", panics)
	}

	vs := history.Check(ops, chaosPolicy())
	double := 0
	for _, v := range vs {
		if strings.HasPrefix(v.Property, "at most max_probes") {
			double++
		}
	}
	fmt.Printf("probes: %d double-granted, %d lost (a lease still held one TTL after the run)\n", double, len(stuck))
	fmt.Printf("safety checks over the whole run: %d violations\n", len(vs))
	for i, v := range vs {
		if i < 5 {
			fmt.Print(v.String())
		}
		fail("%s", v.Property)
	}
	ls := history.CheckLinearizable(ops, chaosPolicy(), c.o.linearizeTimeout)
	var okN, unknown, illegal int
	for _, l := range ls {
		switch l.Result {
		case porcupine.Ok:
			okN++
		case porcupine.Unknown:
			unknown++
		case porcupine.Illegal:
			illegal++
			if illegal <= 3 {
				fmt.Printf("NOT LINEARIZABLE: connection …%s (%d ops); minimal failing history (the longest linearizable prefix, then the op that cannot follow):\n", l.Conn[:8], l.Ops)
				for _, o := range l.Partial {
					fmt.Println("    " + o.String())
				}
				viz := filepath.Join(dir, "linearizability-"+l.Conn[:8]+".html")
				if f, err := os.Create(viz); err == nil {
					_ = porcupine.Visualize(history.Model(chaosPolicy()), l.Info, f)
					_ = f.Close()
					fmt.Println("    visualization:", viz)
				}
			}
		}
	}
	fmt.Printf("linearizability against internal/breaker: %d connections ok, %d not linearizable, %d undecided within %v\n",
		okN, illegal, unknown, c.o.linearizeTimeout)
	if illegal > 0 {
		fail("%d connection histories are not linearizable", illegal)
	}
	fmt.Printf("logs and histories: %s\n", dir)
	if len(failures) > 0 {
		fmt.Println("\nFAIL")
		for _, f := range dedupe(failures) {
			fmt.Println("  - " + f)
		}
		return 1
	}
	fmt.Println("\nPASS")
	return 0
}

func dedupe(xs []string) []string {
	seen := map[string]int{}
	var out []string
	for _, x := range xs {
		if seen[x]++; seen[x] == 1 {
			out = append(out, x)
		}
	}
	for i, x := range out {
		if n := seen[x]; n > 1 {
			out[i] = fmt.Sprintf("%s (×%d)", x, n)
		}
	}
	return out
}

// grepLogs returns the log files holding s.
func grepLogs(dir, s string) []string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(b), s) {
			out = append(out, filepath.Base(f))
		}
	}
	return out
}
