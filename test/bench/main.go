// Command bench measures cooldownd beside its floor. It starts its own
// redis-server (free loopback port, no persistence) and cooldownd (built
// from ./cmd/cooldownd), then for each concurrency runs bounded phases:
//
//   - floor: EVALSHA of `return 1` through go-redis, the least any
//     Redis-backed decision service can cost per call;
//   - the references of each protocol: a no-op handler of cooldownd's
//     own contract (Admit answers a fixed ALLOW, Report a fixed answer) in
//     a process of its own, served as cooldownd serves (noop.go), and the
//     same handler running one EVALSHA return 1 per RPC;
//   - Admit, Report SUCCESS, Admit+Report, a 3-candidate Admit whose first
//     two candidates are cooling down, over Connect (proto), gRPC and
//     Connect JSON over h2c, and Connect proto and JSON over HTTP/1.1;
//   - envoyproxy/ratelimit's ShouldRateLimit, when -ratelimit names a
//     binary built from its source (ratelimit.go);
//   - the Go client's guard (client.Do with a no-op provider call), without
//     and with its mirror (client.WithMirror).
//
// For each it prints req/s, p50/p99/p99.9, req/s and p99 as ratios to the
// floor of the same run and concurrency, Redis commands and Redis CPU per
// operation (INFO commandstats and INFO cpu deltas), Lua time per script
// call, and the serving process's CPU per operation (/proc/<pid>/stat);
// then a table of each cooldownd figure beside its references as ratios
// (report.go), cooldownd's peak RSS, and issue 25's goals, each met or not
// met with its figure. With -runs N the phases are repeated in interleaved
// rounds and every figure is the median over the rounds.
//
// With -cluster it runs on a 3-master Redis Cluster with several replicas
// instead and prints per-shard load and the scaling model (docs/scaling.md).
//
//	go run ./test/bench                # full: c=1,16,64, 5 protocols, 2 s phases
//	go run ./test/bench -short         # make bench: c=16,64, 3 protocols, 1 s phases
//	go run ./test/bench -short -ratelimit /path/to/ratelimit
//	go run ./test/bench -runs 3        # interleaved rounds, medians
//	go run ./test/bench -cluster       # docs/scaling.md
//
// Figures are printed, never asserted: they depend on the machine and its
// load.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cooldownd/cooldownd/internal/proctest"
)

type options struct {
	short     bool
	phase     time.Duration
	warm      time.Duration
	conc      []int
	runs      int
	protos    []string
	bin       string
	dir       string
	cluster   bool
	replicas  int
	clients   int
	conns     int
	modelRate []float64
	ops       map[string]bool
	inproc    bool
	ratelimit string // envoyproxy/ratelimit binary, or ""
	label     string // what the before/after row calls the measured build
	goalProto string // the protocol the goals are checked over
}

// ratelimitEnv names the ratelimit binary when -ratelimit is not given.
const ratelimitEnv = "COOLDOWN_BENCH_RATELIMIT"

func main() {
	code, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
	}
	os.Exit(code)
}

