package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/store"
)

// The RPC path benchmark (BenchmarkRPCPath) measures the CPU the *server*
// spends per Admit and per Report, so the server runs in a child process
// of the test binary (TestRPCPathServer below, started with rpcPathEnv
// set) and the load generator in the parent: the child's getrusage and
// allocation counters, read before and after a round over a side
// listener, are the server's alone. The Redis is a real redis-server, a
// third process, so its script time is not counted either; what remains of
// Redis in the server is go-redis's side of the round trip, which the
// "floor+redis" handler (one EVALSHA of a script that returns a constant)
// pays too.
const rpcPathEnv = "COOLDOWND_RPCPATH_REDIS"

// rpcPathTargets are the servers the child serves, each on a listener of
// its own behind server.NewHTTPServer (cmd/cooldownd's settings):
//   - floor: cooldownd's contract, a handler that answers a fixed healthy
//     Admit or Report without looking at the request (no interceptors,
//     cooldownd's compression threshold);
//   - floor+redis: the same, after one EVALSHA round trip to the Redis;
//   - cooldownd: server.New(...).Handler() over a store on the Redis, as
//     cmd/cooldownd builds it with auth off, metrics on, the log at info
//     level (to io.Discard) and tracing off.
var rpcPathTargets = []string{"floor", "floor+redis", "cooldownd"}

// TestRPCPathServer is the child process of BenchmarkRPCPath: it skips
// unless rpcPathEnv names a Redis, then prints its listeners' addresses
// as one line of JSON and serves until its stdin closes.
func TestRPCPathServer(t *testing.T) {
	addr := os.Getenv(rpcPathEnv)
	if addr == "" {
		t.Skip("the child process of BenchmarkRPCPath")
	}
	ctx := context.Background()
	// As cmd/cooldownd builds its client: a call's deadline reaches the
	// socket.
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	st, err := store.New(rdb, store.Options{})
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := server.New(server.Options{Store: st, Logger: log, Version: "bench", Revision: "bench"})
	require.NoError(t, err)
	rdb.AddHook(observeHook{srv})
	t.Cleanup(srv.Close)

	// cooldownd coalescing (decision 0054), for BenchmarkReportBatchPath:
	// the successes of a ReportBatch are held, as on the replicas a mirror's
	// flush is meant for. Its interval outlasts the benchmark, so that what
	// a round measures is the holding, which grows with reports; the flush,
	// one batch per connection and interval, is docs/scaling.md's to count.
	coal, err := server.New(server.Options{Store: st, Logger: log, Version: "bench", Revision: "bench"})
	require.NoError(t, err)
	coal.StartCoalescing(time.Hour)
	t.Cleanup(coal.Close)

	handlers := map[string]http.Handler{
		"floor":       floorHandler(nil),
		"floor+redis": floorHandler(rdb),
		"cooldownd":   srv.Handler(),
		"coalescing":  coal.Handler(),
	}
	addrs := map[string]string{}
	var servers []*http.Server
	for _, name := range append(rpcPathTargets, "coalescing") {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		hs := server.NewHTTPServer(handlers[name], server.HTTPOptions{ReadHeaderTimeout: 5 * time.Second})
		servers = append(servers, hs)
		go func() { _ = hs.Serve(ln) }()
		addrs[name] = ln.Addr().String()
	}
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	smux := http.NewServeMux()
	smux.HandleFunc("/", serveUsage)
	// go tool pprof http://<stats>/debug/pprof/profile?seconds=20 while a
	// round runs profiles the server alone.
	smux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	smux.HandleFunc("/debug/pprof/heap", pprof.Index)
	go func() { _ = http.Serve(sln, smux) }()
	addrs["stats"] = sln.Addr().String()
	line, err := json.Marshal(addrs)
	require.NoError(t, err)
	fmt.Println(string(line))
	fmt.Fprintln(os.Stderr, "rpcpath server:", string(line))
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, hs := range servers {
		_ = hs.Shutdown(ctx)
	}
}

// observeHook feeds the Redis latency histogram, as cmd/cooldownd's
// latencyHook does.
type observeHook struct{ s *server.Server }

func (observeHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h observeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		h.s.ObserveRedis(cmd.Name(), time.Since(start))
		return err
	}
}
func (h observeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// usage is what the child has spent so far.
type usage struct {
	CPU    time.Duration // user + system, getrusage(RUSAGE_SELF)
	Allocs uint64        // heap objects allocated (runtime.MemStats.Mallocs)
	Bytes  uint64        // heap bytes allocated (TotalAlloc)
}

func serveUsage(w http.ResponseWriter, _ *http.Request) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	_ = json.NewEncoder(w).Encode(usage{
		CPU:    time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		Allocs: ms.Mallocs, Bytes: ms.TotalAlloc,
	})
}

// floor answers cooldownd's contract with a fixed healthy answer, after
// one EVALSHA round trip when rdb is set.
type floor struct {
	cooldownv1connect.UnimplementedCooldownServiceHandler
	rdb    *redis.Client
	script *redis.Script
}

