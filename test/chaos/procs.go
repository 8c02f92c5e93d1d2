package main

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cooldownd/cooldownd/internal/proctest"
)

// redisServer is one redis-server on a fixed loopback port, restartable
// (a restart loses everything, the script cache too).
type redisServer struct {
	ps    *proctest.Group
	name  string
	port  int
	extra []string
	p     *proctest.Proc
}

func (r *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

func (r *redisServer) start() error {
	dir := filepath.Join(r.ps.Dir(), r.name+"-data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// AOF with fsync on every write: a SIGKILL loses no acknowledged write
	// (the script cache is lost all the same), as a production Redis is run.
	args := append([]string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
		"--appendfsync", "always", "--dir", dir}, r.extra...)
	p, err := r.ps.Start(r.name, exec.Command("redis-server", args...))
	if err != nil {
		return err
	}
	r.p = p
	return proctest.WaitFor(context.Background(), p, 10*time.Second, func() bool { return proctest.Accepts(r.addr()) })
}

// replica is one cooldownd process on a fixed port, restartable.
type replica struct {
	ps   *proctest.Group
	name string
	bin  string
	port int
	args []string
	p    *proctest.Proc
}

func (r *replica) url() string { return "http://127.0.0.1:" + strconv.Itoa(r.port) }

func (r *replica) start() error {
	args := append([]string{"--addr", "127.0.0.1:" + strconv.Itoa(r.port), "--log-format", "json"}, r.args...)
	p, err := r.ps.Start(r.name, exec.Command(r.bin, args...))
	if err != nil {
		return err
	}
	r.p = p
	addr := strings.TrimPrefix(r.url(), "http://")
	return proctest.WaitFor(context.Background(), p, 20*time.Second, func() bool { return proctest.Accepts(addr) })
}

// ready reports whether the replica's readiness check passes.
func (r *replica) ready(ctx context.Context) bool { return proctest.Healthy(ctx, r.url()+"/healthz") }

// metric reads one unlabelled gauge from the replica's /metrics.
func (r *replica) metric(name string) (float64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.url()+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}
