// Command chaos runs cooldownd under real faults and checks what every
// client saw: it starts redis-server (single, or master + replica +
// Sentinel), K cooldownd replicas and P client processes on loopback,
// drives mixed Admit/Report/ExtendLease/Watch traffic on a few hot and
// many cold connections, injects faults on a schedule, and checks the
// recorded histories: the safety properties over the whole run and each
// connection's history for linearizability against internal/breaker. It
// exits 1 on a violation. See docs/reliability.md.
//
//	go run ./test/chaos              # about 90 s
//	go run ./test/chaos -short       # about 25 s (what make test runs)
//	go run ./test/chaos -sentinel    # failovers instead of proxy faults
//	go run ./test/chaos -soak -d 10m # fixed rate, no faults: leaks and drift
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

type options struct {
	d                time.Duration
	k, p, g          int
	hot, cold        int
	sentinel, soak   bool
	short            bool
	fault            string
	dir              string
	pace             time.Duration
	linearizeTimeout time.Duration
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		if err := workerMain(); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.DurationVar(&o.d, "d", 0, "run duration (default 90s; 25s with -short; 10m with -soak)")
	flag.IntVar(&o.k, "k", 3, "cooldownd replicas")
	flag.IntVar(&o.p, "p", 4, "client processes")
	flag.IntVar(&o.g, "g", 4, "goroutines per client process")
	flag.IntVar(&o.hot, "hot", 3, "hot connections (most of the traffic, failing in waves)")
	flag.IntVar(&o.cold, "cold", 100, "cold connections")
	flag.BoolVar(&o.sentinel, "sentinel", false, "Redis master + replica + Sentinel; faults include failovers")
	flag.BoolVar(&o.soak, "soak", false, "fixed rate, no faults: requests, errors, latency, goroutines and RSS at start and end")
	flag.BoolVar(&o.short, "short", false, "a short run with every fault: what make test runs")
	flag.StringVar(&o.fault, "seed-fault", "", "plant a server bug the checker must catch: double-probe or stale-accept")
	flag.StringVar(&o.dir, "dir", "", "directory for logs and histories (default: a new temp dir)")
	flag.DurationVar(&o.pace, "pace", 0, "pause between one goroutine's calls (default 15ms; 20ms with -soak)")
	flag.DurationVar(&o.linearizeTimeout, "linearize-timeout", 20*time.Second, "bound of one connection's linearizability check")
	flag.Parse()
	switch {
	case o.d > 0:
	case o.soak:
		o.d = 10 * time.Minute
	case o.short:
		o.d = 25 * time.Second
	default:
		o.d = 90 * time.Second
	}
	if o.short {
		o.k, o.p, o.g, o.cold = min(o.k, 2), min(o.p, 3), min(o.g, 3), min(o.cold, 30)
	}
	if o.pace <= 0 {
		o.pace = 15 * time.Millisecond
		if o.soak {
			o.pace = 20 * time.Millisecond
		}
	}
	if o.fault != "" && o.fault != "double-probe" && o.fault != "stale-accept" {
		fmt.Fprintln(os.Stderr, "chaos: -seed-fault must be double-probe or stale-accept")
		os.Exit(2)
	}
	if o.k < 2 || o.p < 2 || o.g < 1 || o.hot < 1 || o.cold < 1 {
		fmt.Fprintln(os.Stderr, "chaos: need -k >= 2, -p >= 2, -g, -hot and -cold >= 1")
		os.Exit(2)
	}
	os.Exit(run(o))
}
