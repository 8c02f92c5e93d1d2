// Package harness runs the outage-storm scenarios with real processes on
// loopback — one redis-server, K cooldownd replicas, a fake provider and P
// client processes — and checks the coordination properties from the
// provider's own log of arrivals.
//
// The provider and the client processes are the storm binary re-executed
// in its "provider" and "worker" modes ([ProviderMain], [WorkerMain]).
package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/client"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/proctest"
	"github.com/cooldownd/cooldownd/test/storm/fakeprovider"
	"github.com/cooldownd/cooldownd/test/storm/worker"
)

// Options configure a [Harness].
type Options struct {
	// StormBin is the storm binary, run in its provider and worker modes.
	StormBin string
	// CooldowndBin is a cooldownd binary (see [Build]).
	CooldowndBin string
	// RedisAddr is a running Redis to share; empty starts redis-server
	// from PATH on a free loopback port.
	RedisAddr string
	// K replicas, P client processes of G goroutines each.
	K, P, G int
	Policy  breaker.Policy
	Timing  Timing
	// Dir receives the children's logs; it must exist.
	Dir string
	// Logf reports progress; nil is silent.
	Logf func(format string, args ...any)
	// NoCooldownd starts neither Redis nor the replicas: only the
	// strategies without cooldownd can run.
	NoCooldownd bool
}

// Harness holds the long-lived processes (Redis and the replicas); each
// [Harness.Run] starts its own provider and workers.
type Harness struct {
	opts     Options
	dir      string
	replicas []string // base URLs
	seq      atomic.Int64

	// The running replicas, the flags they run with, and how many sets
	// of replicas were started (a scenario with its own policy restarts
	// them).
	replicaProcs []*proctest.Proc
	flags        []string
	generation   int

	procs *proctest.Group // every child still running
}

