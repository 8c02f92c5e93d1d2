package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cooldownd/cooldownd/internal/logtest"
	"github.com/cooldownd/cooldownd/internal/servertest"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/server"
)

// testServer is cooldownd in-process on httptest (HTTP/1.1), over a store
// on miniredis, with the test tokens of servertest.Tokens (tenant acme, a
// client of globex, an operator).
type testServer struct {
	url string
	app cooldownv1connect.CooldownServiceClient
}

func newServer(t *testing.T) *testServer {
	t.Helper()
	ts := servertest.Start(t, servertest.WithProtocol(servertest.HTTP1), servertest.WithAuth(servertest.Tokens(t)),
		servertest.WithServerOptions(func(o *server.Options) { o.Heartbeat = 200 * time.Millisecond }))
	hc := &http.Client{Transport: bearerTransport{base: http.DefaultTransport, token: servertest.ClientToken}}
	return &testServer{url: ts.URL, app: cooldownv1connect.NewCooldownServiceClient(hc, ts.URL)}
}

func (s *testServer) report(t *testing.T, id []byte, label string, o cooldownv1.Outcome, status uint32, retry time.Duration) {
	t.Helper()
	req := &cooldownv1.ReportRequest{Connection: &cooldownv1.Connection{Id: id, Label: label}, Outcome: o, HttpStatus: status}
	if retry > 0 {
		req.RetryAfter = durationpb.New(retry)
	}
	_, err := s.app.Report(t.Context(), connect.NewRequest(req))
	require.NoError(t, err)
}

// rateLimited reports a 429 (Retry-After a minute) on a new connection
// "openai gpt-4o" and returns its id, raw and in hex.
func (s *testServer) rateLimited(t *testing.T) (id []byte, hexID string) {
	t.Helper()
	id = servertest.NewID()
	s.report(t, id, "openai gpt-4o", cooldownv1.Outcome_OUTCOME_RATE_LIMITED, 429, time.Minute)
	return id, hex.EncodeToString(id)
}

// result is one cooldownctl run.
type result struct {
	stdout, stderr string
	err            error
	code           int
}

// ctl runs cooldownctl against s with the environment env (the server URL
// is set unless env sets it).
func (s *testServer) ctl(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	return s.ctlCtx(t.Context(), t, env, args...)
}

func (s *testServer) ctlCtx(ctx context.Context, t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	getenv := func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		if k == "COOLDOWNCTL_SERVER" {
			return s.url
		}
		return ""
	}
	var out, errb bytes.Buffer
	err := run(ctx, args, getenv, &out, &errb)
	r := result{stdout: out.String(), stderr: errb.String(), err: err, code: exitCode(err, &errb)}
	r.stderr = errb.String()
	return r
}

func viewer() map[string]string {
	return map[string]string{"COOLDOWNCTL_TOKEN": servertest.ViewerToken}
}
func admin() map[string]string { return map[string]string{"COOLDOWNCTL_TOKEN": servertest.AdminToken} }