func run() (int, error) {
	var o options
	var conc, protos, ops, rates, workerURL string
	var worker bool
	var noopAddr, noopRedis string
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.BoolVar(&o.short, "short", false, "short run (make bench): c=16,64, protocols connect,grpc,json-h1, 1 s phases")
	fs.DurationVar(&o.phase, "phase", 0, "measured length of each phase (default 2s; 1s with -short)")
	fs.StringVar(&conc, "c", "1,16,64", "concurrencies (client goroutines)")
	fs.IntVar(&o.runs, "runs", 1, "interleaved rounds; figures are medians over them")
	fs.StringVar(&protos, "protocols", "", "protocols: connect,grpc,json (h2c), connect-h1,json-h1 (HTTP/1.1) (default all; connect,grpc,json-h1 with -short)")
	fs.StringVar(&ops, "ops", "admit,report,admitreport,admit3,guard,mirror", "phases besides the floor: admit, report, admitreport, admit3, guard, mirror")
	fs.StringVar(&o.bin, "cooldownd", "", "cooldownd binary to measure (default: go build ./cmd/cooldownd)")
	fs.StringVar(&o.ratelimit, "ratelimit", os.Getenv(ratelimitEnv), "envoyproxy/ratelimit binary to measure beside cooldownd (default $"+ratelimitEnv+"; docs/benchmarks.md builds it)")
	fs.StringVar(&o.goalProto, "goal-protocol", "connect", "the protocol issue 25's goals are checked over (connect: Connect proto over h2c, the Go client's)")
	fs.StringVar(&o.label, "label", "", "the measured build's name in the before/after row (default: git's short HEAD, or the -cooldownd binary's name)")
	fs.StringVar(&o.dir, "dir", "", "directory for logs and data (default: a temporary one, removed)")
	fs.BoolVar(&o.cluster, "cluster", false, "3-master Redis Cluster, several replicas, many clients (docs/scaling.md)")
	fs.IntVar(&o.replicas, "replicas", 3, "with -cluster: cooldownd replicas")
	fs.IntVar(&o.clients, "clients", 32, "with -cluster: client processes (each one HTTP/2 connection to one replica, 4 goroutines)")
	fs.BoolVar(&o.inproc, "inproc", false, "with -cluster: run the clients as goroutine groups in this process instead of one OS process each")
	fs.BoolVar(&worker, "worker", false, "internal: run as one client process of -cluster")
	fs.StringVar(&workerURL, "worker-url", "", "internal: the replica a -worker talks to")
	fs.StringVar(&noopAddr, "noop-server", "", "internal: serve the no-op CooldownService on this address")
	fs.StringVar(&noopRedis, "noop-redis", "", "internal: with -noop-server, run EVALSHA return 1 on this Redis per RPC")
	fs.IntVar(&o.conns, "connections", 5000, "with -cluster: distinct connections")
	fs.StringVar(&rates, "model-rates", "10,100,1000", "with -cluster: calls/s per client process in the model of 1,000 processes")
	addClusterFlags(fs) // cluster.go's own
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, nil
		}
		return 2, err
	}
	if noopAddr != "" {
		return 1, runNoop(noopAddr, noopRedis)
	}
	if worker {
		if err := runWorker(workerURL, o.conns); err != nil {
			return 1, err
		}
		return 0, nil
	}
	if o.short && !flagSet(fs, "c") {
		conc = "16,64"
	}
	for _, s := range strings.Split(conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return 2, fmt.Errorf("-c: bad concurrency %q", s)
		}
		o.conc = append(o.conc, n)
	}
	for _, s := range strings.Split(rates, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || f <= 0 {
			return 2, fmt.Errorf("-model-rates: bad rate %q", s)
		}
		o.modelRate = append(o.modelRate, f)
	}
	if o.phase == 0 {
		o.phase = 2 * time.Second
		if o.short {
			o.phase = time.Second
		}
	}
	o.warm = min(200*time.Millisecond, o.phase/5)
	switch {
	case protos != "":
		o.protos = strings.Split(protos, ",")
	case o.short:
		o.protos = []string{"connect", "grpc", "json-h1"}
	default:
		for _, p := range protocols {
			o.protos = append(o.protos, p.name)
		}
	}
	for _, p := range o.protos {
		if _, ok := protocolByName(p); !ok {
			return 2, fmt.Errorf("-protocols: unknown %q", p)
		}
	}
	if _, ok := protocolByName(o.goalProto); !ok {
		return 2, fmt.Errorf("-goal-protocol: unknown %q", o.goalProto)
	}
	o.ops = map[string]bool{}
	for _, n := range strings.Split(ops, ",") {
		switch n = strings.TrimSpace(n); n {
		case "admit", "report", "admitreport", "admit3", "guard", "mirror":
			o.ops[n] = true
		default:
			return 2, fmt.Errorf("-ops: unknown %q", n)
		}
	}
	if o.runs < 1 {
		o.runs = 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.dir == "" {
		d, err := os.MkdirTemp("", "cooldownd-bench-")
		if err != nil {
			return 1, err
		}
		defer func() { _ = os.RemoveAll(d) }()
		o.dir = d
	} else if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return 1, err
	}
	ps := proctest.NewGroup(o.dir)
	defer ps.KillAll()
	if o.label == "" {
		o.label = filepath.Base(o.bin)
		if o.bin == "" {
			o.label = gitHead(ctx)
		}
	}
	if o.bin == "" {
		bin, err := buildCooldownd(ctx, o.dir)
		if err != nil {
			return 1, err
		}
		o.bin = bin
	}
	var err error
	if o.cluster {
		err = runCluster(ctx, o, ps)
	} else {
		err = runSingle(ctx, o, ps)
	}
	if err != nil {
		return 1, err
	}
	return 0, nil
}

func protocolByName(name string) (protocol, bool) {
	for _, p := range protocols {
		if p.name == name {
			return p, true
		}
	}
	return protocol{}, false
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// gitHead is the working tree's short HEAD, "-dirty" when it has changes
// to Go files, or "?" outside a git checkout.
func gitHead(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "?"
	}
	head := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--", "*.go").Output(); err == nil && len(st) > 0 {
		head += "-dirty"
	}
	return head
}

// header prints the conditions of the run.
func header(o options, what string) {
	load, _ := os.ReadFile("/proc/loadavg")
	loadAtStart = loadAvg1()
	fmt.Printf("cooldownd bench: %s; %d cores (GOMAXPROCS %d), load average %s\n", what, runtime.NumCPU(), runtime.GOMAXPROCS(0),
		strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Printf("phases of %v (after %v unmeasured), %d round(s)%s; cooldownd %s\n", o.phase, o.warm, o.runs,
		map[bool]string{true: ", medians over rounds", false: ""}[o.runs > 1], o.bin)
	fmt.Println("command: go run ./test/bench " + strings.Join(os.Args[1:], " "))
	fmt.Println()
}