// Build compiles the Go package pkg (an import path) into dir and returns
// the binary's path.
func Build(ctx context.Context, dir, pkg string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// Start starts Redis (unless given) and the K replicas.
func Start(ctx context.Context, o Options) (*Harness, error) {
	switch {
	case o.K < 1 || o.P < 1 || o.G < 1:
		return nil, errors.New("harness: K, P and G must be positive")
	case o.StormBin == "" || o.Dir == "" || (o.CooldowndBin == "" && !o.NoCooldownd):
		return nil, errors.New("harness: StormBin, CooldowndBin and Dir are required")
	}
	if err := o.Policy.Validate(); err != nil {
		return nil, err
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	h := &Harness{opts: o, dir: o.Dir, procs: proctest.NewGroup(o.Dir)}
	ok := false
	defer func() {
		if !ok {
			h.Close()
		}
	}()
	if o.NoCooldownd {
		ok = true
		return h, nil
	}
	if h.opts.RedisAddr == "" {
		addr, err := h.startRedis(ctx)
		if err != nil {
			return nil, err
		}
		h.opts.RedisAddr = addr
	}
	if err := h.ensureReplicas(ctx, o.Policy); err != nil {
		return nil, err
	}
	o.Logf("redis %s, %d cooldownd replicas %v", h.opts.RedisAddr, o.K, h.replicas)
	ok = true
	return h, nil
}

// ensureReplicas makes the K replicas run with policy p: it keeps them if
// they already do, else it stops them and starts K new ones on the same
// Redis.
func (h *Harness) ensureReplicas(ctx context.Context, p breaker.Policy) error {
	flags := ServerFlags(p)
	if len(h.replicas) == h.opts.K && slices.Equal(flags, h.flags) {
		return nil
	}
	for _, rp := range h.replicaProcs {
		rp.Kill()
	}
	h.procs.Forget(h.replicaProcs...)
	h.replicas, h.replicaProcs, h.flags = nil, nil, flags
	h.generation++
	for i := range h.opts.K {
		u, rp, err := h.startReplica(ctx, i, flags)
		if err != nil {
			return err
		}
		h.replicas = append(h.replicas, u)
		h.replicaProcs = append(h.replicaProcs, rp)
	}
	return nil
}

// ErrNoRedis is returned by [Start] when it must start redis-server and
// none is on PATH.
var ErrNoRedis = proctest.ErrNoRedis

func (h *Harness) startRedis(ctx context.Context) (string, error) {
	dir := filepath.Join(h.dir, "redis")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	addr, _, err := h.procs.StartRedis(ctx, "redis", dir)
	return addr, err
}

func (h *Harness) startReplica(ctx context.Context, i int, flags []string) (string, *proctest.Proc, error) {
	var last error
	name := fmt.Sprintf("cooldownd-%d", i)
	if h.generation > 1 {
		name = fmt.Sprintf("cooldownd-%d-%d", h.generation, i)
	}
	for range 3 {
		port, err := proctest.FreePort()
		if err != nil {
			return "", nil, err
		}
		base := "http://127.0.0.1:" + strconv.Itoa(port)
		args := append([]string{"--addr", "127.0.0.1:" + strconv.Itoa(port), "--redis-url", "redis://" + h.opts.RedisAddr,
			"--log-level", "warn"}, flags...)
		p, err := h.spawn(name, h.opts.CooldowndBin, false, args...)
		if err != nil {
			return "", nil, err
		}
		last = proctest.WaitFor(ctx, p, 10*time.Second, func() bool { return proctest.Healthy(ctx, base+"/healthz") })
		if last == nil {
			return base, p, nil
		}
		p.Kill()
	}
	return "", nil, last
}

// Replicas returns the replicas' base URLs.
func (h *Harness) Replicas() []string { return append([]string(nil), h.replicas...) }

// Close kills every process the harness started that still runs.
func (h *Harness) Close() { h.procs.KillAll() }

// Kill is the process the harness killed in a probe-killed scenario.
type Kill struct {
	Worker int       `json:"worker"`
	Seq    int       `json:"seq"` // the arrival it held
	At     time.Time `json:"at"`
}

// Interval is a stretch of time.
type Interval struct{ From, To time.Time }

// Result is everything one run produced.
type Result struct {
	Scenario Scenario
	Strategy worker.Strategy
	Options  Options
	T0       time.Time
	Arrivals []fakeprovider.Arrival
	// Workers holds each worker's result, nil for the killed one (and
	// for one that failed, see Errors).
	Workers []*worker.Result
	Kill    *Kill
	// Open holds, per key, the intervals during which every replica said
	// the connection was open (Cooldownd only): from the open's start to
	// its end as the replicas reported them.
	Open map[string][]Interval
	// Polls counts the poll rounds in which every replica answered.
	Polls int
	// Seen is, per key, what the polls saw of the replicas' state beyond
	// the open intervals (Cooldownd only).
	Seen map[string]*Seen
	// Final is, per key, the connection as replica 0 published it once
	// the workers were done (Cooldownd only; nil when it did not answer).
	Final  map[string]*Final
	Errors []string
}

// Seen is what the polls saw of one connection's state.
type Seen struct {
	// NotClosed counts the poll rounds in which some replica said the
	// connection was not closed (open or half-open).
	NotClosed int `json:"not_closed"`
	// Shadow counts the rounds in which some replica marked it shadow.
	Shadow int `json:"shadow"`
	// MaxReporters is the most distinct failure reporters any replica
	// counted (FleetCounts.failure_reporters).
	MaxReporters int `json:"max_reporters"`
	// MaxThrottle is the highest throttle probability any replica gave.
	MaxThrottle float64 `json:"max_throttle"`
}

// Final is one connection as cooldownd published it at the end of a run.
type Final struct {
	State  string // STATE_CLOSED, …
	Shadow bool
	// Transitions counts the transitions in the published history (the
	// newest, up to the replicas' --history); ShadowTransitions those
	// marked shadow, Opens those to open.
	Transitions, ShadowTransitions, Opens int
	// Fleet holds the fleet counts at the end.
	FirstAttempts, Retries, Requests, Accepts float64
	// Policy is the fleet rules' part of the policy cooldownd applied.
	RetryBudget, ThrottleK float64
	TripQuorum             int
	PolicyShadow           bool
}

// providerConfig is what a provider process reads first on stdin.
type providerConfig struct {
	Script fakeprovider.Script `json:"script"`
}

// start is what every child reads second: when the run starts.
type start struct {
	T0 int64 `json:"t0"`
}

// Run runs one scenario with one strategy: it starts the provider and the
// P workers, lets them run for the scenario's duration and collects the
// provider's log and the workers' results. Every process it started is
// gone when it returns.
func (h *Harness) Run(ctx context.Context, sc Scenario, st worker.Strategy) (*Result, error) {
	o := h.opts
	if st == worker.Cooldownd && len(h.replicas) == 0 {
		return nil, errors.New("harness: started without cooldownd")
	}
	o.Policy = sc.PolicyFor(o.Policy)
	if err := o.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	local, err := LocalPolicy(o.Policy)
	if err != nil {
		return nil, err
	}
	if st == worker.Cooldownd {
		if err := h.ensureReplicas(ctx, o.Policy); err != nil {
			return nil, err
		}
	}
	runID := fmt.Sprintf("%s-%s-%d-%d", sc.Name, st, h.seq.Add(1), time.Now().UnixNano())
	res := &Result{Scenario: sc, Strategy: st, Options: o, Workers: make([]*worker.Result, o.P)}
	tag := sc.Name + "-" + string(st)

	prov, err := h.spawn(tag+"-provider", o.StormBin, true, "provider")
	if err != nil {
		return nil, err
	}
	var workers []*proctest.Proc
	defer func() {
		prov.Kill()
		for _, w := range workers {
			w.Kill()
		}
		h.procs.Forget(append(workers, prov)...)
	}()
	if err := json.NewEncoder(prov.Stdin).Encode(providerConfig{Script: sc.Script}); err != nil {
		return nil, err
	}
	line, err := prov.ReadLine(10 * time.Second)
	if err != nil {
		return nil, err
	}
	provAddr, ok := strings.CutPrefix(line, "addr ")
	if !ok {
		return nil, fmt.Errorf("provider said %q", line)
	}
	provURL := "http://" + provAddr

	for i := range o.P {
		p, err := h.spawn(fmt.Sprintf("%s-worker-%d", tag, i), o.StormBin, true, "worker")
		if err != nil {
			return nil, err
		}
		workers = append(workers, p)
		t := o.Timing
		replica := ""
		if st == worker.Cooldownd {
			replica = h.replicas[i%len(h.replicas)] // each process its replica, in turn
		}
		cfg := worker.Config{
			ID: i, Strategy: st, Cooldownd: replica, Provider: provURL, RunID: runID,
			Goroutines: o.G, Fallback: sc.Fallback, Policy: local, MaxRetries: t.MaxRetries,
			BackoffBase: t.BackoffBase, BackoffCap: t.BackoffCap, AdmitTimeout: t.AdmitTimeout,
			AttemptTimeout: t.AttemptTimeout, Deadline: t.Deadline, Think: t.Think, Duration: sc.Duration,
			Seed: uint64(h.seq.Load()),
		}
		if err := json.NewEncoder(p.Stdin).Encode(cfg); err != nil {
			return nil, err
		}
	}
	for _, p := range workers {
		if line, err := p.ReadLine(20 * time.Second); err != nil {
			return nil, err
		} else if line != "ready" {
			return nil, fmt.Errorf("%s said %q", p.Name, line)
		}
	}
	res.T0 = time.Now().Add(150 * time.Millisecond)
	for _, p := range append([]*proctest.Proc{prov}, workers...) {
		if err := json.NewEncoder(p.Stdin).Encode(start{T0: res.T0.UnixNano()}); err != nil {
			return nil, err
		}
	}
	end := res.T0.Add(sc.Duration)
	bg, stop := context.WithDeadline(ctx, end)
	defer stop()
	var (
		bgWG    sync.WaitGroup
		killed  atomic.Pointer[Kill]
		pollErr error
	)
	if st == worker.Cooldownd {
		bgWG.Go(func() { res.Open, res.Seen, res.Polls, pollErr = h.poll(bg, runID) })
	}
	if sc.Kill {
		bgWG.Go(func() { h.killer(bg, res.T0.Add(sc.KillFrom), provURL, workers, st, killed.Store) })
	}

	for i, p := range workers {
		b, err := p.ReadRest(time.Until(end) + o.Timing.Deadline + 15*time.Second)
		if k := killed.Load(); k != nil && k.Worker == i {
			continue
		}
		var wr worker.Result
		if err == nil {
			err = json.Unmarshal(b, &wr)
		}
		if err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", p.Name, err))
			continue
		}
		res.Workers[i] = &wr
	}
	stop()
	bgWG.Wait()
	res.Kill = killed.Load()
	if pollErr != nil {
		res.Errors = append(res.Errors, "poll: "+pollErr.Error())
	}
	if st == worker.Cooldownd {
		res.Final = h.final(ctx, runID)
	}

	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(provURL + "/log")
	if err != nil {
		return nil, fmt.Errorf("provider log: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if err := json.NewDecoder(resp.Body).Decode(&res.Arrivals); err != nil {
		return nil, fmt.Errorf("provider log: %w", err)
	}
	return res, nil
}

// runConns returns the run's two connections by key.
func runConns(runID string) (map[string]client.Conn, error) {
	cl, err := client.New(worker.Unreachable)
	if err != nil {
		return nil, err
	}
	primary, fallback, err := worker.Conns(cl, runID)
	if err != nil {
		return nil, err
	}
	return map[string]client.Conn{worker.KeyPrimary: primary, worker.KeyFallback: fallback}, nil
}

// maxHistory is the most transitions GetConnection returns.
const maxHistory = 50

// final reads the run's connections from replica 0 once the run is over.
func (h *Harness) final(ctx context.Context, runID string) map[string]*Final {
	keys, err := runConns(runID)
	if err != nil {
		return nil
	}
	api := cooldownv1connect.NewCooldownServiceClient(&http.Client{Timeout: 5 * time.Second}, h.replicas[0])
	out := make(map[string]*Final)
	for key, conn := range keys {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := api.GetConnection(rctx, connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: conn.ID().Bytes(), HistoryLimit: maxHistory}))
		cancel()
		if err != nil {
			continue
		}
		s, p, fc := r.Msg.GetConnection(), r.Msg.GetPolicy(), r.Msg.GetConnection().GetFleet()
		f := &Final{State: s.GetState().String(), Shadow: s.GetShadow(), Transitions: len(r.Msg.GetHistory()),
			FirstAttempts: fc.GetFirstAttempts(), Retries: fc.GetRetries(), Requests: fc.GetRequests(), Accepts: fc.GetAccepts(),
			RetryBudget: p.GetRetryBudget(), ThrottleK: p.GetThrottleK(), TripQuorum: int(p.GetTripQuorum()), PolicyShadow: p.GetShadow()}
		for _, tr := range r.Msg.GetHistory() {
			if tr.GetShadow() {
				f.ShadowTransitions++
			}
			if tr.GetTo() == cooldownv1.State_STATE_OPEN {
				f.Opens++
			}
		}
		out[key] = f
	}
	return out
}

