package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// procs tracks the child processes so that all die with the run.
type procs struct {
	dir string
	mu  sync.Mutex
	all []*exec.Cmd
}

func (ps *procs) start(name string, bin string, args ...string) (*exec.Cmd, error) {
	log, err := os.Create(filepath.Join(ps.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); _ = log.Close() }()
	ps.mu.Lock()
	ps.all = append(ps.all, cmd)
	ps.mu.Unlock()
	return cmd, nil
}

func (ps *procs) killAll() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, c := range ps.all {
		_ = c.Process.Kill()
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startRedis starts a redis-server on a free loopback port without
// persistence (extra: more arguments) and waits until it answers.
func (ps *procs) startRedis(ctx context.Context, name string, extra ...string) (addr string, pid int, err error) {
	port, err := freePort()
	if err != nil {
		return "", 0, err
	}
	dir := filepath.Join(ps.dir, name+"-data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, err
	}
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no"}, extra...)
	cmd, err := ps.start(name, "redis-server", args...)
	if err != nil {
		return "", 0, err
	}
	addr = "127.0.0.1:" + strconv.Itoa(port)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	for i := 0; ; i++ {
		if err := c.Ping(ctx).Err(); err == nil {
			return addr, cmd.Process.Pid, nil
		} else if i == 200 {
			return "", 0, fmt.Errorf("redis-server on %s did not answer: %w", addr, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// startCluster starts n cluster-enabled redis-servers and joins them into
// a cluster of n masters, no replicas.
func (ps *procs) startCluster(ctx context.Context, n int) ([]string, error) {
	var addrs []string
	for i := range n {
		a, _, err := ps.startRedis(ctx, fmt.Sprintf("redis-%d", i), "--cluster-enabled", "yes", "--cluster-node-timeout", "5000")
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, a)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		for i := 0; ; i++ {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			} else if i == 400 {
				_ = c.Close()
				return nil, fmt.Errorf("cluster node %s not ok: %v", a, err)
			}
			time.Sleep(25 * time.Millisecond)
		}
		_ = c.Close()
	}
	return addrs, nil
}

// buildCooldownd builds ./cmd/cooldownd into dir.
func buildCooldownd(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "cooldownd")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/cooldownd/cooldownd/cmd/cooldownd").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/cooldownd: %w\n%s", err, out)
	}
	return bin, nil
}

// replica is one running cooldownd.
type replica struct {
	url string
	pid int
}

// startCooldownd starts bin on a free loopback port (no auth: loopback)
// with redisArgs and waits until /healthz answers.
func (ps *procs) startCooldownd(ctx context.Context, name, bin string, redisArgs ...string) (replica, error) {
	port, err := freePort()
	if err != nil {
		return replica{}, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := append([]string{"--addr", addr, "--log-level", "warn"}, redisArgs...)
	cmd, err := ps.start(name, bin, args...)
	if err != nil {
		return replica{}, err
	}
	r := replica{url: "http://" + addr, pid: cmd.Process.Pid}
	for i := 0; ; i++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.url+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r, nil
			}
		}
		if i == 400 {
			log, _ := os.ReadFile(filepath.Join(ps.dir, name+".log"))
			return replica{}, fmt.Errorf("%s did not become ready: %v\n%s", name, err, log)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat
// (100 on every Linux architecture Go supports).
const clockTicks = 100

// procCPU returns the user+system CPU time pid has used.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces and parentheses: fields start after
	// the last ')'. Then: state(0) ... utime(11) stime(12).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	return time.Duration(u+st) * time.Second / clockTicks, nil
}

// procStatusKB reads a "Vm…" line of /proc/<pid>/status in kB.
func procStatusKB(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// redisStats is what one INFO commandstats+cpu says.
type redisStats struct {
	calls   int64   // all commands but INFO and CLUSTER (the bench's and clients' own bookkeeping)
	evalsha int64   // EVALSHA calls
	luaUsec int64   // µs Redis spent in EVALSHA
	cpu     float64 // used_cpu_sys + used_cpu_user, seconds
	keys    int64   // keys in db0
}

func (a redisStats) sub(b redisStats) redisStats {
	return redisStats{calls: a.calls - b.calls, evalsha: a.evalsha - b.evalsha, luaUsec: a.luaUsec - b.luaUsec,
		cpu: a.cpu - b.cpu, keys: a.keys}
}

func (a redisStats) add(b redisStats) redisStats {
	return redisStats{calls: a.calls + b.calls, evalsha: a.evalsha + b.evalsha, luaUsec: a.luaUsec + b.luaUsec,
		cpu: a.cpu + b.cpu, keys: a.keys + b.keys}
}

func readRedisStats(ctx context.Context, c *redis.Client) (redisStats, error) {
	info, err := c.Info(ctx, "commandstats", "cpu", "keyspace").Result()
	if err != nil {
		return redisStats{}, err
	}
	var s redisStats
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "cmdstat_"):
			name, rest, _ := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
			calls, usec := kvInt(rest, "calls"), kvInt(rest, "usec")
			if name == "info" || strings.HasPrefix(name, "cluster") {
				continue
			}
			s.calls += calls
			if name == "evalsha" {
				s.evalsha, s.luaUsec = calls, usec
			}
		case strings.HasPrefix(line, "used_cpu_sys:"), strings.HasPrefix(line, "used_cpu_user:"):
			_, v, _ := strings.Cut(line, ":")
			f, _ := strconv.ParseFloat(v, 64)
			s.cpu += f
		case strings.HasPrefix(line, "db0:"):
			s.keys = kvInt(strings.TrimPrefix(line, "db0:"), "keys")
		}
	}
	return s, nil
}

// kvInt reads key=N from "a=1,b=2".
func kvInt(s, key string) int64 {
	for _, kv := range strings.Split(s, ",") {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
