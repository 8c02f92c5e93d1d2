package test

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/cooldownd/cooldownd"

// importRules are the dependency directions of DESIGN.md and STYLE.md §3:
// for each package (prefix), the import prefixes it must never use.
var importRules = []struct {
	pkg        string
	stdlibOnly bool
	forbidden  []string
}{
	{pkg: module + "/internal/breaker", stdlibOnly: true},
	{pkg: module + "/internal/keys", stdlibOnly: true},
	{pkg: module + "/internal/store", forbidden: []string{"connectrpc.com/", module + "/api/", module + "/client", module + "/internal/server", module + "/internal/dashboard"}},
	{pkg: module + "/api/", forbidden: []string{module + "/internal/", module + "/client", "github.com/redis/"}},
	{pkg: module + "/client", forbidden: []string{module + "/internal/store", module + "/internal/server", module + "/internal/dashboard", "github.com/redis/", "github.com/bsm/redislock"}},
	{pkg: module + "/internal/server", forbidden: []string{"github.com/redis/", module + "/client"}},
	{pkg: module + "/internal/dashboard", forbidden: []string{module + "/internal/server", module + "/internal/store", "github.com/redis/"}},
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
			if !strings.HasPrefix(p.ImportPath, r.pkg) {
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

// TestNothingImportsCmdOrTest keeps binaries and tests at the top.
func TestNothingImportsCmdOrTest(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").Output()
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, module+"/cmd/") || (imp == module+"/test" || strings.HasPrefix(imp, module+"/test/")) && !strings.HasPrefix(fields[0], module+"/test") {
				t.Errorf("%s imports %s", fields[0], imp)
			}
		}
	}
}