func TestListAndGet(t *testing.T) {
	t.Parallel()
	s := newServer(t)

	r := s.ctl(t, viewer(), "list")
	require.NoError(t, r.err, r.stderr)
	assert.Equal(t, "No connections.\n", r.stdout)

	open, closed := servertest.NewID(), servertest.NewID()
	s.report(t, open, "openai gpt-4o …a1b2", cooldownv1.Outcome_OUTCOME_RATE_LIMITED, 429, 30*time.Second)
	s.report(t, closed, "anthropic claude", cooldownv1.Outcome_OUTCOME_SUCCESS, 200, 0)

	r = s.ctl(t, viewer(), "list")
	require.NoError(t, r.err, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3, r.stdout)
	assert.Regexp(t, `^ID\s+LABEL\s+STATE\s+CAUSE\s+LEFT\s+PROBES\s+OK/FAIL\s+LAST\s+REV\s+CHANGED\s+WHY$`, lines[0])
	openLine := lineWith(t, r.stdout, hex.EncodeToString(open)[:8])
	assert.Regexp(t, `openai gpt-4o …a1b2\s+open\s+rate_limit\s+(29|30)s\s+0\s+0/0\s+429 rate_limited\s+\d{13}\s+`, openLine) // a first revision is its time in ms
	assert.Regexp(t, `anthropic claude\s+closed\s+-\s+-\s+0\s+1/0\s+200 success\s+0\s+-\s+-$`, lineWith(t, r.stdout, hex.EncodeToString(closed)[:8]))

	// --state filters; global flags work after the command too.
	r = s.ctl(t, map[string]string{"COOLDOWNCTL_SERVER": "http://127.0.0.1:1"}, "list", "--state", "open", "--server", s.url, "--token-file", tokenFile(t, servertest.ViewerToken))
	require.NoError(t, r.err, r.stderr)
	assert.Len(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), 2)
	assert.Contains(t, r.stdout, "openai gpt-4o")

	// -o json is protojson of a ListConnectionsResponse.
	r = s.ctl(t, viewer(), "-o", "json", "list")
	require.NoError(t, r.err, r.stderr)
	var lr cooldownv1.ListConnectionsResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &lr))
	require.Len(t, lr.GetConnections(), 2)

	// get, by a prefix as the table prints it.
	r = s.ctl(t, viewer(), "get", hex.EncodeToString(open)[:8])
	require.NoError(t, r.err, r.stderr)
	assert.Contains(t, r.stdout, hex.EncodeToString(open))
	assert.Regexp(t, `State\s+open \(rate_limit\)`, r.stdout)
	assert.Regexp(t, `Left\s+(29|30)s \(until `, r.stdout)
	assert.Regexp(t, `Last report\s+429 rate_limited at `, r.stdout)
	assert.Regexp(t, `TIME\s+FROM\s+TO\s+CAUSE\s+REV\s+ACTOR\s+REASON`, r.stdout)
	assert.Regexp(t, `closed\s+open\s+rate_limit\s+\d{13}\s+-\s+-`, r.stdout)

	r = s.ctl(t, viewer(), "get", hex.EncodeToString(closed), "-o", "json", "--history", "5")
	require.NoError(t, r.err, r.stderr)
	var gr cooldownv1.GetConnectionResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &gr))
	assert.Equal(t, cooldownv1.State_STATE_CLOSED, gr.GetConnection().GetState())
	assert.Equal(t, uint64(1), gr.GetConnection().GetRecentSuccesses())

	r = s.ctl(t, viewer(), "get", "ffff0000")
	require.Error(t, r.err)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "no connection id starts with ffff0000")
}

func TestResetAndForce(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, hexID := s.rateLimited(t)

	// A viewer may not.
	r := s.ctl(t, viewer(), "reset", hexID, "--reason", "try")
	require.Error(t, r.err)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "permission_denied")
	assert.Contains(t, r.stderr, "ResetConnection needs a token of role admin; this token's role is viewer")

	r = s.ctl(t, admin(), "reset", hexID, "--reason", "provider recovered")
	require.NoError(t, r.err, r.stderr)
	assert.Regexp(t, `^Reset `+hexID[:8]+` \(openai gpt-4o\): now closed, revision \d{13}\.\n$`, r.stdout)

	r = s.ctl(t, admin(), "force", hexID[:10], "open", "--for", "10m", "--reason", "maintenance")
	require.NoError(t, r.err, r.stderr)
	assert.Regexp(t, `^Forced `+hexID[:8]+` \(openai gpt-4o\) open for 10m \(until \S+Z\), revision \d{13}\.\n$`, r.stdout)

	r = s.ctl(t, admin(), "-o", "json", "get", hexID)
	require.NoError(t, r.err, r.stderr)
	var gr cooldownv1.GetConnectionResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &gr))
	c := gr.GetConnection()
	assert.Equal(t, cooldownv1.State_STATE_OPEN, c.GetState())
	assert.Equal(t, cooldownv1.Override_OVERRIDE_FORCED_OPEN, c.GetOverride())
	require.NotEmpty(t, gr.GetHistory())
	assert.Equal(t, "oncall", gr.GetHistory()[0].GetActor())
	assert.Equal(t, "maintenance", gr.GetHistory()[0].GetReason())

	r = s.ctl(t, admin(), "get", hexID)
	require.NoError(t, r.err, r.stderr)
	assert.Regexp(t, `State\s+open \[forced_open\] \(forced\)`, r.stdout)
	assert.Regexp(t, `Override\s+forced_open \(until `, r.stdout)
	assert.Regexp(t, `open\s+forced\s+\d{13}\s+oncall\s+maintenance`, r.stdout)
	assert.Regexp(t, `closed\s+reset\s+\d{13}\s+oncall\s+provider recovered`, r.stdout)

	r = s.ctl(t, admin(), "force", hexID, "closed", "--reason", "ignore failures")
	require.NoError(t, r.err, r.stderr)
	assert.Regexp(t, `closed until changed, revision \d{13}\.`, r.stdout)

	r = s.ctl(t, admin(), "-o", "json", "force", hexID, "clear", "--reason", "done")
	require.NoError(t, r.err, r.stderr)
	var fr cooldownv1.ForceConnectionResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &fr))
	assert.Equal(t, cooldownv1.Override_OVERRIDE_UNSPECIFIED, fr.GetConnection().GetOverride())
	assert.Equal(t, cooldownv1.State_STATE_CLOSED, fr.GetConnection().GetState())
}

