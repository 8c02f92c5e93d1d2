package proctest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test binary doubles as the child: with PROCTEST_CHILD set it runs
// one of these modes instead of the tests.
func TestMain(m *testing.M) {
	switch os.Getenv("PROCTEST_CHILD") {
	case "":
		os.Exit(m.Run())
	case "log": // one line on each of stdout and stderr
		fmt.Println("to stdout")
		fmt.Fprintln(os.Stderr, "to stderr")
	case "echo": // answers each line of stdin, then "bye" at its end
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			fmt.Println("echo " + sc.Text())
		}
		fmt.Print("bye")
	case "exit3":
		os.Exit(3)
	case "sleep": // until killed
		time.Sleep(time.Hour)
	}
	os.Exit(0)
}

// child returns a command running the test binary in mode.
func child(mode string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "PROCTEST_CHILD="+mode)
	return cmd
}

// waitDone waits (generously) for p to exit.
func waitDone(t *testing.T, p *Proc) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit", p.Name)
	}
}

func TestStartLogsAndAppends(t *testing.T) {
	t.Parallel()
	g := NewGroup(t.TempDir())
	defer g.KillAll()
	for range 2 { // a restart under the same name keeps the first run's log
		p, err := g.Start("c", child("log"))
		require.NoError(t, err)
		waitDone(t, p)
		assert.NoError(t, p.Err())
	}
	b, err := os.ReadFile(g.LogPath("c"))
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(string(b), "to stdout\n"), "%s", b)
	assert.Equal(t, 2, strings.Count(string(b), "to stderr\n"), "%s", b)
}

func TestStartKeepsTheCallersStdout(t *testing.T) {
	t.Parallel()
	g := NewGroup(t.TempDir())
	defer g.KillAll()
	var out strings.Builder
	cmd := child("log")
	cmd.Stdout = &out
	p, err := g.Start("c", cmd)
	require.NoError(t, err)
	waitDone(t, p)
	assert.Equal(t, "to stdout\n", out.String())
	b, err := os.ReadFile(g.LogPath("c"))
	require.NoError(t, err)
	assert.Equal(t, "to stderr\n", string(b))
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	g := NewGroup(t.TempDir())
	_, err := g.Start("c", exec.Command("/nonexistent/binary"))
	assert.ErrorContains(t, err, "start c")
	_, err = NewGroup("/nonexistent/dir").Start("c", child("log"))
	assert.Error(t, err)
}

func TestPiped(t *testing.T) {
	t.Parallel()
	g := NewGroup(t.TempDir())
	defer g.KillAll()
	p, err := g.StartPiped("echo", child("echo"))
	require.NoError(t, err)
	_, err = fmt.Fprintln(p.Stdin, "one")
	require.NoError(t, err)
	line, err := p.ReadLine(30 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "echo one", line)
	_, err = fmt.Fprintln(p.Stdin, "two")
	require.NoError(t, err)
	require.NoError(t, p.Stdin.Close())
	rest, err := p.ReadRest(30 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "echo two\nbye", string(rest))
	waitDone(t, p)
}

func TestReadTimeoutsKill(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		read func(p *Proc) error
	}{
		{"line", func(p *Proc) error { _, err := p.ReadLine(50 * time.Millisecond); return err }},
		{"rest", func(p *Proc) error { _, err := p.ReadRest(50 * time.Millisecond); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := NewGroup(t.TempDir())
			defer g.KillAll()
			p, err := g.StartPiped("silent", child("sleep"))
			require.NoError(t, err)
			assert.ErrorContains(t, tt.read(p), "silent")
			assert.True(t, p.Exited(), "the silent child was killed")
		})
	}
}

func TestReadersNeedPipes(t *testing.T) {
	t.Parallel()
	g := NewGroup(t.TempDir())
	defer g.KillAll()
	p, err := g.Start("c", child("sleep"))
	require.NoError(t, err)
	_, err = p.ReadLine(time.Second)
	assert.ErrorIs(t, err, errNotPiped)
	_, err = p.ReadRest(time.Second)
	assert.ErrorIs(t, err, errNotPiped)
}

func TestExitStatus(t *testing.T) {
	t.Parallel()
	g := NewGroup(t.TempDir())
	p, err := g.Start("c", child("exit3"))
	require.NoError(t, err)
	waitDone(t, p)
	assert.True(t, p.Exited())
	var ee *exec.ExitError
	require.ErrorAs(t, p.Err(), &ee)
	assert.Equal(t, 3, ee.ExitCode())
	p.Kill() // a no-op on an exited child
	p.Signal(syscall.SIGTERM)
}

func TestKillAllAndForget(t *testing.T) {
	t.Parallel()
	g := NewGroup(t.TempDir())
	running, err := g.Start("running", child("sleep"))
	require.NoError(t, err)
	stopped, err := g.Start("stopped", child("sleep"))
	require.NoError(t, err)
	forgotten, err := g.Start("forgotten", child("sleep"))
	require.NoError(t, err)
	defer forgotten.Kill()
	assert.False(t, running.Exited())
	assert.NoError(t, running.Err(), "no error while running")
	stopped.Signal(syscall.SIGSTOP)
	g.Forget(forgotten)

	g.KillAll()
	assert.True(t, running.Exited())
	assert.True(t, stopped.Exited(), "a stopped child dies too")
	assert.False(t, forgotten.Exited(), "a forgotten child is left alone")
	g.KillAll() // nothing left
	forgotten.Kill()
	assert.True(t, forgotten.Exited())
}