// poll reads the primary's and fallback's state from every replica until
// ctx ends. It returns, per key, the intervals in which all of them said
// open and what else it saw, and how many rounds every replica answered.
func (h *Harness) poll(ctx context.Context, runID string) (map[string][]Interval, map[string]*Seen, int, error) {
	keys, err := runConns(runID)
	if err != nil {
		return nil, nil, 0, err
	}
	hc := &http.Client{Timeout: time.Second}
	apis := make([]cooldownv1connect.CooldownServiceClient, len(h.replicas))
	for i, u := range h.replicas {
		apis[i] = cooldownv1connect.NewCooldownServiceClient(hc, u)
	}
	open := make(map[string][]Interval)
	seen := map[string]*Seen{worker.KeyPrimary: {}, worker.KeyFallback: {}}
	polls := 0
	t := time.NewTicker(h.opts.Timing.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return open, seen, polls, nil
		case <-t.C:
		}
		all := true
		for key, conn := range keys {
			var iv Interval
			opened, notClosed, shadow := true, false, false
			for i, api := range apis {
				rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				r, err := api.GetConnection(rctx, connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: conn.ID().Bytes()}))
				cancel()
				if err != nil {
					all, opened = false, false // not seen yet, or the run is ending
					break
				}
				s := r.Msg.GetConnection()
				sn := seen[key]
				notClosed = notClosed || s.GetState() != cooldownv1.State_STATE_CLOSED
				shadow = shadow || s.GetShadow()
				sn.MaxReporters = max(sn.MaxReporters, int(s.GetFleet().GetFailureReporters()))
				sn.MaxThrottle = max(sn.MaxThrottle, s.GetFleet().GetThrottleProbability())
				if s.GetState() != cooldownv1.State_STATE_OPEN || s.GetOpenUntil() == nil || s.GetChangedAt() == nil {
					opened = false
					continue
				}
				from, to := s.GetChangedAt().AsTime(), s.GetOpenUntil().AsTime()
				if i == 0 || from.After(iv.From) {
					iv.From = from
				}
				if i == 0 || to.Before(iv.To) {
					iv.To = to
				}
			}
			if opened && iv.To.After(iv.From) {
				open[key] = append(open[key], iv)
			}
			if notClosed {
				seen[key].NotClosed++
			}
			if shadow {
				seen[key].Shadow++
			}
		}
		if all {
			polls++
		}
	}
}