func TestWatch(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	id := servertest.NewID()
	s.report(t, id, "openai gpt-4o", cooldownv1.Outcome_OUTCOME_SUCCESS, 200, 0)

	for _, format := range []string{"table", "json"} {
		t.Run(format, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			var out syncBuffer
			done := make(chan error, 1)
			go func() {
				getenv := func(k string) string {
					return map[string]string{"COOLDOWNCTL_SERVER": s.url, "COOLDOWNCTL_TOKEN": servertest.ViewerToken}[k]
				}
				done <- run(ctx, []string{"watch", "-o", format}, getenv, &out, io.Discard)
			}()
			short := hex.EncodeToString(id)[:8]
			if format == "table" {
				waitOutput(t, &out, "snapshot")
				assert.Regexp(t, `snapshot\s+`+short+`\s+openai gpt-4o\s+closed`, out.String())
			} else {
				waitOutput(t, &out, `"snapshot":true`)
			}
			s.report(t, id, "openai gpt-4o", cooldownv1.Outcome_OUTCOME_OVERLOADED, 529, 0)
			if format == "table" {
				waitOutput(t, &out, "overload")
				assert.Regexp(t, `\d{4}-\d\d-\d\dT[\d:.]+Z\s+`+short+`\s+openai gpt-4o\s+closed\s+→ open\s+overload\s+rev \d+`, out.String())
			} else {
				waitOutput(t, &out, `"CAUSE_OVERLOAD"`)
				for line := range strings.Lines(out.String()) {
					var m cooldownv1.WatchConnectionsResponse
					require.NoError(t, protojson.Unmarshal([]byte(line), &m), "one message per line: %q", line)
				}
			}
			// The reset puts it back for the next format.
			_, err := cooldownv1connect.NewAdminServiceClient(&http.Client{Transport: bearerTransport{base: http.DefaultTransport, token: servertest.AdminToken}}, s.url).
				ResetConnection(t.Context(), connect.NewRequest(&cooldownv1.ResetConnectionRequest{Id: id, Reason: "next"}))
			require.NoError(t, err)
			cancel()
			select {
			case err := <-done:
				assert.NoError(t, err, "Ctrl-C ends watch cleanly")
			case <-time.After(5 * time.Second):
				t.Fatal("watch did not stop on cancel")
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	id := hex.EncodeToString(servertest.NewID())
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "a command is required"},
		{"unknown command", []string{"frobnicate"}, "unknown command"},
		{"bad output", []string{"list", "-o", "yaml"}, "-o must be table or json"},
		{"bad flag", []string{"list", "--nope"}, "flag provided but not defined"},
		{"list args", []string{"list", "extra"}, "list takes no arguments"},
		{"bad state", []string{"list", "--state", "ajar"}, "--state must be"},
		{"get no id", []string{"get"}, "get takes one connection id"},
		{"short id", []string{"get", "abc"}, "not a connection id"},
		{"not hex", []string{"get", "zzzzzzzz"}, "not a connection id"},
		{"history", []string{"get", id, "--history", "51"}, "at most 50"},
		{"reset no reason", []string{"reset", id}, "--reason"},
		{"force mode", []string{"force", id, "sideways", "--reason", "x"}, "open, closed or clear"},
		{"force clear for", []string{"force", id, "clear", "--for", "1m", "--reason", "x"}, "--for makes no sense"},
		{"force no reason", []string{"force", id, "open"}, "--reason"},
		{"bad server", []string{"list", "--server", "ftp://x"}, "--server must be"},
		{"server credentials", []string{"list", "--server", "http://u:p@127.0.0.1:1"}, "must not carry credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := s.ctl(t, admin(), tc.args...)
			require.Error(t, r.err)
			assert.Equal(t, 2, r.code, "usage errors exit 2")
			assert.Contains(t, r.stderr, tc.want)
		})
	}
	r := s.ctl(t, nil, "help")
	require.NoError(t, r.err)
	assert.Contains(t, r.stdout, "Usage: cooldownctl")
	r = s.ctl(t, nil, "--help")
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "force <id> open|closed|clear")
}

