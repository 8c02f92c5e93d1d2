package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/cmd/internal/buildinfo"
	"github.com/cooldownd/cooldownd/internal/servertest"
)

func operator() map[string]string {
	return map[string]string{"COOLDOWNCTL_TOKEN": servertest.OperatorToken}
}

// TestUnknownIDIsNotFound: a full id cooldownd holds no state for is "not
// found" (exit 1) for get, reset and force, never a closed connection;
// and force does not create it.
func TestUnknownIDIsNotFound(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	unknown := servertest.NewID()
	forms := map[string]string{
		"hex":        hex.EncodeToString(unknown),
		"HEX":        strings.ToUpper(hex.EncodeToString(unknown)),
		"base64":     base64.StdEncoding.EncodeToString(unknown),
		"base64url":  base64.RawURLEncoding.EncodeToString(unknown),
		"hex with …": hex.EncodeToString(unknown) + "…",
	}
	for form, arg := range forms {
		// "--" ends the flags: a URL-safe base64 id may begin with "-" (one
		// random id in 64), which would read as a flag.
		for _, args := range [][]string{
			{"get", "--", arg},
			{"-o", "json", "get", "--", arg},
			{"reset", "--reason", "x", "--", arg},
			{"force", "--reason", "x", "--", arg, "open"},
			{"force", "--reason", "x", "--", arg, "clear"},
		} {
			t.Run(form+" "+strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				r := s.ctl(t, admin(), args...)
				require.Error(t, r.err)
				assert.Equal(t, 1, r.code)
				assert.Contains(t, r.stderr, "connection "+hex.EncodeToString(unknown)+" not found")
				assert.Empty(t, r.stdout)
			})
		}
	}
	r := s.ctl(t, viewer(), "list")
	require.NoError(t, r.err, r.stderr)
	assert.Equal(t, "No connections.\n", r.stdout, "nothing was created")
}

// TestIDForms: hex, base64 and prefixes name the same connection, and every
// output (table, JSON, watch) prints its id in hex.
func TestIDForms(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	id, hexID := s.rateLimited(t)
	for _, arg := range []string{hexID, strings.ToUpper(hexID), base64.StdEncoding.EncodeToString(id), base64.URLEncoding.EncodeToString(id),
		base64.RawStdEncoding.EncodeToString(id), hexID[:4], hexID[:8] + "…", hexID[:20]} {
		t.Run(arg, func(t *testing.T) {
			t.Parallel()
			// "--" ends the flags: a URL-safe base64 id may begin with "-"
			// (one random id in 64), which would read as a flag.
			r := s.ctl(t, viewer(), "get", "--", arg)
			require.NoError(t, r.err, r.stderr)
			assert.Regexp(t, `ID\s+`+hexID+`\n`, r.stdout)
		})
	}
	anyBase64 := regexp.MustCompile(`"id":\s*"[A-Za-z0-9+/]{43}="`)
	for _, args := range [][]string{{"get", hexID}, {"list"}} {
		r := s.ctl(t, viewer(), append([]string{"-o", "json"}, args...)...)
		require.NoError(t, r.err, r.stderr)
		assert.Contains(t, r.stdout, `"id": "`+hexID+`"`, args)
		assert.NotRegexp(t, anyBase64, r.stdout)
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), "still JSON")
	}
	r := s.ctl(t, viewer(), "list")
	require.NoError(t, r.err, r.stderr)
	assert.Contains(t, r.stdout, hexID[:8]+"  ")
}

// TestListBySeverity: open first (longest left first), then closed ones
// with failures, then healthy ones; --sort id orders by id.
func TestListBySeverity(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	healthy, failing, shortOpen, longOpen := servertest.NewID(), servertest.NewID(), servertest.NewID(), servertest.NewID()
	s.report(t, healthy, "healthy", cooldownv1.Outcome_OUTCOME_SUCCESS, 200, 0)
	s.report(t, failing, "failing", cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE, 503, 0)
	s.report(t, shortOpen, "short-open", cooldownv1.Outcome_OUTCOME_RATE_LIMITED, 429, 30*time.Second)
	s.report(t, longOpen, "long-open", cooldownv1.Outcome_OUTCOME_QUOTA_EXHAUSTED, 429, 0)
	labels := func(out string) []string {
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			got = append(got, strings.Fields(l)[1])
		}
		return got
	}
	r := s.ctl(t, viewer(), "list")
	require.NoError(t, r.err, r.stderr)
	assert.Equal(t, []string{"long-open", "short-open", "failing", "healthy"}, labels(r.stdout))

	r = s.ctl(t, viewer(), "list", "--sort", "id")
	require.NoError(t, r.err, r.stderr)
	byID := map[string]string{hex.EncodeToString(healthy): "healthy", hex.EncodeToString(failing): "failing",
		hex.EncodeToString(shortOpen): "short-open", hex.EncodeToString(longOpen): "long-open"}
	var keysSorted []string
	for k := range byID {
		keysSorted = append(keysSorted, k)
	}
	slices.Sort(keysSorted)
	var want []string
	for _, k := range keysSorted {
		want = append(want, byID[k])
	}
	assert.Equal(t, want, labels(r.stdout))

	r = s.ctl(t, viewer(), "list", "--sort", "age")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "--sort must be severity or id")
}