// killer SIGKILLs the first worker seen holding a probe on the primary
// (any request when the strategy has no probes) that arrived at or after
// from. It calls record with what it kills just before killing it.
func (h *Harness) killer(ctx context.Context, from time.Time, provURL string, workers []*proctest.Proc, st worker.Strategy, record func(*Kill)) {
	if err := sleepCtx(ctx, time.Until(from)); err != nil {
		return
	}
	hc := &http.Client{Timeout: time.Second}
	for ctx.Err() == nil {
		var live []fakeprovider.Arrival
		if resp, err := hc.Get(provURL + "/inflight"); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&live)
			_ = resp.Body.Close()
		}
		for _, a := range live {
			if a.Key != worker.KeyPrimary || (st != worker.NoCoordination && !a.Probe) || a.Worker < 0 || a.Worker >= len(workers) {
				continue
			}
			if time.Unix(0, a.At).Before(from) {
				continue
			}
			record(&Kill{Worker: a.Worker, Seq: a.Seq, At: time.Now()})
			workers[a.Worker].Kill()
			h.opts.Logf("killed worker %d holding request %d (probe=%v)", a.Worker, a.Seq, a.Probe)
			return
		}
		_ = sleepCtx(ctx, 5*time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ProviderMain is the storm binary's provider mode: it reads a
// providerConfig and then the start from stdin, prints "addr <host:port>"
// and serves until stdin closes or it is killed.
func ProviderMain(stdin io.Reader, stdout io.Writer) error {
	dec := json.NewDecoder(bufio.NewReader(stdin))
	var cfg providerConfig
	if err := dec.Decode(&cfg); err != nil {
		return fmt.Errorf("provider config: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(stdout, "addr %s\n", l.Addr()); err != nil {
		return err
	}
	var s start
	if err := dec.Decode(&s); err != nil {
		return fmt.Errorf("provider start: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, stdin) // until the harness closes it or dies
		cancel()
	}()
	return fakeprovider.Serve(ctx, l, fakeprovider.New(cfg.Script, time.Unix(0, s.T0)))
}

// WorkerMain is the storm binary's worker mode: it reads a worker.Config
// and then the start from stdin, prints "ready", runs, and prints its
// worker.Result as JSON.
func WorkerMain(stdin io.Reader, stdout, stderr io.Writer) error {
	dec := json.NewDecoder(bufio.NewReader(stdin))
	var cfg worker.Config
	if err := dec.Decode(&cfg); err != nil {
		return fmt.Errorf("worker config: %w", err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w, err := worker.New(cfg)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(stdout, "ready"); err != nil {
		return err
	}
	var s start
	if err := dec.Decode(&s); err != nil {
		return fmt.Errorf("worker start: %w", err)
	}
	t0 := time.Unix(0, s.T0)
	// However the run goes, the process ends: a bound on everything.
	limit := time.AfterFunc(time.Until(t0)+cfg.Duration+cfg.Deadline+30*time.Second, func() {
		fmt.Fprintln(stderr, "worker: run did not end in time; exiting")
		os.Exit(3)
	})
	defer limit.Stop()
	r := w.Run(context.Background(), t0)
	return json.NewEncoder(stdout).Encode(r)
}
