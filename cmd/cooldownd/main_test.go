package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cooldownd/cooldownd/internal/logtest"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/redistest"
)

type syncBuffer = logtest.Buffer

// instance is one run() in the test process.
type instance struct {
	addr   string
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan error
}

// start runs cooldownd with args and waits until it serves. The test fails
// if it does not within 10 s or exits first.
func start(t *testing.T, args ...string) *instance {
	t.Helper()
	return startEnv(t, nil, args...)
}

// startEnv is start with the COOLDOWND_* variables of env.
func startEnv(t *testing.T, env map[string]string, args ...string) *instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{logs: &syncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan string, 1)
	// A generous store timeout: these tests are about behaviour, not about
	// timeouts, on a loaded machine. A test's own --redis-timeout, later
	// on the command line, wins.
	args = append([]string{"--redis-timeout", "5s"}, args...)
	go func() { in.done <- run(ctx, args, envOf(env), io.Discard, in.logs, ready) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-in.done:
		case <-time.After(10 * time.Second):
			t.Error("cooldownd did not stop within 10s")
		}
	})
	select {
	case in.addr = <-ready:
	case err := <-in.done:
		t.Fatalf("cooldownd exited before serving: %v\n%s", err, in.logs)
	case <-time.After(10 * time.Second):
		t.Fatalf("cooldownd not ready within 10s\n%s", in.logs)
	}
	return in
}

// stop cancels run's context (what SIGTERM does) and returns its result.
func (in *instance) stop(t *testing.T) error {
	t.Helper()
	in.cancel()
	select {
	case err := <-in.done:
		in.done <- err // for the cleanup
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("run did not return within 5s of cancel\n%s", in.logs)
		return nil
	}
}

func (in *instance) url() string { return "http://" + in.addr }

// h2c is a client that speaks HTTP/2 without TLS, as gRPC clients do.
func h2c() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

func newID(n byte) []byte {
	id := make([]byte, 32)
	for i := range id {
		id[i] = n
	}
	return id
}

// exercise runs a cooldown through Admit and Report and checks that a
// second caller on another protocol obeys it.
func exercise(t *testing.T, baseURL string) {
	t.Helper()
	first := cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, baseURL)                        // Connect over HTTP/1.1
	second := cooldownv1connect.NewCooldownServiceClient(h2c(), baseURL, connect.WithGRPC())                // gRPC over h2c
	third := cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, baseURL, connect.WithGRPCWeb()) // gRPC-Web over HTTP/1.1
	id := newID(7)
	req := func() *connect.Request[cooldownv1.AdmitRequest] {
		return connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{{Id: id}}})
	}
	res, err := first.Admit(t.Context(), req())
	require.NoError(t, err)
	assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, res.Msg.GetDecision())

	_, err = first.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
		Connection: &cooldownv1.Connection{Id: id}, Revision: res.Msg.GetRevision(),
		Outcome: cooldownv1.Outcome_OUTCOME_RATE_LIMITED, RetryAfter: durationpb.New(30 * time.Second),
	}))
	require.NoError(t, err)
	for _, c := range []cooldownv1connect.CooldownServiceClient{second, third} {
		res, err = c.Admit(t.Context(), req())
		require.NoError(t, err)
		assert.Equal(t, cooldownv1.Decision_DECISION_DENY, res.Msg.GetDecision())
		assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, res.Msg.GetDenyReason())
		ra := res.Msg.GetRetryAfter().AsDuration()
		assert.Positive(t, ra)
		assert.LessOrEqual(t, ra, 30*time.Second)
	}

	_, err = first.Admit(t.Context(), connect.NewRequest(&cooldownv1.AdmitRequest{}))
	assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

