package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// proc is one child process. Its stderr (and stdout, unless piped) goes to
// <dir>/<name>.log.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin *os.File // nil unless piped
	out   *bufio.Reader
	outF  *os.File
	done  chan struct{} // closed when the process has exited
	err   error         // Wait's error, once done
}

// spawn starts bin with args and registers it for Close. With pipes set,
// the child's stdin and stdout are pipes to the harness.
func (h *Harness) spawn(name, bin string, pipes bool, args ...string) (*proc, error) {
	logf, err := os.Create(filepath.Join(h.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = sysProcAttr()
	cmd.Stderr = logf
	cmd.Stdout = logf
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	var childIn, childOut *os.File
	if pipes {
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
		p.stdin, p.outF, p.out = inW, outR, bufio.NewReader(outR)
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
	h.mu.Lock()
	h.procs = append(h.procs, p)
	h.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		_ = logf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) closePipes() {
	if p.stdin != nil {
		_ = p.stdin.Close()
	}
	if p.outF != nil {
		_ = p.outF.Close()
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.closePipes()
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// readLine reads one line of the child's stdout within d.
func (p *proc) readLine(d time.Duration) (string, error) {
	type line struct {
		s   string
		err error
	}
	ch := make(chan line, 1)
	go func() {
		s, err := p.out.ReadString('\n')
		ch <- line{strings.TrimSpace(s), err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case l := <-ch:
		if l.err != nil {
			return "", fmt.Errorf("%s: read stdout: %w (see %s.log)", p.name, l.err, p.name)
		}
		return l.s, nil
	case <-t.C:
		p.kill() // unblocks the reader
		return "", fmt.Errorf("%s: no answer in %s (see %s.log)", p.name, d, p.name)
	}
}

// readRest reads the rest of the child's stdout until it closes, within
// d; the process is killed when d passes.
func (p *proc) readRest(d time.Duration) ([]byte, error) {
	type rest struct {
		b   []byte
		err error
	}
	ch := make(chan rest, 1)
	go func() {
		b, err := io.ReadAll(p.out)
		ch <- rest{b, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.b, r.err
	case <-t.C:
		p.kill()
		r := <-ch
		return r.b, fmt.Errorf("%s: did not finish in %s", p.name, d)
	}
}

// freePort returns a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitFor calls ok every 20 ms until it returns true, p exits, ctx ends
// or d passes.
func waitFor(ctx context.Context, p *proc, d time.Duration, ok func() bool) error {
	deadline := time.Now().Add(d)
	for {
		if ok() {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited: %v (see %s.log)", p.name, p.err, p.name)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready in %s (see %s.log)", p.name, d, p.name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// redisPing reports whether a Redis answers PING at addr.
func redisPing(addr string) bool {
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

var errNoRedis = errors.New("redis-server not found on PATH")