func floorHandler(rdb *redis.Client) http.Handler {
	mux := http.NewServeMux()
	// cooldownd's compression threshold (docs/decisions/0019): connect-go
	// would otherwise gzip every answer the client accepts gzip for.
	mux.Handle(cooldownv1connect.NewCooldownServiceHandler(floor{rdb: rdb, script: redis.NewScript("return 1")},
		connect.WithCompressMinBytes(server.CompressMinBytes)))
	return mux
}

func (f floor) redis(ctx context.Context) error {
	if f.rdb == nil {
		return nil
	}
	return f.script.Run(ctx, f.rdb, []string{"cd:{bench}:state"}, "0").Err()
}

func (f floor) Admit(ctx context.Context, _ *connect.Request[cooldownv1.AdmitRequest]) (*connect.Response[cooldownv1.AdmitResponse], error) {
	if err := f.redis(ctx); err != nil {
		return nil, err
	}
	return connect.NewResponse(&cooldownv1.AdmitResponse{
		Decision: cooldownv1.Decision_DECISION_ALLOW, Revision: 1, State: cooldownv1.State_STATE_CLOSED,
		Candidates: []*cooldownv1.CandidateDecision{{Decision: cooldownv1.Decision_DECISION_ALLOW, State: cooldownv1.State_STATE_CLOSED, Revision: 1}},
		ServerTime: timestamppb.Now(),
	}), nil
}

func (f floor) Report(ctx context.Context, _ *connect.Request[cooldownv1.ReportRequest]) (*connect.Response[cooldownv1.ReportResponse], error) {
	if err := f.redis(ctx); err != nil {
		return nil, err
	}
	return connect.NewResponse(&cooldownv1.ReportResponse{
		State: cooldownv1.State_STATE_CLOSED, Revision: 1, Accepted: true, ServerTime: timestamppb.Now(),
	}), nil
}

// rpcChild is a running TestRPCPathServer.
type rpcChild struct {
	addrs map[string]string
	stats *http.Client
}

func startRPCChild(b *testing.B) *rpcChild {
	b.Helper()
	rs := redistest.StartServer(b)
	exe, err := os.Executable()
	require.NoError(b, err)
	cmd := exec.Command(exe, "-test.run=^TestRPCPathServer$", "-test.v=false")
	cmd.Env = append(os.Environ(), rpcPathEnv+"="+rs.Addr)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(b, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(b, err)
	require.NoError(b, cmd.Start())
	b.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	sc := bufio.NewScanner(stdout)
	c := &rpcChild{addrs: map[string]string{}, stats: &http.Client{}}
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "{") {
			require.NoError(b, json.Unmarshal(sc.Bytes(), &c.addrs))
			break
		}
	}
	require.NotEmpty(b, c.addrs, "the child printed no addresses")
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return c
}

func (c *rpcChild) usage(b *testing.B) usage {
	b.Helper()
	resp, err := c.stats.Get("http://" + c.addrs["stats"] + "/")
	require.NoError(b, err)
	defer func() { _ = resp.Body.Close() }()
	var u usage
	require.NoError(b, json.NewDecoder(resp.Body).Decode(&u))
	return u
}

// rpcProtocols are the client transports under test: Connect (binary
// proto) over h2c with prior knowledge (one connection, streams
// multiplexed on it) and over HTTP/1.1 with keep-alive (a pool, one
// connection per call in flight).
var rpcProtocols = []string{"h2c", "http1"}