// TestTokens checks where the token comes from, that a missing or wrong one
// explains itself, and that no output ever shows it.
func TestTokens(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.report(t, servertest.NewID(), "openai gpt-4o", cooldownv1.Outcome_OUTCOME_SUCCESS, 200, 0)
	var all strings.Builder
	keep := func(r result) result {
		all.WriteString(r.stdout + r.stderr)
		return r
	}

	r := keep(s.ctl(t, nil, "list"))
	require.Error(t, r.err)
	assert.Contains(t, r.stderr, "unauthenticated")
	assert.Contains(t, r.stderr, "COOLDOWNCTL_TOKEN")

	r = keep(s.ctl(t, map[string]string{"COOLDOWNCTL_TOKEN": "wrong-" + servertest.AdminToken}, "list"))
	require.Error(t, r.err)
	assert.Contains(t, r.stderr, "unknown token")

	r = keep(s.ctl(t, map[string]string{"COOLDOWNCTL_TOKEN": servertest.ClientToken}, "list"))
	require.Error(t, r.err)
	assert.Contains(t, r.stderr, "permission_denied")

	r = keep(s.ctl(t, nil, "list", "--token", servertest.ViewerToken))
	require.NoError(t, r.err, r.stderr)
	assert.Contains(t, r.stderr, "--token is visible to other users")

	// The token file wins over the environment.
	r = keep(s.ctl(t, map[string]string{"COOLDOWNCTL_TOKEN": "wrong", "COOLDOWNCTL_TOKEN_FILE": tokenFile(t, servertest.ViewerToken)}, "list"))
	require.NoError(t, r.err, r.stderr)
	assert.Contains(t, r.stdout, "openai gpt-4o")

	r = keep(s.ctl(t, nil, "list", "--token-file", filepath.Join(t.TempDir(), "missing")))
	require.Error(t, r.err)
	assert.Contains(t, r.stderr, "read the token file")

	// Plain http to a remote host with a token warns (the call itself fails
	// fast on a closed port).
	r = keep(s.ctl(t, viewer(), "list", "--server", "http://192.0.2.1:9", "--timeout", "200ms"))
	require.Error(t, r.err)
	assert.Contains(t, r.stderr, "over plain http")

	for _, tok := range []string{servertest.AdminToken, servertest.ViewerToken, servertest.ClientToken} {
		assert.NotContains(t, all.String(), tok, "a token was printed")
	}
}

func tokenFile(t *testing.T, tok string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(p, []byte(tok+"\n"), 0o600))
	return p
}

func lineWith(t *testing.T, out, substr string) string {
	t.Helper()
	for line := range strings.Lines(out) {
		if strings.Contains(line, substr) {
			return strings.TrimRight(line, "\n")
		}
	}
	t.Fatalf("no line with %q in:\n%s", substr, out)
	return ""
}

func waitOutput(t *testing.T, out *syncBuffer, substr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), substr) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the output within 5s:\n%s", substr, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type syncBuffer = logtest.Buffer

func TestHuman(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0s", 950 * time.Millisecond: "950ms", 29*time.Second + 400*time.Millisecond: "29s",
		4 * time.Minute: "4m", 4*time.Minute + 10*time.Second: "4m10s", 2*time.Hour + 5*time.Minute: "2h5m",
		time.Hour: "1h0m",
	} {
		assert.Equal(t, want, human(d), "%v", d)
	}
}