// TestDurationHints: a duration without a unit is refused with a hint.
func TestDurationHints(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	id := hex.EncodeToString(servertest.NewID())
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"force", id, "open", "--for", "10", "--reason", "x"}, `"10" has no unit: write it with one, such as 10s or 10m`},
		{[]string{"list", "--timeout", "5"}, `"5" has no unit`},
		{[]string{"force", id, "open", "--for", "ten minutes", "--reason", "x"}, `is not a duration such as 90s`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			r := s.ctl(t, admin(), tt.args...)
			assert.Equal(t, 2, r.code)
			assert.Contains(t, r.stderr, tt.want)
		})
	}
}

func TestVersionCommand(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	r := s.ctl(t, nil, "version")
	require.NoError(t, r.err)
	assert.Equal(t, "cooldownctl "+buildinfo.Get().String()+"\n", r.stdout)
	r = s.ctl(t, nil, "version", "extra")
	assert.Equal(t, 2, r.code)
}

// TestOperatorCLI: an operator token lists and watches every tenant (a
// TENANT column), gets by prefix or with --tenant, and changes nothing.
func TestOperatorCLI(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	acme, globex := servertest.NewID(), servertest.NewID()
	s.report(t, acme, "acme-conn", cooldownv1.Outcome_OUTCOME_RATE_LIMITED, 429, time.Minute)
	g := cooldownv1connect.NewCooldownServiceClient(&http.Client{Transport: bearerTransport{base: http.DefaultTransport, token: servertest.OtherToken}}, s.url)
	_, err := g.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
		Connection: &cooldownv1.Connection{Id: globex, Label: "globex-conn"}, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, HttpStatus: 200,
	}))
	require.NoError(t, err)

	r := s.ctl(t, operator(), "list")
	require.NoError(t, r.err, r.stderr)
	assert.Regexp(t, `^TENANT\s+ID\s+LABEL`, r.stdout)
	assert.Regexp(t, `acme\s+`+hex.EncodeToString(acme)[:8]+`\s+acme-conn\s+open`, r.stdout)
	assert.Regexp(t, `globex\s+`+hex.EncodeToString(globex)[:8]+`\s+globex-conn\s+closed`, r.stdout)

	r = s.ctl(t, operator(), "list", "--tenant", "globex")
	require.NoError(t, r.err, r.stderr)
	assert.NotContains(t, r.stdout, "acme-conn")
	assert.Contains(t, r.stdout, "globex-conn")

	// A tenant's viewer: no TENANT column, its own only, and it may not
	// name another tenant.
	r = s.ctl(t, viewer(), "list")
	require.NoError(t, r.err, r.stderr)
	assert.NotContains(t, r.stdout, "TENANT")
	assert.NotContains(t, r.stdout, "globex-conn")
	r = s.ctl(t, viewer(), "list", "--tenant", "globex")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "permission_denied")

	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"get by prefix finds the tenant", []string{"get", hex.EncodeToString(globex)[:8]}, 0, "Tenant  globex", ""},
		{"get a full id with --tenant", []string{"get", hex.EncodeToString(acme), "--tenant", "acme"}, 0, "Tenant  acme", ""},
		{"get a full id in the wrong tenant", []string{"get", hex.EncodeToString(acme), "--tenant", "globex"}, 1, "", "not found in tenant globex"},
		{"get a full id without --tenant", []string{"get", hex.EncodeToString(acme)}, 1, "", "tenant: is required with an operator token"},
		{"reset with --tenant is a usage error", []string{"reset", hex.EncodeToString(acme), "--tenant", "acme", "--reason", "x"}, 2, "", "--tenant is for reading"},
		{"reset is an admin's", []string{"reset", hex.EncodeToString(acme)[:8], "--reason", "x"}, 1, "", "ResetConnection needs a token of role admin; this token's role is operator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := s.ctl(t, operator(), tt.args...)
			assert.Equal(t, tt.code, r.code, r.stderr)
			if tt.stdout != "" {
				assert.Regexp(t, regexp.QuoteMeta(tt.stdout), strings.Join(strings.Fields(r.stdout), "  "))
			}
			assert.Contains(t, r.stderr, tt.stderr)
		})
	}
}

// TestGetShowsPolicy: get prints the connection's effective policy.
func TestGetShowsPolicy(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	id := servertest.NewID()
	s.report(t, id, "openai gpt-4o", cooldownv1.Outcome_OUTCOME_SUCCESS, 200, 0)
	r := s.ctl(t, viewer(), "get", hex.EncodeToString(id))
	require.NoError(t, r.err, r.stderr)
	for _, want := range []string{
		`Consecutive failures\s+after 5 consecutive failures`,
		`Failure rate\s+50% over 1m, once 20 calls are seen`,
		`Breaker open\s+10s doubling to 5m, ±10% jitter`,
		`Rate-limit cooldown\s+2s`, `Quota block\s+1h`, `Auth block\s+5m`, `Probes\s+1 at a time, lease 30s`,
	} {
		assert.Regexp(t, want, r.stdout)
	}
}