func rpcHTTPClient(proto string) *http.Client {
	var p http.Protocols
	if proto == "h2c" {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	return &http.Client{Transport: &http.Transport{Protocols: &p, MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}
}

// rpcLoad runs ops calls of op at concurrency conc against a client.
func rpcLoad(b *testing.B, c cooldownv1connect.CooldownServiceClient, op string, ops, conc int) {
	b.Helper()
	ctx := context.Background()
	id := make([]byte, 32)
	id[0] = 0xb7
	conn := &cooldownv1.Connection{Id: id, Label: "bench"}
	admit := &cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{conn}}
	report := &cooldownv1.ReportRequest{Connection: conn, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS}
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	per := (ops + conc - 1) / conc
	for range conc {
		wg.Go(func() {
			for range per {
				var err error
				if op == "Admit" {
					_, err = c.Admit(ctx, connect.NewRequest(admit))
				} else {
					_, err = c.Report(ctx, connect.NewRequest(report))
				}
				if err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(b, first)
}

// rpcFigure is one measured round: the server's CPU, allocations and
// bytes per op.
type rpcFigure struct{ cpu, allocs, bytes float64 }

func (c *rpcChild) round(b *testing.B, rpc cooldownv1connect.CooldownServiceClient, op string, ops, conc int) rpcFigure {
	before := c.usage(b)
	rpcLoad(b, rpc, op, ops, conc)
	after := c.usage(b)
	n := float64(ops)
	return rpcFigure{
		cpu:    float64((after.CPU - before.CPU).Microseconds()) / n,
		allocs: float64(after.Allocs-before.Allocs) / n,
		bytes:  float64(after.Bytes-before.Bytes) / n,
	}
}

// BenchmarkRPCPath is the server's CPU per healthy Admit and Report,
// cooldownd beside the floor handlers of the same contract and protocol,
// at c=16 (c=64 with -rpcpath.conc... see rpcPathConc). Each b.N iteration
// is one round of rpcPathOps calls of every (protocol, op, target) in turn,
// so the rounds interleave and the ratios compare figures from the same
// moments of a shared machine. Reported per op, as the mean over rounds:
//
//	<proto>/<op>/<target>-srv-µs   server CPU (user+system)
//	<proto>/<op>/<target>-srv-allocs, -srv-B   server heap allocations
//	<proto>/<op>/x-floor, x-floor+redis   cooldownd's CPU ÷ the floor's
//
// Run it with: go test ./internal/server -run='^$' -bench=BenchmarkRPCPath -benchtime=5x
func BenchmarkRPCPath(b *testing.B) {
	child := startRPCChild(b)
	conc := rpcPathConc()
	clients := map[string]cooldownv1connect.CooldownServiceClient{}
	for _, proto := range rpcProtocols {
		hc := rpcHTTPClient(proto)
		b.Cleanup(hc.CloseIdleConnections)
		for _, t := range rpcPathTargets {
			clients[proto+"/"+t] = cooldownv1connect.NewCooldownServiceClient(hc, "http://"+child.addrs[t])
		}
	}
	ops := rpcPathOps
	// Warm up: connections dialled, scripts loaded, pools filled.
	for key, c := range clients {
		for _, op := range []string{"Admit", "Report"} {
			_ = key
			rpcLoad(b, c, op, 4*conc, conc)
		}
	}
	sum := map[string]rpcFigure{}
	// COOLDOWND_RPCPATH_ONLY=h2c/Admit/cooldownd runs the rounds of the
	// matching keys only, to profile one of them.
	only := os.Getenv("COOLDOWND_RPCPATH_ONLY")
	b.ResetTimer()
	for range b.N {
		for _, proto := range rpcProtocols {
			for _, op := range []string{"Admit", "Report"} {
				for _, t := range rpcPathTargets {
					k := proto + "/" + op + "/" + t
					if only != "" && !strings.Contains(k, only) {
						continue
					}
					f := child.round(b, clients[proto+"/"+t], op, ops, conc)
					s := sum[k]
					sum[k] = rpcFigure{s.cpu + f.cpu, s.allocs + f.allocs, s.bytes + f.bytes}
				}
			}
		}
	}
	b.StopTimer()
	n := float64(b.N)
	var lines []string
	for _, proto := range rpcProtocols {
		for _, op := range []string{"Admit", "Report"} {
			var cpus []float64
			for _, t := range rpcPathTargets {
				f := sum[proto+"/"+op+"/"+t]
				k := proto + "/" + op + "/" + t
				b.ReportMetric(f.cpu/n, k+"-srv-µs")
				b.ReportMetric(f.allocs/n, k+"-srv-allocs")
				b.ReportMetric(f.bytes/n, k+"-srv-B")
				cpus = append(cpus, f.cpu/n)
			}
			if cpus[0] == 0 || cpus[1] == 0 {
				// COOLDOWND_RPCPATH_ONLY left the floors out: no ratio.
				lines = append(lines, fmt.Sprintf("%-6s %-6s cooldownd %6.1f µs (%.0f allocs, %.0f B)", proto, op, cpus[2],
					sum[proto+"/"+op+"/cooldownd"].allocs/n, sum[proto+"/"+op+"/cooldownd"].bytes/n))
				continue
			}
			b.ReportMetric(cpus[2]/cpus[0], proto+"/"+op+"/x-floor")
			b.ReportMetric(cpus[2]/cpus[1], proto+"/"+op+"/x-floor+redis")
			lines = append(lines, fmt.Sprintf("%-6s %-6s floor %6.1f µs  floor+redis %6.1f µs  cooldownd %6.1f µs (%.2f× floor, %.2f× floor+redis; %.0f allocs, %.0f B)",
				proto, op, cpus[0], cpus[1], cpus[2], cpus[2]/cpus[0], cpus[2]/cpus[1],
				sum[proto+"/"+op+"/cooldownd"].allocs/n, sum[proto+"/"+op+"/cooldownd"].bytes/n))
		}
	}
	// Printed, not logged: the testing package keeps ten lines of a
	// benchmark's log.
	fmt.Fprintf(os.Stderr, "server CPU per op at c=%d, %d ops per round, %d rounds (load average %s):\n%s\n", conc, ops, b.N, loadAverage(), strings.Join(lines, "\n"))
}

// rpcPathOps is the number of calls of one round.
const rpcPathOps = 4000

// rpcPathConc is the load's concurrency: 16, or COOLDOWND_RPCPATH_CONC.
func rpcPathConc() int {
	var n int
	if _, err := fmt.Sscan(os.Getenv("COOLDOWND_RPCPATH_CONC"), &n); err == nil && n > 0 {
		return n
	}
	return 16
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