func TestWaitFor(t *testing.T) {
	t.Parallel()
	g := NewGroup(t.TempDir())
	defer g.KillAll()
	alive, err := g.Start("alive", child("sleep"))
	require.NoError(t, err)
	dead, err := g.Start("dead", child("exit3"))
	require.NoError(t, err)
	waitDone(t, dead)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()

	calls := 0
	assert.NoError(t, WaitFor(t.Context(), alive, time.Minute, func() bool { calls++; return calls == 3 }))
	assert.Equal(t, 3, calls)
	assert.ErrorContains(t, WaitFor(t.Context(), dead, time.Minute, func() bool { return false }), "dead exited: exit status 3")
	assert.ErrorContains(t, WaitFor(t.Context(), alive, 0, func() bool { return false }), "alive not ready in 0s")
	assert.ErrorContains(t, WaitFor(t.Context(), nil, 0, func() bool { return false }), "not ready in 0s")
	assert.ErrorIs(t, WaitFor(canceled, alive, time.Minute, func() bool { return false }), context.Canceled)
}

func TestFreePortAndAccepts(t *testing.T) {
	t.Parallel()
	port, err := FreePort()
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	assert.False(t, Accepts(addr))
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err, "the port is free")
	defer func() { _ = l.Close() }()
	assert.True(t, Accepts(addr))
}

func TestRedisPing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		answer string
		want   bool
	}{
		{"pong", "+PONG\r\n", true},
		{"loading", "-LOADING Redis is loading\r\n", false},
		{"short", "+PO", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer func() { _ = l.Close() }()
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer func() { _ = c.Close() }()
				buf := make([]byte, 6)
				if _, err := c.Read(buf); err == nil && string(buf) == "PING\r\n" {
					_, _ = c.Write([]byte(tt.answer))
				}
			}()
			assert.Equal(t, tt.want, RedisPing(l.Addr().String()))
		})
	}
	port, err := FreePort()
	require.NoError(t, err)
	assert.False(t, RedisPing(fmt.Sprintf("127.0.0.1:%d", port)), "nothing listens")
}

func TestHealthy(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	assert.True(t, Healthy(t.Context(), srv.URL+"/healthz"))
	assert.False(t, Healthy(t.Context(), srv.URL+"/readyz"))
	assert.False(t, Healthy(t.Context(), "http://127.0.0.1:1/healthz"))
	assert.False(t, Healthy(t.Context(), "::bad url"))
}

func TestStartRedis(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("redis-server"); err != nil {
		// redistest.Missing's rule; this package cannot import redistest,
		// which builds on it.
		if os.Getenv("COOLDOWN_REQUIRE_REAL") == "1" {
			t.Fatal("redis-server is required (COOLDOWN_REQUIRE_REAL=1) but not installed")
		}
		t.Skip("SKIPPED: redis-server not installed")
	}
	g := NewGroup(t.TempDir())
	defer g.KillAll()
	data := t.TempDir()
	addr, p, err := g.StartRedis(t.Context(), "redis", data, "--maxmemory", "10mb")
	require.NoError(t, err)
	assert.True(t, RedisPing(addr))
	assert.Equal(t, "redis", p.Name)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	_, err = c.Write([]byte("CONFIG GET maxmemory\r\nCONFIG GET dir\r\n"))
	require.NoError(t, err)
	r := bufio.NewReader(c)
	var lines []string
	for len(lines) < 10 {
		l, err := r.ReadString('\n')
		require.NoError(t, err)
		lines = append(lines, strings.TrimSpace(l))
	}
	assert.Contains(t, lines, "10485760", "the extra arguments apply")
	assert.Contains(t, lines, data, "the data directory applies")
	p.Kill()
	assert.False(t, RedisPing(addr))
}

func TestStartRedisFailures(t *testing.T) {
	// Not parallel: it changes PATH.
	g := NewGroup(t.TempDir())
	defer g.KillAll()
	if _, err := exec.LookPath("redis-server"); err == nil {
		// A server that exits at once (a bad argument) is retried, then
		// reported with its log.
		_, _, err := g.StartRedis(t.Context(), "bad", t.TempDir(), "--no-such-option", "1")
		require.Error(t, err)
		assert.Contains(t, err.Error(), g.LogPath("bad"))
		b, rerr := os.ReadFile(g.LogPath("bad"))
		require.NoError(t, rerr)
		assert.Equal(t, 3, strings.Count(string(b), "no-such-option"), "three attempts, each in the log: %s", b)
	}
	t.Setenv("PATH", t.TempDir())
	_, _, err := g.StartRedis(t.Context(), "none", t.TempDir())
	assert.ErrorIs(t, err, ErrNoRedis)
}