func TestRunEmbedded(t *testing.T) {
	t.Parallel()
	in := start(t, "--addr", "127.0.0.1:0")
	assert.Contains(t, in.logs.String(), "embedded in-memory Redis")
	exercise(t, in.url())

	code, body := httpGet(t, in.url()+"/healthz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok\n", body)
	code, body = httpGet(t, in.url()+"/metrics")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "cooldownd_admits_total")

	// A watch stream is in flight when the shutdown starts: it must not
	// hold the shutdown up, and it ends cleanly.
	watch, err := cooldownv1connect.NewCooldownServiceClient(h2c(), in.url(), connect.WithGRPC()).
		WatchConnections(t.Context(), connect.NewRequest(&cooldownv1.WatchConnectionsRequest{Snapshot: true}))
	require.NoError(t, err)
	require.True(t, watch.Receive(), "snapshot: %v", watch.Err())
	assert.True(t, watch.Msg().GetSnapshot())
	watchDone := make(chan error, 1)
	go func() {
		for watch.Receive() {
		}
		watchDone <- watch.Err()
	}()

	began := time.Now()
	require.NoError(t, in.stop(t))
	assert.Less(t, time.Since(began), 3*time.Second, "shutdown is prompt")
	select {
	case err := <-watchDone:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the watch stream did not end with the server")
	}
	assert.Contains(t, in.logs.String(), "draining in-flight requests")
	assert.Contains(t, in.logs.String(), "msg=stopped")

	_, err = net.DialTimeout("tcp", in.addr, time.Second)
	assert.Error(t, err, "the port is closed after shutdown")
}

func TestRunJSONLogs(t *testing.T) {
	t.Parallel()
	in := start(t, "--addr", "127.0.0.1:0", "--log-format", "json", "--log-level", "warn")
	require.NoError(t, in.stop(t))
	logs := in.logs.String()
	assert.Contains(t, logs, `"level":"WARN"`)
	assert.NotContains(t, logs, `"level":"INFO"`, "--log-level warn drops info")
}

func TestRunRealRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	in := start(t, "--addr", "127.0.0.1:0", "--redis-url", "redis://"+srv.Addr+"/3")
	assert.Contains(t, in.logs.String(), "using Redis")
	assert.NotContains(t, in.logs.String(), "embedded")
	exercise(t, in.url())

	// The state is in that Redis, in the database the URL names.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 3})
	t.Cleanup(func() { _ = rdb.Close() })
	keys, err := rdb.Keys(t.Context(), "cd:*").Result()
	require.NoError(t, err)
	assert.NotEmpty(t, keys)
	require.NoError(t, in.stop(t))
}

func TestRunRedisErrors(t *testing.T) {
	t.Parallel()
	closed := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	tests := []struct {
		name string
		url  string
		want string
	}{
		{"closed port", "redis://:s3cret@" + closed + "/0", "does not answer"},
		{"unparsable", "redis://:s3cret@host:notaport/0", "invalid --redis-url"},
		{"wrong scheme", "http://:s3cret@" + closed, "invalid --redis-url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logs := &syncBuffer{}
			began := time.Now()
			err := run(t.Context(), []string{"--addr", "127.0.0.1:0", "--redis-url", tt.url}, envOf(nil), io.Discard, logs, nil)
			require.Error(t, err)
			assert.Less(t, time.Since(began), 7*time.Second, "fails within the ping timeout")
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), "s3cret", "the error never echoes the password")
			assert.NotContains(t, logs.String(), "s3cret", "the logs never echo the password")
		})
	}
}

// TestFatalErrorIsALogRecord: the error cooldownd exits with is the log's
// last record, in the log's format: with --log-format json every line on
// stderr is JSON (it was a plain "cooldownd: redis … does not answer").
func TestFatalErrorIsALogRecord(t *testing.T) {
	t.Parallel()
	closed := "redis://:s3cret@127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)) + "/0"
	tests := []struct {
		name   string
		args   []string
		want   string
		json   bool
		logged bool // a record, so main prints nothing more
	}{
		{"json: redis does not answer", []string{"--log-format", "json", "--redis-url", closed}, "does not answer", true, true},
		{"json: a flag's value", []string{"--log-format", "json", "--max-probes", "0"}, "--max-probes", true, true},
		{"json at warn: still written", []string{"--log-format", "json", "--log-level", "warn", "--redis-url", closed}, "does not answer", true, true},
		{"text: redis does not answer", []string{"--redis-url", closed}, "does not answer", false, true},
		{"text: a flag's value is printed by main", []string{"--max-probes", "0"}, "--max-probes", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logs := &syncBuffer{}
			err := run(t.Context(), append([]string{"--addr", "127.0.0.1:0"}, tt.args...), envOf(nil), io.Discard, logs, nil)
			require.ErrorContains(t, err, tt.want)
			var logged *loggedError
			require.Equal(t, tt.logged, errors.As(err, &logged))
			if !tt.logged {
				return
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			last := lines[len(lines)-1]
			if tt.json {
				for _, l := range lines {
					assert.True(t, json.Valid([]byte(l)), "not JSON: %s", l)
				}
				var rec struct{ Level, Msg, Err string }
				require.NoError(t, json.Unmarshal([]byte(last), &rec))
				assert.Equal(t, "ERROR", rec.Level)
				assert.Contains(t, rec.Err, tt.want)
				assert.Contains(t, rec.Msg, tt.want)
			} else {
				assert.Contains(t, last, "level=ERROR")
				assert.Contains(t, last, tt.want)
			}
			assert.NotContains(t, logs.String(), "s3cret", "the log never echoes the password")
		})
	}
}

