package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/proctest"
	"github.com/cooldownd/cooldownd/test/chaos/history"
)

// chaosPolicy is the replicas' policy (see history.Policy).
func chaosPolicy() breaker.Policy { return history.Policy() }

func policyArgs(p breaker.Policy) []string {
	return []string{"--consecutive-failures", strconv.Itoa(p.ConsecutiveFailures), "--failure-rate", "0",
		"--open-base", p.OpenBase.String(), "--open-max", p.OpenMax.String(), "--jitter", "0",
		"--rate-limit-cooldown", p.RateLimitCooldown.String(), "--overload-floor", p.OverloadFloor.String(),
		"--quota-block", p.QuotaBlock.String(), "--auth-block", p.AuthBlock.String(),
		"--lease-ttl", p.LeaseTTL.String(), "--max-probes", strconv.Itoa(p.MaxProbes)}
}

// cluster is everything a run starts.
type cluster struct {
	o        options
	ps       *proctest.Group
	redis    *redisServer   // the master (single mode: behind the proxy)
	replicas []*redisServer // sentinel mode
	sentinel *redisServer   // sentinel mode
	proxy    *proxy         // single mode
	cds      []*replica     // cooldownd
	workers  []*workerProc
	mu       sync.Mutex
	events   []string    // what happened, for the report
	failover []time.Time // when each SENTINEL FAILOVER was sent
}

type workerProc struct {
	p        *proctest.Proc
	index    int
	summary  *workerSummary
	probe    chan string // conn ids of probes it holds, first only
	mu       sync.Mutex
	degraded bool
	upAt     time.Time // last recovery
	spells   []spell   // every time it was degraded
	killed   bool
	read     chan struct{} // closed when its stdout is read to the end
}

func (c *cluster) logf(format string, args ...any) {
	line := fmt.Sprintf("%6.1fs  ", time.Since(start).Seconds()) + fmt.Sprintf(format, args...)
	fmt.Println(line)
	c.mu.Lock()
	c.events = append(c.events, line)
	c.mu.Unlock()
}

var start = time.Now()

