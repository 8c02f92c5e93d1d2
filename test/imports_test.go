package test

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/cooldownd/cooldownd"

// serverSide are the packages that run cooldownd (its state, its wire and
// its UI): nothing at the bottom of the layering may reach them.
var serverSide = []string{module + "/internal/server", module + "/internal/store", module + "/internal/dashboard", module + "/client"}

// importRules are the dependency directions of DESIGN.md and STYLE.md §3:
// for each package (prefix), the import prefixes it must never use. Every
// package under internal/ (and cmd/internal/) must match one:
// TestEveryInternalPackageHasARule.
var importRules = []struct {
	pkg        string
	stdlibOnly bool
	forbidden  []string
}{
	{pkg: module + "/internal/breaker", stdlibOnly: true},
	{pkg: module + "/internal/keys", stdlibOnly: true},
	{pkg: module + "/internal/logtest", stdlibOnly: true},
	{pkg: module + "/cmd/internal/buildinfo", stdlibOnly: true},
	// auth parses tokens and names roles: the server imports it, never the
	// reverse, and it pulls in no Redis, RPC or metrics code.
	{pkg: module + "/internal/auth", forbidden: append([]string{"github.com/redis/", "connectrpc.com/", "github.com/prometheus/", module + "/api/"}, serverSide...)},
	// policy reads the policy file over internal/breaker's types.
	{pkg: module + "/internal/policy", forbidden: append([]string{"github.com/redis/", "connectrpc.com/", "github.com/prometheus/", module + "/api/", module + "/internal/auth"}, serverSide...)},
	{pkg: module + "/internal/store", forbidden: []string{"connectrpc.com/", module + "/api/", module + "/client", module + "/internal/server", module + "/internal/dashboard"}},
	{pkg: module + "/api/", forbidden: []string{module + "/internal/", module + "/client", "github.com/redis/"}},
	{pkg: module + "/client", forbidden: []string{module + "/internal/store", module + "/internal/server", module + "/internal/dashboard", "github.com/redis/", "github.com/bsm/redislock"}},
	{pkg: module + "/internal/server", forbidden: []string{"github.com/redis/", module + "/client"}},
	{pkg: module + "/internal/dashboard", forbidden: []string{module + "/internal/server", module + "/internal/store", "github.com/redis/"}},
	// proxy is a client of cooldownd: it applies the Go client's rules and
	// none of the server's.
	{pkg: module + "/internal/proxy", forbidden: []string{module + "/internal/server", module + "/internal/store", module + "/internal/dashboard", module + "/internal/breaker", module + "/api/", "github.com/redis/"}},
	// Test helpers (redistest, logtest, proctest, …) never reach the
	// client library: its tests use them, and must not test it through
	// itself.
	{pkg: module + "/internal/redistest", forbidden: append([]string{module + "/internal/auth", module + "/internal/policy"}, serverSide...)},
}

// helperSuffix marks test-helper packages (internal/redistest,
// internal/proctest, internal/servertest): they may import the server side
// to build test servers, never cmd or the client.
const helperSuffix = "test"

// TestEveryInternalPackageHasARule: a new internal package must say where
// it sits in the layering (a rule above, or the helper suffix).
func TestEveryInternalPackageHasARule(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", module+"/internal/...", module+"/cmd/internal/...").Output()
	require.NoError(t, err)
	pkgs := strings.Fields(string(out))
	require.NotEmpty(t, pkgs)
	for _, p := range pkgs {
		covered := strings.HasSuffix(p, helperSuffix)
		for _, r := range importRules {
			covered = covered || p == r.pkg || strings.HasPrefix(p, r.pkg+"/")
		}
		assert.True(t, covered, "%s has no import rule in test/imports_test.go", p)
	}
}

// TestHelpersStayOffTheClient: test-helper packages never import the
// client library.
func TestHelpersStayOffTheClient(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/internal/...").Output()
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if !strings.HasSuffix(fields[0], helperSuffix) {
			continue
		}
		for _, imp := range fields[1:] {
			if imp == module+"/client" || strings.HasPrefix(imp, module+"/client/") {
				t.Errorf("test helper %s imports %s", fields[0], imp)
			}
		}
	}
}

type listedPackage struct {
	ImportPath string
	Imports    []string
	Standard   bool
}

// TestImportDirections fails when a package imports against the layering.
func TestImportDirections(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else {
			require.NoError(t, err)
		}
		for _, r := range importRules {
			if !within(p.ImportPath, r.pkg) {
				continue
			}
			seen++
			for _, imp := range p.Imports {
				if r.stdlibOnly && strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") {
					t.Errorf("%s imports %s: it may import the standard library only", p.ImportPath, imp)
				}
				for _, f := range r.forbidden {
					if strings.HasPrefix(imp, f) {
						t.Errorf("%s imports %s, against the layering", p.ImportPath, imp)
					}
				}
			}
		}
	}
	require.Greater(t, seen, 6, "the rules matched the packages")
}

// TestNothingImportsCmdOrTest keeps binaries and tests at the top (the
// binaries share cmd/internal/).
func TestNothingImportsCmdOrTest(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").Output()
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		for _, imp := range fields[1:] {
			// cmd/internal/ is shared by the binaries, and by them only.
			sharedByCmd := strings.HasPrefix(imp, module+"/cmd/internal/") && strings.HasPrefix(fields[0], module+"/cmd/")
			if strings.HasPrefix(imp, module+"/cmd/") && !sharedByCmd || (imp == module+"/test" || strings.HasPrefix(imp, module+"/test/")) && !strings.HasPrefix(fields[0], module+"/test") {
				t.Errorf("%s imports %s", fields[0], imp)
			}
		}
	}
}

// within reports whether the package at path is pkg or below it
// (internal/servertest is not below internal/server). A rule ending in
// "/" covers what is below it only.
func within(path, pkg string) bool {
	base := strings.TrimSuffix(pkg, "/")
	return path == base && base == pkg || strings.HasPrefix(path, base+"/")
}

func TestWithin(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		path, pkg string
		want      bool
	}{
		{module + "/internal/server", module + "/internal/server", true},
		{module + "/internal/server/x", module + "/internal/server", true},
		{module + "/internal/servertest", module + "/internal/server", false},
		{module + "/clients/ts/conformance", module + "/client", false},
		{module + "/api/v1/gen", module + "/api/", true},
		{module + "/api", module + "/api/", false},
	} {
		assert.Equal(t, tt.want, within(tt.path, tt.pkg), "%s in %s", tt.path, tt.pkg)
	}
}
