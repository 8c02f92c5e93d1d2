package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// leanModules are the modules a consumer of the Go client builds from
// (decision 0040): the client, the generated API and the two pure packages
// the client runs.
var leanModules = []string{"api", "client", "internal/breaker", "internal/keys"}

// consumerModules is the agreed module graph of a consumer that imports
// only the client and the API package (`go list -m all`): connect and
// protobuf with their own requirements, and the client module's test-only
// requirements (testify, goleak, yaml), which are listed but never built
// into the consumer. A module added here is a decision, not an accident.
var consumerModules = []string{
	"connectrpc.com/connect",
	"example.com/consumer",
	module + "/api",
	module + "/client",
	module + "/internal/breaker",
	module + "/internal/keys",
	"github.com/golang/protobuf",  // google.golang.org/protobuf's own requirement
	"github.com/google/go-cmp",    // google.golang.org/protobuf's own requirement
	"github.com/stretchr/testify", // the client's tests
	"go.uber.org/goleak",          // the client's tests
	"go.yaml.in/yaml/v3",          // testify's
	"google.golang.org/protobuf",
	// The OpenTelemetry API the client's spans use (client/otel.go;
	// decision 0047): otel and otel/trace, never the SDK. The rest is
	// their own graph: otel/metric, auto/sdk, logr, stdr and xxhash are
	// built in (otel's global provider and attributes), otel/log and the
	// test modules of older testify versions are only listed.
	"go.opentelemetry.io/otel",
	"go.opentelemetry.io/otel/trace",
	"go.opentelemetry.io/otel/metric",
	"go.opentelemetry.io/otel/log",
	"go.opentelemetry.io/auto/sdk",
	"github.com/go-logr/logr",
	"github.com/go-logr/stdr",
	"github.com/cespare/xxhash/v2",
	"github.com/davecgh/go-spew",
	"github.com/pmezard/go-difflib",
	"github.com/kr/pretty",
	"github.com/rogpeppe/go-internal",
	"gopkg.in/check.v1",
	"gopkg.in/yaml.v3",
}

// repoRoot is the checkout this test runs in.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "client", "go.mod"))
	return root
}

// goCmd runs the go command in dir, outside any workspace.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// installBlock returns the shell block of README.md that follows the
// marker <!-- install: go -->, with the checkout's path for ../cooldownd.
func installBlock(t *testing.T, root string) string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- install: go -->\\s*```sh\n(.*?)```").FindSubmatch(readme)
	require.NotNil(t, m, "README.md has no install block after <!-- install: go -->")
	return strings.ReplaceAll(string(m[1]), "../cooldownd", root)
}

// newConsumer writes a fresh module example.com/consumer holding main,
// runs the go commands first (each a list of arguments, such as a go get
// of an SDK), adds the client to it as README.md says, and returns its
// directory.
func newConsumer(t *testing.T, root, main string, first ...[]string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/consumer\n\ngo 1.26.0\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(main), 0o644))
	for _, args := range first {
		goCmd(t, dir, args...)
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", installBlock(t, root))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "README's install block:\n%s", out)
	return dir
}

// TestConsumerModuleGraph: a module that imports the client and the API
// package, added as README.md says, has exactly the agreed module graph,
// keeps its own go line, and builds.
func TestConsumerModuleGraph(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	dir := newConsumer(t, root, `package main

import (
	"fmt"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/client"
)

func main() {
	c, err := client.New("http://127.0.0.1:8080")
	fmt.Println(c != nil, err, cooldownv1.Decision_DECISION_ALLOW)
}
`)
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(goCmd(t, dir, "list", "-m", "-f", "{{.Path}}", "all")), "\n") {
		got = append(got, strings.TrimSpace(line))
	}
	slices.Sort(got)
	want := slices.Clone(consumerModules)
	slices.Sort(want)
	assert.Equal(t, want, got, "a consumer's module graph changed: agree on it in consumerModules (and decision 0040)")

	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	assert.Contains(t, string(mod), "\ngo 1.26.0\n", "the consumer's go line is left alone")
	goCmd(t, dir, "build", "./...")
}

// TestLeanModulesGoLine: each module a consumer imports states the oldest
// Go it supports as a release, never a patch release of it.
func TestLeanModulesGoLine(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	goLine := regexp.MustCompile(`(?m)^go (\S+)$`)
	for _, m := range append([]string{"."}, leanModules...) {
		b, err := os.ReadFile(filepath.Join(root, m, "go.mod"))
		require.NoError(t, err)
		v := goLine.FindSubmatch(b)
		require.NotNil(t, v, "%s/go.mod has no go line", m)
		assert.Regexp(t, `^1\.\d+(\.0)?$`, string(v[1]), "%s/go.mod: a minor release (1.26 or 1.26.0), not a patch release", m)
		assert.NotContains(t, string(b), "\ntoolchain ", "%s/go.mod: no toolchain line", m)
	}
}
