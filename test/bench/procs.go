package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/proctest"
)

// startRedis starts a redis-server on a free loopback port without
// persistence (extra: more arguments) and waits until it answers.
func startRedis(ctx context.Context, ps *proctest.Group, name string, extra ...string) (addr string, pid int, err error) {
	dir := filepath.Join(ps.Dir(), name+"-data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, err
	}
	addr, p, err := ps.StartRedis(ctx, name, dir, extra...)
	if err != nil {
		return "", 0, err
	}
	return addr, p.Pid(), nil
}

// startCluster starts n cluster-enabled redis-servers and joins them into
// a cluster of n masters, no replicas.
func startCluster(ctx context.Context, ps *proctest.Group, n int) ([]string, error) {
	var addrs []string
	for i := range n {
		a, _, err := startRedis(ctx, ps, fmt.Sprintf("redis-%d", i), "--cluster-enabled", "yes", "--cluster-node-timeout", "5000")
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
func startCooldownd(ctx context.Context, ps *proctest.Group, name, bin string, redisArgs ...string) (replica, error) {
	return startServing(ctx, ps, name, func(addr string) *exec.Cmd {
		return exec.Command(bin, append([]string{"--addr", addr, "--log-level", "warn"}, redisArgs...)...)
	})
}

// startServing starts the command cmd returns for a free loopback address
// and waits until its /healthz answers.
func startServing(ctx context.Context, ps *proctest.Group, name string, cmd func(addr string) *exec.Cmd) (replica, error) {
	port, err := proctest.FreePort()
	if err != nil {
		return replica{}, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p, err := ps.Start(name, cmd(addr))
	if err != nil {
		return replica{}, err
	}
	r := replica{url: "http://" + addr, pid: p.Pid()}
	if err := proctest.WaitFor(ctx, p, 10*time.Second, func() bool { return proctest.Healthy(ctx, r.url+"/healthz") }); err != nil {
		log, _ := os.ReadFile(ps.LogPath(name))
		return replica{}, fmt.Errorf("%s did not become ready: %w\n%s", name, err, log)
	}
	return r, nil
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
	evalsha int64   // script calls (EVALSHA, EVAL, their _RO forms, FCALL)
	luaUsec int64   // µs Redis spent in them
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
			switch name { // the script commands: Lua's time
			case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro":
				s.evalsha += calls
				s.luaUsec += usec
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
