// Package proctest runs the child processes of the multi-process tests,
// the storm and chaos runs and the benchmarks: redis-server, cooldownd
// replicas, fake providers and client workers, each logging to a file of
// its own and all of them killed with the run.
//
// It does not import the testing package, so commands use it too; the
// test helpers of [github.com/cooldownd/cooldownd/internal/redistest] build
// on it.
package proctest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// killWait bounds how long [Proc.Kill] waits for a killed process to be
// reaped.
const killWait = 5 * time.Second

// Group starts child processes and keeps track of them, so that
// [Group.KillAll] ends every one still running. On Linux a child also gets
// SIGKILL when the parent dies without cleaning up. A Group is safe for
// concurrent use.
type Group struct {
	dir string

	mu  sync.Mutex
	all []*Proc
}

// NewGroup returns a group whose children log to files in dir, which must
// exist.
func NewGroup(dir string) *Group { return &Group{dir: dir} }

// Dir returns the directory of the children's logs.
func (g *Group) Dir() string { return g.dir }

// LogPath returns the log file of the child called name.
func (g *Group) LogPath(name string) string { return filepath.Join(g.dir, name+".log") }

// Proc is one child process.
type Proc struct {
	// Name names the child and its log, <dir>/<Name>.log.
	Name string
	// Cmd is the started command.
	Cmd *exec.Cmd
	// Stdin writes to the child's stdin; set by [Group.StartPiped] only.
	Stdin io.WriteCloser
	// Stdout reads the child's stdout; set by [Group.StartPiped] only.
	// [Proc.ReadLine] and [Proc.ReadRest] read from it too.
	Stdout *bufio.Reader

	outF *os.File
	done chan struct{} // closed once the child has been reaped
	err  error         // Wait's error, once done
}

// Start starts cmd as the child called name. Its stderr, and its stdout
// unless cmd sets one, are appended to the child's log.
func (g *Group) Start(name string, cmd *exec.Cmd) (*Proc, error) {
	return g.start(name, cmd, false)
}

// StartPiped is [Group.Start] with the child's stdin and stdout as pipes to
// the caller: write to [Proc.Stdin], read with [Proc.ReadLine] and
// [Proc.ReadRest]. Its stderr goes to its log.
func (g *Group) StartPiped(name string, cmd *exec.Cmd) (*Proc, error) {
	return g.start(name, cmd, true)
}

func (g *Group) start(name string, cmd *exec.Cmd, piped bool) (*Proc, error) {
	logf, err := os.OpenFile(g.LogPath(name), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = sysProcAttr()
	cmd.Stderr = logf
	if cmd.Stdout == nil {
		cmd.Stdout = logf
	}
	p := &Proc{Name: name, Cmd: cmd, done: make(chan struct{})}
	var childIn, childOut *os.File
	if piped {
		var inW, outR *os.File
		if childIn, inW, err = os.Pipe(); err != nil {
			_ = logf.Close()
			return nil, err
		}
		if outR, childOut, err = os.Pipe(); err != nil {
			_ = logf.Close()
			_, _ = childIn.Close(), inW.Close()
			return nil, err
		}
		cmd.Stdin, cmd.Stdout = childIn, childOut
		p.Stdin, p.outF, p.Stdout = inW, outR, bufio.NewReader(outR)
	}
	err = cmd.Start()
	if childIn != nil {
		_, _ = childIn.Close(), childOut.Close() // the child holds its ends
	}
	if err != nil {
		_ = logf.Close()
		p.closePipes()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	g.mu.Lock()
	g.all = append(g.all, p)
	g.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		_ = logf.Close()
		close(p.done)
	}()
	return p, nil
}

// KillAll kills every child of the group that was not forgotten, newest
// first (a stopped one too), and forgets them.
func (g *Group) KillAll() {
	g.mu.Lock()
	all := g.all
	g.all = nil
	g.mu.Unlock()
	for i := len(all) - 1; i >= 0; i-- {
		all[i].Kill()
	}
}

// Forget drops ps from the group, so that [Group.KillAll] leaves them
// alone: for children the caller has ended itself.
func (g *Group) Forget(ps ...*Proc) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.all = slices.DeleteFunc(g.all, func(p *Proc) bool { return slices.Contains(ps, p) })
}

// Pid returns the child's process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Done is closed once the child has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the child has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err returns how the child exited (Wait's error), once [Proc.Exited].
func (p *Proc) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Signal sends sig to the child, unless it has exited.
func (p *Proc) Signal(sig os.Signal) {
	if !p.Exited() {
		_ = p.Cmd.Process.Signal(sig)
	}
}

