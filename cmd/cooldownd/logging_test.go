package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/cmd/internal/buildinfo"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/logtest"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func jsonLogger(w io.Writer, level string) *slog.Logger {
	return newLogger(config{logLevel: level, logFormat: "json"}, w)
}

func TestVersionFlag(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"--version"}, envOf(nil), &out, &errOut, nil)
	require.NoError(t, err)
	assert.Equal(t, "cooldownd "+buildinfo.Get().String()+"\n", out.String())
	assert.Empty(t, errOut.String(), "--version logs nothing")
}

// TestStartLine: the start line carries the version and the policy as
// named fields with duration strings; every line of a JSON run is a JSON
// record.
func TestStartLine(t *testing.T) {
	t.Parallel()
	in := start(t, "--addr", "127.0.0.1:0", "--log-format", "json", "--open-base", "1500ms", "--quota-block", "2h",
		"--shadow", "--throttle-k", "2", "--trip-quorum", "3")
	require.NoError(t, in.stop(t))
	recs, err := in.logs.Records()
	require.NoError(t, err, "every line is a JSON record")
	lines := in.logs.Find("cooldownd serving")
	require.Len(t, lines, 1)
	l := lines[0]
	build := buildinfo.Get()
	assert.Equal(t, build.Version, l.Str("version"))
	assert.Equal(t, build.Revision, l.Str("revision"))
	tests := []struct {
		path string
		want any
	}{
		{"policy.open_base", "1.5s"}, {"policy.open_max", "5m"}, {"policy.quota_block", "2h"}, {"policy.window", "1m"},
		{"policy.lease_ttl", "30s"}, {"policy.rate_limit_cooldown", "2s"}, {"policy.consecutive_failures", 5.0},
		{"policy.failure_rate", 0.5}, {"policy.max_probes", 1.0}, {"metrics", "on --addr"},
		{"policy.retry_budget", 0.2}, {"policy.retry_budget_min", 3.0}, {"policy.throttle_k", 2.0},
		{"policy.trip_quorum", 3.0}, {"policy.fleet_window", "30s"}, {"policy.shadow", true},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, l.Get(tt.path), tt.path)
	}
	for _, k := range breaker.Knobs() {
		assert.NotNil(t, l.Get("policy."+k.Key()), "every knob is logged: %s", k.Key())
	}
	for _, r := range recs {
		if d := r.Get("timeout"); d != nil {
			assert.Equal(t, "20s", d, "the shutdown line's timeout is a duration string")
		}
	}
}

func TestDurationText(t *testing.T) {
	t.Parallel()
	for in, want := range map[time.Duration]string{
		0: "0s", 200 * time.Millisecond: "200ms", 90 * time.Second: "1m30s", 5 * time.Minute: "5m",
		time.Hour: "1h", 90 * time.Minute: "1h30m", 1500 * time.Millisecond: "1.5s", 24*time.Hour + time.Second: "24h0m1s",
	} {
		assert.Equal(t, want, durationText(in), in.String())
	}
}

