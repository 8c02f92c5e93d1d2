// Command storm runs cooldownd's outage-storm benchmark: the scenarios of
// package harness with three strategies — (a) no coordination, (b)
// process-local coordination, (c) cooldownd — and prints a table per
// scenario (docs/storm.md).
//
//	go run ./test/storm                      # everything, about 2.5 minutes
//	go run ./test/storm -run hard -p 16      # one scenario, more processes
//
// The same binary is re-executed as the fake provider ("storm provider")
// and as each client process ("storm worker"); those modes read their
// configuration on stdin and are not meant to be run by hand.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/cooldownd/cooldownd/test/storm/harness"
	"github.com/cooldownd/cooldownd/test/storm/worker"
)

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "provider":
		err = harness.ProviderMain(os.Stdin, os.Stdout)
	case len(os.Args) > 1 && os.Args[1] == "worker":
		err = harness.WorkerMain(os.Stdin, os.Stdout, os.Stderr)
	default:
		err = bench(os.Args[1:], os.Stdout, os.Stderr)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "storm:", err)
		os.Exit(1)
	}
}

func bench(args []string, stdout, stderr io.Writer) error {
	t := harness.DefaultTiming()
	p := harness.DefaultPolicy()
	fs := flag.NewFlagSet("storm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	k := fs.Int("k", 3, "cooldownd replicas")
	procs := fs.Int("p", 8, "client processes")
	g := fs.Int("g", 4, "goroutines per client process")
	run := fs.String("run", "", "only the scenarios whose name matches this regexp")
	strategies := fs.String("strategies", "none,local,cooldownd", "strategies to run, in order: none (a), local (b), cooldownd (c)")
	keep := fs.String("dir", "", "keep the processes' logs in this directory (default: a temporary one, removed)")
	redis := fs.String("redis", "", "use this Redis (host:port) instead of starting redis-server")
	fs.DurationVar(&t.Warmup, "warmup", t.Warmup, "healthy traffic before each outage")
	fs.DurationVar(&t.Outage, "outage", t.Outage, "length of each outage")
	fs.DurationVar(&t.After, "after", t.After, "healthy traffic after each heal")
	fs.DurationVar(&t.Flap, "flap", t.Flap, "half period of the flapping provider")
	fs.DurationVar(&t.RetryAfter, "retry-after", t.RetryAfter, "Retry-After of the rate-limit storm")
	fs.DurationVar(&t.Think, "think", t.Think, "mean pause between a goroutine's calls")
	fs.DurationVar(&t.AttemptTimeout, "attempt-timeout", t.AttemptTimeout, "bound of one provider request")
	fs.DurationVar(&t.Deadline, "deadline", t.Deadline, "bound of one user call")
	fs.DurationVar(&p.OpenMax, "open-max", p.OpenMax, "cooldownd --open-max (and the local breaker's)")
	fs.DurationVar(&p.LeaseTTL, "lease-ttl", p.LeaseTTL, "cooldownd --lease-ttl (must exceed -attempt-timeout)")
	fs.IntVar(&p.MaxProbes, "max-probes", p.MaxProbes, "cooldownd --max-probes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	re, err := regexp.Compile(*run)
	if err != nil {
		return fmt.Errorf("-run: %w", err)
	}
	var sts []worker.Strategy
	for s := range strings.SplitSeq(*strategies, ",") {
		switch st := worker.Strategy(strings.TrimSpace(s)); st {
		case worker.NoCoordination, worker.Local, worker.Cooldownd:
			sts = append(sts, st)
		default:
			return fmt.Errorf("-strategies: unknown strategy %q", s)
		}
	}
	if p.LeaseTTL <= t.AttemptTimeout {
		return errors.New("-lease-ttl must exceed -attempt-timeout, or a slow probe outlives its lease")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir := *keep
	if dir == "" {
		if dir, err = os.MkdirTemp("", "storm-"); err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(dir) }()
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	began := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(stderr, "storm: %s "+format+"\n", append([]any{time.Since(began).Round(100 * time.Millisecond)}, args...)...)
	}
	opts := harness.Options{StormBin: self, RedisAddr: *redis, K: *k, P: *procs, G: *g,
		Policy: p, Timing: t, Dir: dir, Logf: logf, NoCooldownd: true}
	for _, s := range sts {
		opts.NoCooldownd = opts.NoCooldownd && s != worker.Cooldownd
	}
	if !opts.NoCooldownd {
		logf("building cooldownd")
		if opts.CooldowndBin, err = harness.Build(ctx, dir, "github.com/cooldownd/cooldownd/cmd/cooldownd"); err != nil {
			return err
		}
	}
	h, err := harness.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer h.Close()
	go func() { // Ctrl-C: kill every child at once
		<-ctx.Done()
		h.Close()
	}()

	fmt.Fprintf(stdout, "# cooldownd outage storm\n\n")
	fmt.Fprintf(stdout, "%s, %s/%s, %d CPUs%s. K=%d cooldownd replicas on one redis-server, P=%d client processes × G=%d goroutines, one fake provider; all on loopback.\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel(), *k, *procs, *g)
	fmt.Fprintf(stdout, "Policy: trip after %d consecutive failures, open %s doubling to %s (±%g jitter), %d probe(s), lease %s. "+
		"Calls: every %s ± 50 %% per goroutine, request timeout %s, deadline %s, %d retries, backoff %s–%s.\n",
		p.ConsecutiveFailures, p.OpenBase, p.OpenMax, p.Jitter, p.MaxProbes, p.LeaseTTL,
		t.Think, t.AttemptTimeout, t.Deadline, t.MaxRetries, t.BackoffBase, t.BackoffCap)
	for _, sc := range harness.Scenarios(t) {
		if !re.MatchString(sc.Name) {
			continue
		}
		var rs []*harness.Result
		for _, st := range sts {
			if !sc.Runs(st) {
				continue
			}
			logf("%s: %s", sc.Name, harness.Title(st))
			r, err := h.Run(ctx, sc, st)
			if err != nil {
				return fmt.Errorf("%s %s: %w", sc.Name, st, err)
			}
			for _, v := range harness.Check(r) {
				logf("  %s", v)
			}
			rs = append(rs, r)
		}
		if len(rs) > 0 {
			harness.Table(stdout, sc, opts, rs)
		}
	}
	fmt.Fprintf(stdout, "\nTotal %s.\n", time.Since(began).Round(time.Second))
	return nil
}

// cpuModel returns ", <model name>" from /proc/cpuinfo, or "".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return ", " + strings.TrimSpace(v)
		}
	}
	return ""
}
