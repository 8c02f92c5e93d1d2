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
)

// proc is one child process, its output in <dir>/<name>.log.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// procs tracks every child so that all die with the run.
type procs struct {
	dir string
	mu  sync.Mutex
	all []*proc
}

func (ps *procs) start(name string, cmd *exec.Cmd) (*proc, error) {
	log, err := os.OpenFile(filepath.Join(ps.dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	if cmd.Stdout == nil {
		cmd.Stdout = log
	}
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = log.Close()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.mu.Unlock()
	return p, nil
}

func (p *proc) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

// kill SIGKILLs p and waits (bounded) for it to exit.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
}

func (ps *procs) killAll() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.all {
		p.signal(syscall.SIGCONT)
		p.kill()
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

// waitTCP waits until addr accepts connections.
func waitTCP(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			_ = c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s did not accept connections within %v", addr, within)
}

// redisServer is one redis-server on a fixed loopback port, restartable
// (a restart loses everything, the script cache too).
type redisServer struct {
	ps    *procs
	name  string
	port  int
	extra []string
	p     *proc
}

func (r *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

func (r *redisServer) start() error {
	dir := filepath.Join(r.ps.dir, r.name+"-data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// AOF with fsync on every write: a SIGKILL loses no acknowledged write
	// (the script cache is lost all the same), as a production Redis is run.
	args := append([]string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
		"--appendfsync", "always", "--dir", dir}, r.extra...)
	p, err := r.ps.start(r.name, exec.Command("redis-server", args...))
	if err != nil {
		return err
	}
	r.p = p
	return waitTCP(r.addr(), 10*time.Second)
}

// replica is one cooldownd process on a fixed port, restartable.
type replica struct {
	ps   *procs
	name string
	bin  string
	port int
	args []string
	p    *proc
}

func (r *replica) url() string { return "http://127.0.0.1:" + strconv.Itoa(r.port) }

func (r *replica) start() error {
	args := append([]string{"--addr", "127.0.0.1:" + strconv.Itoa(r.port), "--log-format", "json"}, r.args...)
	p, err := r.ps.start(r.name, exec.Command(r.bin, args...))
	if err != nil {
		return err
	}
	r.p = p
	return waitTCP(strings.TrimPrefix(r.url(), "http://"), 20*time.Second)
}

// ready reports whether the replica's readiness check passes.
func (r *replica) ready(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.url()+"/healthz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

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