func TestRunConfigErrors(t *testing.T) {
	t.Parallel()
	err := run(t.Context(), []string{"--help"}, envOf(nil), io.Discard, io.Discard, nil)
	require.ErrorIs(t, err, flag.ErrHelp)

	err = run(t.Context(), []string{"--max-probes", "0"}, envOf(nil), io.Discard, io.Discard, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--max-probes")

	// The listen address is taken.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	err = run(t.Context(), []string{"--addr", ln.Addr().String()}, envOf(nil), io.Discard, io.Discard, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), ln.Addr().String())
}

// TestRunRefusesOpenPortWithoutAuth: off loopback, cooldownd wants tokens
// or an explicit --insecure-no-auth.
func TestRunRefusesOpenPortWithoutAuth(t *testing.T) {
	t.Parallel()
	err := run(t.Context(), []string{"--addr", "0.0.0.0:0"}, envOf(nil), io.Discard, io.Discard, nil)
	require.ErrorIs(t, err, errNeedAuth)
}

// TestBinary builds cooldownd, runs it as a process and stops it with
// SIGTERM, as Kubernetes does.
func TestBinary(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	bin := filepath.Join(t.TempDir(), "cooldownd")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	env := cleanEnv()

	t.Run("help", func(t *testing.T) {
		cmd := exec.Command(bin, "--help")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "--help exits 0")
		assert.Contains(t, string(out), "--redis-url (env COOLDOWND_REDIS_URL")
	})
	t.Run("bad flag", func(t *testing.T) {
		cmd := exec.Command(bin, "--jitter", "1")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, 2, ee.ExitCode())
		assert.Contains(t, string(out), "--jitter")
	})
	t.Run("json fatal error", func(t *testing.T) {
		// Every line is JSON with --log-format json, the reason to exit too.
		cmd := exec.Command(bin, "--addr", "127.0.0.1:0", "--log-format", "json",
			"--redis-url", "redis://127.0.0.1:"+strconv.Itoa(redistest.FreePort(t)))
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, 2, ee.ExitCode())
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		for _, l := range lines {
			assert.True(t, json.Valid([]byte(l)), "not JSON: %s", l)
		}
		assert.Contains(t, lines[len(lines)-1], "does not answer")
	})
	t.Run("sigterm", func(t *testing.T) {
		addr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
		// A generous store timeout, as start gives: this is about the
		// binary's start and stop, not about timeouts, on a loaded machine
		// (the default 200ms was seen to lapse under -race).
		cmd := exec.Command(bin, "--addr", addr, "--redis-timeout", "5s")
		cmd.Env = env
		logs := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = logs, logs
		require.NoError(t, cmd.Start())
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
			}
		})

		healthy := false
		for range 100 { // 10 s
			if ok := healthz(addr); ok {
				healthy = true
				break
			}
			select {
			case err := <-exited:
				exited <- err
				t.Fatalf("cooldownd exited early: %v\n%s", err, logs)
			case <-time.After(100 * time.Millisecond):
			}
		}
		require.True(t, healthy, "no /healthz within 10s\n%s", logs)
		exercise(t, "http://"+addr)

		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			require.NoError(t, err, "exit code 0 after SIGTERM\n%s", logs)
		case <-time.After(10 * time.Second):
			t.Fatalf("cooldownd did not exit within 10s of SIGTERM\n%s", logs)
		}
		assert.Equal(t, 0, cmd.ProcessState.ExitCode())
		assert.Contains(t, logs.String(), "msg=stopped")
	})
}

func healthz(addr string) bool {
	c := &http.Client{Timeout: time.Second}
	res, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		return false
	}
	_ = res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// cleanEnv is the test's environment without COOLDOWND_* variables.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COOLDOWND_") {
			out = append(out, kv)
		}
	}
	return out
}