func run(o options) int {
	dir := o.dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "cooldownd-chaos-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c := &cluster{o: o, ps: proctest.NewGroup(dir)}
	defer c.ps.KillAll()
	defer func() {
		if c.proxy != nil {
			c.proxy.close()
		}
	}()
	if err := c.up(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	return c.drive(dir)
}

// up starts Redis, the proxy and the replicas.
func (c *cluster) up() error {
	bin := filepath.Join(c.ps.Dir(), "cooldownd")
	build := exec.Command("go", "build", "-o", bin, "github.com/cooldownd/cooldownd/cmd/cooldownd")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build cooldownd: %w\n%s", err, out)
	}
	port := func() int {
		p, err := proctest.FreePort()
		if err != nil {
			panic(err)
		}
		return p
	}
	c.redis = &redisServer{ps: c.ps, name: "redis-master", port: port()}
	// With Sentinel, a master that lost its replica refuses writes after
	// 1 s (min-replicas-to-write): a demoted master does not go on
	// acknowledging writes that its resync will throw away.
	// repl-diskless-sync-delay 0: a replica repointed by a failover whose
	// partial resync is refused (it has writes the new master never got)
	// is sent its full copy at once, not after the default 5 s wait for
	// more replicas: Sentinel ends the failover, and publishes the new
	// master (+switch-master), only once that replica is in sync or after
	// its failover-timeout (5 s). See docs/reliability.md.
	minReplicas := []string{"--min-replicas-to-write", "1", "--min-replicas-max-lag", "1", "--repl-diskless-sync-delay", "0"}
	if c.o.sentinel {
		c.redis.extra = minReplicas
	}
	if err := c.redis.start(); err != nil {
		return err
	}
	var redisArgs []string
	if c.o.sentinel {
		// Two replicas: after a failover the new master keeps one (the
		// other is pointed at it at once), so it takes writes again within
		// about a second instead of waiting for the old master's resync.
		// --wait-replicas 2 (both): with 1, the demoted master's other
		// replica acknowledged writes between the promotion and Sentinel's
		// reconfiguration, which the failover then lost (docs/reliability.md).
		for i := range 2 {
			r := &redisServer{ps: c.ps, name: fmt.Sprintf("redis-replica-%d", i), port: port(),
				extra: append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(c.redis.port)}, minReplicas...)}
			if err := r.start(); err != nil {
				return err
			}
			c.replicas = append(c.replicas, r)
		}
		sp := port()
		// down-after-milliseconds 3000: at 1000 a master slowed by 2
		// cores shared with ~25 runnable processes missed Sentinel's PINGs
		// for a second and was failed over unasked (the run's own
		// failovers are SENTINEL FAILOVER, which does not wait for it).
		conf := filepath.Join(c.ps.Dir(), "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\nsentinel monitor chaos 127.0.0.1 %d 1\nsentinel down-after-milliseconds chaos 3000\nsentinel failover-timeout chaos 5000\nsentinel parallel-syncs chaos 1\n", sp, c.redis.port)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			return err
		}
		c.sentinel = &redisServer{ps: c.ps, name: "sentinel", port: sp}
		p, err := c.ps.Start("sentinel", exec.Command("redis-server", conf, "--sentinel"))
		if err != nil {
			return err
		}
		c.sentinel.p = p
		if err := proctest.WaitFor(context.Background(), p, 10*time.Second, func() bool { return proctest.Accepts(c.sentinel.addr()) }); err != nil {
			return err
		}
		// Sentinel learns the replicas from the master's INFO, every 10 s:
		// one that synced after its first look is unknown to it until the
		// next, and a failover then would leave it on the old master.
		if err := c.sentinelKnowsReplicas(20 * time.Second); err != nil {
			return err
		}
		redisArgs = []string{"--redis-mode", "sentinel", "--redis-addrs", c.sentinel.addr(), "--redis-master-name", "chaos", "--wait-replicas", "2"}
	} else {
		pr, err := startProxy(c.redis.addr())
		if err != nil {
			return err
		}
		c.proxy = pr
		redisArgs = []string{"--redis-url", "redis://" + pr.addr()}
	}
	args := append(redisArgs, policyArgs(chaosPolicy())...)
	for i := range c.o.k {
		r := &replica{ps: c.ps, name: fmt.Sprintf("cooldownd-%d", i), bin: bin, port: port(), args: args}
		if err := r.start(); err != nil {
			return err
		}
		c.cds = append(c.cds, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, r := range c.cds {
		for !r.ready(ctx) {
			if ctx.Err() != nil {
				return fmt.Errorf("%s not ready", r.name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	c.logf("up: redis %s, %d replicas, policy %v", map[bool]string{false: "single behind a fault proxy", true: "master+2 replicas+sentinel"}[c.o.sentinel], c.o.k, args)
	return nil
}

func randomIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		var b [32]byte
		_, _ = rand.Read(b[:])
		out[i] = hex.EncodeToString(b[:])
	}
	return out
}

// startWorkers starts the client processes, which run until until.
func (c *cluster) startWorkers(dir string, hot, cold []string, until time.Time) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	urls := make([]string, len(c.cds))
	for i, r := range c.cds {
		urls[i] = r.url()
	}
	for i := range c.o.p {
		cfg := workerConfig{Index: i + 1, Endpoints: strings.Join(urls, ","), Hot: hot, Cold: cold, Until: until,
			Goroutines: c.o.g, Out: filepath.Join(dir, fmt.Sprintf("history-%02d.jsonl", i+1)), Fault: c.o.fault,
			Pace: c.o.pace, LeaseTTL: chaosPolicy().LeaseTTL}
		b, _ := json.Marshal(cfg)
		cmd := exec.Command(self, "worker")
		cmd.Stdin = strings.NewReader(string(b))
		// A pipe of our own: exec's StdoutPipe is closed by Wait, which
		// could lose the summary line.
		out, pw, err := os.Pipe()
		if err != nil {
			return err
		}
		cmd.Stdout = pw
		p, err := c.ps.Start(fmt.Sprintf("worker-%02d", i+1), cmd)
		_ = pw.Close()
		if err != nil {
			_ = out.Close()
			return err
		}
		w := &workerProc{p: p, index: i + 1, probe: make(chan string, 1), read: make(chan struct{})}
		c.workers = append(c.workers, w)
		go w.follow(out)
	}
	return nil
}

// follow reads a worker's stdout: probes held, degradations, the summary.
func (w *workerProc) follow(out *os.File) {
	defer close(w.read)
	defer func() { _ = out.Close() }()
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "PROBE":
			select {
			case w.probe <- rest:
			default:
			}
		case "DEG":
			deg, at, _ := strings.Cut(rest, " ")
			ms, _ := strconv.ParseInt(at, 10, 64)
			w.mu.Lock()
			w.degraded = deg == "1"
			if !w.degraded {
				w.upAt = time.UnixMilli(ms)
				if n := len(w.spells); n > 0 && w.spells[n-1].up.IsZero() {
					w.spells[n-1].up = w.upAt
				}
			} else {
				w.spells = append(w.spells, spell{down: time.UnixMilli(ms)})
			}
			w.mu.Unlock()
		case "SUMMARY":
			var s workerSummary
			if json.Unmarshal([]byte(rest), &s) == nil {
				w.mu.Lock()
				w.summary = &s
				w.mu.Unlock()
			}
		}
	}
}

func (w *workerProc) state() (degraded bool, upAt time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.degraded, w.upAt
}

// sleepUntil sleeps until t.
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// baseline reads the replicas' goroutines and RSS.
func (c *cluster) baseline() (gor, rss []float64) {
	for _, r := range c.cds {
		g, _ := r.metric("go_goroutines")
		m, _ := r.metric("process_resident_memory_bytes")
		gor, rss = append(gor, g), append(rss, m)
	}
	return gor, rss
}