// Kill sends SIGKILL (a stopped child is continued first, so that it dies
// at once), waits for the child to be reaped (at most 5 s) and closes the
// pipes to it.
func (p *Proc) Kill() {
	if !p.Exited() {
		_ = p.Cmd.Process.Signal(syscall.SIGCONT)
		_ = p.Cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(killWait):
		}
	}
	p.closePipes()
}

func (p *Proc) closePipes() {
	if p.Stdin != nil {
		_ = p.Stdin.Close()
	}
	if p.outF != nil {
		_ = p.outF.Close()
	}
}

// errNotPiped is returned by the readers of a child not started piped.
var errNotPiped = errors.New("proctest: stdout not piped (use StartPiped)")

// ReadLine reads one line of the child's stdout within d, without the line
// end. When d passes the child is killed.
func (p *Proc) ReadLine(d time.Duration) (string, error) {
	if p.Stdout == nil {
		return "", errNotPiped
	}
	type line struct {
		s   string
		err error
	}
	ch := make(chan line, 1)
	go func() {
		s, err := p.Stdout.ReadString('\n')
		ch <- line{strings.TrimSpace(s), err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case l := <-ch:
		if l.err != nil {
			return "", fmt.Errorf("%s: read stdout: %w (see %s.log)", p.Name, l.err, p.Name)
		}
		return l.s, nil
	case <-t.C:
		p.Kill() // unblocks the reader
		return "", fmt.Errorf("%s: no answer in %s (see %s.log)", p.Name, d, p.Name)
	}
}

// ReadRest reads the rest of the child's stdout until the child closes it,
// within d. When d passes the child is killed and what was read returned
// with an error.
func (p *Proc) ReadRest(d time.Duration) ([]byte, error) {
	if p.Stdout == nil {
		return nil, errNotPiped
	}
	type rest struct {
		b   []byte
		err error
	}
	ch := make(chan rest, 1)
	go func() {
		b, err := io.ReadAll(p.Stdout)
		ch <- rest{b, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.b, r.err
	case <-t.C:
		p.Kill()
		r := <-ch
		return r.b, fmt.Errorf("%s: did not finish in %s", p.Name, d)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Another process may take it before the caller binds it: a caller that
// starts a server on it should retry with another port when the server
// does not come up.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ErrNoRedis is returned by [Group.StartRedis] when redis-server is not on
// PATH.
var ErrNoRedis = errors.New("proctest: redis-server not found on PATH")

// redisWait bounds how long [Group.StartRedis] waits for one redis-server
// to answer.
const redisWait = 10 * time.Second

// StartRedis starts redis-server from PATH as the child called name, on a
// free loopback port, without persistence, with dataDir as its directory
// and extra arguments after the defaults, and waits until it answers PING.
// A server that does not come up (most likely its port was taken
// meanwhile) is killed and another port tried, three times in all.
func (g *Group) StartRedis(ctx context.Context, name, dataDir string, extra ...string) (addr string, p *Proc, err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, ErrNoRedis
	}
	for range 3 {
		port, perr := FreePort()
		if perr != nil {
			return "", nil, perr
		}
		addr = "127.0.0.1:" + strconv.Itoa(port)
		args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dataDir, "--daemonize", "no"}, extra...)
		if p, err = g.Start(name, exec.Command(bin, args...)); err != nil {
			return "", nil, err
		}
		if err = WaitFor(ctx, p, redisWait, func() bool { return RedisPing(addr) }); err == nil {
			return addr, p, nil
		}
		p.Kill()
		g.Forget(p)
		if ctx.Err() != nil {
			break
		}
	}
	return "", nil, fmt.Errorf("redis-server did not start (see %s): %w", g.LogPath(name), err)
}

// pollEvery is how often the waiters check.
const pollEvery = 20 * time.Millisecond

// WaitFor calls ok every 20 ms until it returns true, the child p exits
// (p may be nil), ctx ends or d passes.
func WaitFor(ctx context.Context, p *Proc, d time.Duration, ok func() bool) error {
	deadline := time.Now().Add(d)
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		if ok() {
			return nil
		}
		if p != nil && p.Exited() {
			return fmt.Errorf("%s exited: %v (see %s.log)", p.Name, p.Err(), p.Name)
		}
		if time.Now().After(deadline) {
			if p == nil {
				return fmt.Errorf("not ready in %s", d)
			}
			return fmt.Errorf("%s not ready in %s (see %s.log)", p.Name, d, p.Name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Accepts reports whether addr accepts TCP connections.
func Accepts(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// RedisPing reports whether a Redis at addr answers PING.
func RedisPing(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	buf := make([]byte, 7)
	n, err := io.ReadFull(c, buf)
	return err == nil && string(buf[:n]) == "+PONG\r\n"
}

// Healthy reports whether a GET of url answers 200 within a second: a
// cooldownd's /healthz.
func Healthy(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
