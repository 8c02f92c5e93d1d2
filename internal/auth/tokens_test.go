package auth_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/auth"
)

const (
	clientTok = "client-token-0123456789"
	adminTok  = "admin-token-abcdefghijk"
)

func sum(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

var goodFile = `tokens:
  - name: app
    tenant: team-a
    role: client
    token: ` + clientTok + `
  - name: ops
    tenant: team-b
    role: admin
    sha256: ` + sum(adminTok) + `
`

func TestParseAndAuthenticate(t *testing.T) {
	t.Parallel()
	tab, err := auth.Parse([]byte(goodFile))
	require.NoError(t, err)
	assert.Equal(t, 2, tab.Len())
	tests := []struct {
		name  string
		token string
		want  auth.Identity
		ok    bool
	}{
		{"plain token", clientTok, auth.Identity{Tenant: "team-a", Role: auth.RoleClient, Name: "app"}, true},
		{"hashed token", adminTok, auth.Identity{Tenant: "team-b", Role: auth.RoleAdmin, Name: "ops"}, true},
		{"unknown", "nope-nope-nope-nope", auth.Identity{}, false},
		{"empty", "", auth.Identity{}, false},
		{"hash itself is not a token", sum(adminTok), auth.Identity{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			who, ok := tab.Authenticate(tt.token)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.want, who)
		})
	}
}

func TestParseJSON(t *testing.T) {
	t.Parallel()
	tab, err := auth.Parse([]byte(`{"tokens":[{"name":"a","tenant":"t","role":"viewer","token":"` + clientTok + `"}]}`))
	require.NoError(t, err)
	who, ok := tab.Authenticate(clientTok)
	require.True(t, ok)
	assert.Equal(t, auth.RoleViewer, who.Role)
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	entry := func(fields string) string { return "tokens:\n  - " + fields + "\n" }
	tests := []struct{ name, doc, want string }{
		{"empty", "", "no tokens"},
		{"no tokens", "tokens: []", "no tokens"},
		{"unknown field", entry("name: a\n    tenant: t\n    role: client\n    token: " + clientTok + "\n    extra: 1"), "field"},
		{"missing name", entry("tenant: t\n    role: client\n    token: " + clientTok), "tokens[0]: name"},
		{"bad tenant", entry("name: a\n    tenant: Team{A}\n    role: client\n    token: " + clientTok), "tokens[0]: tenant"},
		{"bad role", entry("name: a\n    tenant: t\n    role: root\n    token: " + clientTok), "tokens[0]: role"},
		{"short token", entry("name: a\n    tenant: t\n    role: client\n    token: short"), "at least 16"},
		{"both", entry("name: a\n    tenant: t\n    role: client\n    token: " + clientTok + "\n    sha256: " + sum("x")), "not both"},
		{"neither", entry("name: a\n    tenant: t\n    role: client"), "required"},
		{"bad hash", entry("name: a\n    tenant: t\n    role: client\n    sha256: abc"), "64 hex"},
		{"duplicate", "tokens:\n  - {name: a, tenant: t, role: client, token: " + clientTok + "}\n  - {name: b, tenant: u, role: admin, sha256: " + sum(clientTok) + "}\n", "same token as tokens[0]"},
		{"syntax", "tokens: [", "syntax"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := auth.Parse([]byte(tt.doc))
			require.ErrorIs(t, err, auth.ErrInvalidTokens)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), clientTok, "errors never echo a token")
		})
	}
}

func TestWatcherReloadsAndKeepsOldTokensOnError(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	require.NoError(t, os.WriteFile(path, []byte(goodFile), 0o600))
	var logs strings.Builder
	w, err := auth.NewWatcher(path, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	_, ok := w.Authenticate(clientTok)
	require.True(t, ok)

	rotated := strings.Replace(goodFile, clientTok, "rotated-token-9876543210", 1)
	require.NoError(t, os.WriteFile(path, []byte(rotated), 0o600))
	w.ReloadNow(context.Background())
	_, ok = w.Authenticate(clientTok)
	assert.False(t, ok, "the old token is revoked after rotation")
	_, ok = w.Authenticate("rotated-token-9876543210")
	assert.True(t, ok)

	require.NoError(t, os.WriteFile(path, []byte("tokens: ["), 0o600))
	w.ReloadNow(context.Background())
	_, ok = w.Authenticate("rotated-token-9876543210")
	assert.True(t, ok, "a broken file keeps the previous tokens")
	assert.Contains(t, logs.String(), "keeping the previous tokens")
	assert.NotContains(t, logs.String(), "rotated-token", "tokens are never logged")
}

func TestNewWatcherFailsOnMissingFile(t *testing.T) {
	t.Parallel()
	_, err := auth.NewWatcher(filepath.Join(t.TempDir(), "nope"), slog.Default())
	require.Error(t, err)
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(goodFile))
	f.Add([]byte(`{"tokens":[{"name":"a","tenant":"t","role":"viewer","token":"` + clientTok + `"}]}`))
	f.Add([]byte("tokens:\n  - name: a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tab, err := auth.Parse(data)
		if err != nil {
			return
		}
		require.Positive(t, tab.Len())
		_, _ = tab.Authenticate("probe-token-0123456789")
	})
}

func TestRoleAllows(t *testing.T) {
	t.Parallel()
	all := []auth.Role{auth.RoleClient, auth.RoleViewer, auth.RoleAdmin, auth.RoleOperator}
	// grants[have] are the wants that have allows.
	grants := map[auth.Role][]auth.Role{
		auth.RoleClient:   {auth.RoleClient},
		auth.RoleViewer:   {auth.RoleViewer},
		auth.RoleAdmin:    {auth.RoleClient, auth.RoleViewer, auth.RoleAdmin},
		auth.RoleOperator: {auth.RoleViewer, auth.RoleOperator},
	}
	for _, have := range all {
		for _, want := range all {
			t.Run(have.String()+" as "+want.String(), func(t *testing.T) {
				t.Parallel()
				assert.Equal(t, slices.Contains(grants[have], want), have.Allows(want))
			})
		}
	}
	assert.Equal(t, "role(9)", auth.Role(9).String())
	for _, r := range all {
		got, ok := auth.ParseRole(r.String())
		assert.True(t, ok)
		assert.Equal(t, r, got)
	}
	_, ok := auth.ParseRole("root")
	assert.False(t, ok)
}

func TestOperatorTokens(t *testing.T) {
	t.Parallel()
	const opTok = "operator-token-0123456789"
	tests := []struct {
		name    string
		entry   string
		wantErr string
	}{
		{"operator without tenant", "  - name: sre\n    role: operator\n    token: " + opTok + "\n", ""},
		{"operator with a tenant", "  - name: sre\n    tenant: team-a\n    role: operator\n    token: " + opTok + "\n", "leave tenant out"},
		{"viewer without tenant", "  - name: v\n    role: viewer\n    token: " + opTok + "\n", "tenant"},
		{"unknown role", "  - name: v\n    tenant: team-a\n    role: root\n    token: " + opTok + "\n", "client, viewer, admin or operator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tab, err := auth.Parse([]byte("tokens:\n" + tt.entry))
			if tt.wantErr != "" {
				require.ErrorIs(t, err, auth.ErrInvalidTokens)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.NotContains(t, err.Error(), opTok)
				return
			}
			require.NoError(t, err)
			who, ok := tab.Authenticate(opTok)
			require.True(t, ok)
			assert.Equal(t, auth.Identity{Role: auth.RoleOperator, Name: "sre"}, who)
			assert.True(t, who.AllTenants())
		})
	}
}