// TestRedisHealth: one line when Redis becomes unreachable or slow, one
// when it is back, with how long; nothing for answers in the same state,
// for Redis's own error replies, or for calls their caller ended.
func TestRedisHealth(t *testing.T) {
	t.Parallel()
	netErr := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	type step struct {
		wait time.Duration
		took time.Duration
		err  error
		ctx  context.Context
	}
	ok := func(wait time.Duration) step { return step{wait: wait, took: time.Millisecond} }
	slow := func(wait time.Duration) step { return step{wait: wait, took: 150 * time.Millisecond} }
	down := func(wait time.Duration) step { return step{wait: wait, took: time.Millisecond, err: netErr} }
	tests := []struct {
		name  string
		steps []step
		want  []string // "LEVEL msg key=value"
	}{
		{"healthy", []step{ok(0), ok(time.Second), {took: time.Millisecond, err: redis.Nil}}, nil},
		{"an error reply is an answer", []step{{took: time.Millisecond, err: errors.New("x")}, {took: time.Millisecond, err: redisErr("NOSCRIPT No matching script")}}, nil},
		{"outage and back", []step{ok(0), down(0), down(time.Second), down(time.Second), ok(1500 * time.Millisecond)}, []string{
			"WARN redis unreachable: requests answer unavailable and clients decide locally until it is back err=dial tcp: connect: connection refused",
			"INFO redis reachable again unreachable_for=3.5s",
		}},
		{"timeout is unreachable", []step{{took: 200 * time.Millisecond, err: context.DeadlineExceeded}, ok(2 * time.Minute)}, []string{
			"WARN redis unreachable: requests answer unavailable and clients decide locally until it is back err=context deadline exceeded",
			"INFO redis reachable again unreachable_for=2m",
		}},
		{"the caller's own cancel says nothing", []step{{took: time.Millisecond, err: context.Canceled, ctx: canceled}}, nil},
		{"a client closed at shutdown says nothing", []step{ok(0), {took: time.Microsecond, err: redis.ErrClosed}}, nil},
		{"durations are rounded", []step{down(0), ok(4592345678 * time.Nanosecond)}, []string{
			"WARN redis unreachable: requests answer unavailable and clients decide locally until it is back err=dial tcp: connect: connection refused",
			"INFO redis reachable again unreachable_for=4.592s",
		}},
		{"slow, then fast for five answers", []step{slow(0), slow(time.Second), ok(time.Second), ok(0), ok(0), ok(0), slow(0), ok(0), ok(0), ok(0), ok(0), ok(time.Second)}, []string{
			"WARN redis slow took=150ms",
			"INFO redis fast again slow_for=3s",
		}},
		{"down, back slow, then fast", []step{down(0), slow(time.Second), ok(0), ok(0), ok(0), ok(0), ok(time.Minute)}, []string{
			"WARN redis unreachable: requests answer unavailable and clients decide locally until it is back err=dial tcp: connect: connection refused",
			"INFO redis reachable again unreachable_for=1s",
			"INFO redis fast again slow_for=1m",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf logtest.Buffer
			clk := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
			h := newRedisHealth(jsonLogger(&buf, "debug"), clk.Now, 100*time.Millisecond)
			for _, s := range tt.steps {
				clk.Add(s.wait)
				ctx := s.ctx
				if ctx == nil {
					ctx = context.Background()
				}
				h.observe(ctx, s.took, s.err)
			}
			recs, err := buf.Records()
			require.NoError(t, err)
			var got []string
			for _, r := range recs {
				assert.Equal(t, "redis", r.Str("component"))
				line := r.Str("level") + " " + r.Str("msg")
				for _, k := range []string{"err", "took", "unreachable_for", "slow_for"} {
					if v := r.Str(k); v != "" && !(k == "took" && r.Str("msg") != "redis slow") {
						line += " " + k + "=" + v
					}
				}
				got = append(got, line)
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

type redisErr string

func (e redisErr) Error() string { return string(e) }
func (e redisErr) RedisError()   {}

// TestRedisLoggerGoesThroughSlog: go-redis's own lines are structured
// records of the chosen format, at most one per format per interval, the
// next one counting those held back.
func TestRedisLoggerGoesThroughSlog(t *testing.T) {
	t.Parallel()
	var buf logtest.Buffer
	clk := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	l := newRedisLogger(jsonLogger(&buf, "info"), clk.Now)
	const dialFailed = "redis: connection pool: failed to dial after %d attempts: %v"
	for range 20 { // twice a second for 10 s, as during an outage
		l.Printf(context.Background(), dialFailed, 1, "dial tcp 127.0.0.1:6379: connect: connection refused")
		clk.Add(500 * time.Millisecond)
	}
	l.Printf(context.Background(), dialFailed, 1, "dial tcp 127.0.0.1:6379: connect: connection refused")
	l.Printf(context.Background(), "sentinel: new master=%q addr=%q", "mymaster", "10.0.0.2:6379")
	recs, err := buf.Records()
	require.NoError(t, err)
	require.Len(t, recs, 3)
	assert.Equal(t, "redis client: connection pool: failed to dial after 1 attempts: dial tcp 127.0.0.1:6379: connect: connection refused", recs[0].Str("msg"))
	assert.Equal(t, "WARN", recs[0].Str("level"))
	assert.Equal(t, "redis", recs[0].Str("component"))
	assert.Equal(t, 0.0, recs[0].Get("suppressed_since_last"))
	assert.Equal(t, 19.0, recs[1].Get("suppressed_since_last"))
	assert.Contains(t, recs[2].Str("msg"), "sentinel: new master")
}

// TestHTTPErrorLog: a client's GOAWAY (which net/http words as "starting
// graceful shutdown") is a debug record, not a warning; other server
// errors stay warnings; both are structured.
func TestHTTPErrorLog(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line  string
		level string
		msg   string
	}{
		{"http2: received GOAWAY [FrameHeader GOAWAY len=8], starting graceful shutdown", "DEBUG", "a client closed its HTTP/2 connection (GOAWAY)"},
		{"http: TLS handshake error from 10.0.0.9:5123: EOF", "DEBUG", "a client's TLS handshake failed"},
		{"http: Accept error: accept tcp [::]:8080: accept4: too many open files; retrying in 5ms", "WARN", "http server error"},
	}
	for _, tt := range tests {
		t.Run(tt.msg, func(t *testing.T) {
			t.Parallel()
			var buf logtest.Buffer
			httpErrorLog(jsonLogger(&buf, "debug")).Print(tt.line)
			recs, err := buf.Records()
			require.NoError(t, err)
			require.Len(t, recs, 1)
			assert.Equal(t, tt.level, recs[0].Str("level"))
			assert.Equal(t, tt.msg, recs[0].Str("msg"))
			assert.Equal(t, tt.line, recs[0].Str("detail"))
			assert.Equal(t, "http", recs[0].Str("component"))
		})
	}
}

// TestClientGOAWAYIsNotAWarning: a real h2c client that ends its
// connection with an error code leaves no warning in the log.
func TestClientGOAWAYIsNotAWarning(t *testing.T) {
	t.Parallel()
	in := start(t, "--addr", "127.0.0.1:0", "--log-format", "json")
	c, err := net.Dial("tcp", in.addr)
	require.NoError(t, err)
	frame := func(typ byte, payload []byte) []byte {
		n := len(payload)
		return append([]byte{byte(n >> 16), byte(n >> 8), byte(n), typ, 0, 0, 0, 0, 0}, payload...)
	}
	msg := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	msg = append(msg, frame(0x4, nil)...)                            // SETTINGS
	msg = append(msg, frame(0x7, []byte{0, 0, 0, 0, 0, 0, 0, 2})...) // GOAWAY, INTERNAL_ERROR
	_, err = c.Write(msg)
	require.NoError(t, err)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.Copy(io.Discard, c) // the server closes its side
	_ = c.Close()
	exercise(t, in.url()) // the server still serves
	require.NoError(t, in.stop(t))
	recs, err := in.logs.Records()
	require.NoError(t, err)
	for _, r := range recs {
		assert.NotContains(t, r.Str("msg"), "graceful shutdown")
		if r.Str("component") == "http" {
			assert.NotEqual(t, "WARN", r.Str("level"), "a client's GOAWAY is not a warning: %v", r)
		}
	}
}

// TestAccessAndAuditLog: --log-level debug adds one line per RPC with its
// procedure, code, duration, tenant and short id; overrides write an audit
// line with actor, reason and duration, with the same short id.
func TestAccessAndAuditLog(t *testing.T) {
	t.Parallel()
	in := start(t, "--addr", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug")
	id := newID(0xab)
	id[3] = 0x12
	c := cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, in.url())
	_, err := c.Admit(t.Context(), connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{{Id: id, Label: "openai gpt-4o"}}}))
	require.NoError(t, err)
	_, err = c.Admit(t.Context(), connect.NewRequest(&cooldownv1.AdmitRequest{}))
	require.Error(t, err)
	a := cooldownv1connect.NewAdminServiceClient(http.DefaultClient, in.url())
	_, err = a.ForceConnection(t.Context(), connect.NewRequest(&cooldownv1.ForceConnectionRequest{
		Id: id, Override: cooldownv1.Override_OVERRIDE_FORCED_OPEN, Duration: durationpb.New(90 * time.Second), Reason: "provider incident INC-42",
	}))
	require.NoError(t, err)
	_, err = a.ForceConnection(t.Context(), connect.NewRequest(&cooldownv1.ForceConnectionRequest{Id: id, Reason: "incident over"}))
	require.NoError(t, err)
	_, err = a.ResetConnection(t.Context(), connect.NewRequest(&cooldownv1.ResetConnectionRequest{Id: id, Reason: "clean slate"}))
	require.NoError(t, err)
	require.NoError(t, in.stop(t))

	rpcs := in.logs.Find("rpc")
	require.Len(t, rpcs, 5)
	humanDur := regexp.MustCompile(`^[0-9.]+(ns|µs|ms|s)$`)
	want := []struct{ procedure, code string }{
		{"/cooldown.v1.CooldownService/Admit", "ok"},
		{"/cooldown.v1.CooldownService/Admit", "invalid_argument"},
		{"/cooldown.v1.AdminService/ForceConnection", "ok"},
		{"/cooldown.v1.AdminService/ForceConnection", "ok"},
		{"/cooldown.v1.AdminService/ResetConnection", "ok"},
	}
	const short = "ababab12" // the first 8 hex digits, everywhere
	for i, r := range rpcs {
		assert.Equal(t, "DEBUG", r.Str("level"))
		assert.Equal(t, want[i].procedure, r.Str("procedure"))
		assert.Equal(t, want[i].code, r.Str("code"))
		assert.Regexp(t, humanDur, r.Str("duration"))
		assert.Equal(t, "default", r.Str("tenant"))
		if want[i].code == "ok" {
			assert.Equal(t, short, r.Str("id"))
		} else {
			assert.Nil(t, r.Get("id"))
		}
		assert.Nil(t, r.Get("label"), "the access log names no label")
	}

	audits := []struct {
		msg, override, duration, reason string
	}{
		{"connection override set", "forced_open", "1m30s", "provider incident INC-42"},
		{"connection override cleared", "none", "", "incident over"},
		{"connection reset", "", "", "clean slate"},
	}
	for _, w := range audits {
		recs := in.logs.Find(w.msg)
		require.Len(t, recs, 1, w.msg)
		r := recs[0]
		assert.Equal(t, "INFO", r.Str("level"))
		assert.Equal(t, true, r.Get("audit"))
		assert.Equal(t, short, r.Str("id"))
		assert.Equal(t, "anonymous", r.Str("actor"))
		assert.Equal(t, "default", r.Str("tenant"))
		assert.Equal(t, w.reason, r.Str("reason"))
		assert.Equal(t, w.override, r.Str("override"))
		assert.Equal(t, w.duration, r.Str("duration"))
	}
}

// TestMetricsProtection: /metrics behind a token, or on an address of its
// own; cooldownd_build_info names the build either way.
func TestMetricsProtection(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "metrics-token")
	const tok = "metrics-token-0123456789"
	require.NoError(t, os.WriteFile(tokFile, []byte(tok+"\n"), 0o600))
	build := buildinfo.Get()
	buildLine := fmt.Sprintf(`cooldownd_build_info{revision=%q,version=%q} 1`, build.Revision, build.Version)

	scrape := func(t *testing.T, url, bearer string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		require.NoError(t, err)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { _ = res.Body.Close() }()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(b)
	}
	t.Run("token", func(t *testing.T) {
		t.Parallel()
		in := start(t, "--addr", "127.0.0.1:0", "--metrics-token-file", tokFile)
		tests := []struct {
			name   string
			bearer string
			code   int
		}{{"none", "", http.StatusUnauthorized}, {"wrong", "metrics-token-wrong-wrong", http.StatusUnauthorized}, {"right", tok, http.StatusOK}}
		for _, tt := range tests {
			code, body := scrape(t, in.url()+"/metrics", tt.bearer)
			assert.Equal(t, tt.code, code, tt.name)
			if tt.code == http.StatusOK {
				assert.Contains(t, body, buildLine)
			} else {
				assert.NotContains(t, body, "cooldownd_")
			}
		}
	})
	t.Run("separate address", func(t *testing.T) {
		t.Parallel()
		in := start(t, "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--log-format", "json")
		lines := in.logs.Find("cooldownd serving")
		require.Len(t, lines, 1)
		maddr := lines[0].Str("metrics")
		require.NotEqual(t, "on --addr", maddr)
		code, body := scrape(t, "http://"+maddr+"/metrics", "")
		assert.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, buildLine)
		code, _ = scrape(t, in.url()+"/metrics", "")
		assert.Equal(t, http.StatusNotFound, code, "not on the API address")
	})
	t.Run("bad token file", func(t *testing.T) {
		t.Parallel()
		short := filepath.Join(t.TempDir(), "short")
		require.NoError(t, os.WriteFile(short, []byte("abc"), 0o600))
		err := run(t.Context(), []string{"--addr", "127.0.0.1:0", "--metrics-token-file", short}, envOf(nil), io.Discard, new(syncBuffer), nil)
		require.ErrorContains(t, err, "at least 16 characters")
		assert.False(t, strings.Contains(err.Error(), "abc"), "the error does not quote the file")
	})
}