// recovered measures, after a fault ends at t, when every replica is ready
// again and when every client process that had degraded is back.
func (c *cluster) recovered(what string, t time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var ready time.Duration = -1
	for ctx.Err() == nil {
		all := true
		for _, r := range c.cds {
			if r.p == nil || !r.ready(ctx) {
				all = false
				break
			}
		}
		if all {
			ready = time.Since(t)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var back time.Duration
	for ctx.Err() == nil {
		any := false
		for _, w := range c.workers {
			if w.killed {
				continue
			}
			if d, up := w.state(); d {
				any = true
			} else if up.After(t) {
				back = max(back, up.Sub(t))
			}
		}
		if !any {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	gor, rss := c.baseline()
	c.logf("  %s: replicas ready %v after, clients back on the service %v after the fault ended; replica goroutines %v, RSS MB %v",
		what, ready.Round(time.Millisecond), back.Round(time.Millisecond), gor, mb(rss))
}

// fault is one scheduled fault.
type fault struct {
	name string
	on   func()
	off  func()
	hold time.Duration
}

func (c *cluster) faults() []fault {
	restartRedis := func() {
		if err := c.redis.start(); err != nil {
			c.logf("  redis restart failed: %v", err)
		}
	}
	cd := func(i int) *replica { return c.cds[i%len(c.cds)] }
	fs := []fault{}
	if !c.o.sentinel {
		fs = append(fs,
			fault{name: "proxy: 300 ms latency each way", hold: 3 * time.Second,
				on: func() { c.proxy.set(proxyLatency) }, off: func() { c.proxy.set(proxyPass) }},
			fault{name: "redis SIGKILL and restart (script cache lost)", hold: 2 * time.Second,
				on: func() { c.redis.p.Kill() }, off: restartRedis},
			fault{name: "proxy: connections reset", hold: 2 * time.Second,
				on: func() { c.proxy.set(proxyReset) }, off: func() { c.proxy.set(proxyPass) }},
			fault{name: "proxy: blackhole", hold: 2 * time.Second,
				on: func() { c.proxy.set(proxyBlackhole) }, off: func() { c.proxy.set(proxyPass) }},
		)
	} else {
		fs = append(fs, fault{name: "sentinel failover", hold: 3 * time.Second, on: func() {
			// A failover of a master with two replicas, both known to
			// Sentinel and in sync (the old master rejoins as a replica
			// about 10 s after a failover).
			if err := c.sentinelKnowsReplicas(20 * time.Second); err != nil {
				c.logf("  %v", err)
			}
			c.mu.Lock()
			c.failover = append(c.failover, time.Now())
			c.mu.Unlock()
			out, err := exec.Command("redis-cli", "-p", strconv.Itoa(c.sentinel.port), "SENTINEL", "FAILOVER", "chaos").CombinedOutput()
			c.logf("  SENTINEL FAILOVER: %s %v", strings.TrimSpace(string(out)), err)
		}, off: func() {}})
	}
	fs = append(fs,
		fault{name: "replica SIGKILL and restart", hold: 2 * time.Second,
			on: func() { cd(0).p.Kill() }, off: func() {
				if err := cd(0).start(); err != nil {
					c.logf("  replica restart failed: %v", err)
				}
			}},
		fault{name: "replica SIGSTOP, then SIGCONT", hold: 3 * time.Second,
			on: func() { cd(1).p.Signal(syscall.SIGSTOP) }, off: func() { cd(1).p.Signal(syscall.SIGCONT) }},
		fault{name: "client process SIGKILLed while holding a probe lease", hold: 0, on: c.killProbeHolder, off: func() {}},
	)
	if c.o.sentinel {
		fs = append(fs, fault{name: "second sentinel failover", hold: 3 * time.Second, on: fs[0].on, off: func() {}})
	}
	return fs
}

// sentinelKnowsReplicas waits until Sentinel lists both replicas as
// healthy replicas with their link to the master up.
func (c *cluster) sentinelKnowsReplicas(bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		out, err := exec.Command("redis-cli", "-p", strconv.Itoa(c.sentinel.port), "SENTINEL", "REPLICAS", "chaos").Output()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		healthy, linked := 0, 0
		for i := 0; i+1 < len(lines); i++ {
			switch k, v := strings.TrimSpace(lines[i]), strings.TrimSpace(lines[i+1]); {
			case k == "flags" && v == "slave":
				healthy++
			case k == "master-link-status" && v == "ok":
				linked++
			}
		}
		if err == nil && healthy >= 2 && linked >= 2 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sentinel lists %d healthy replicas (%d linked) after %v, want 2: %v", healthy, linked, bound, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killProbeHolder SIGKILLs the first worker that says it holds a probe.
func (c *cluster) killProbeHolder() {
	for _, w := range c.workers {
		select {
		case <-w.probe:
		default:
		}
	}
	deadline := time.After(5 * time.Second)
	for {
		for _, w := range c.workers[1:] { // worker 1 stays, so some traffic always runs
			select {
			case conn := <-w.probe:
				w.killed = true
				w.p.Kill()
				c.logf("  killed worker-%02d holding a probe lease of …%s", w.index, conn[:8])
				return
			default:
			}
		}
		select {
		case <-deadline:
			c.logf("  no probe held within 5 s; nothing killed")
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}
