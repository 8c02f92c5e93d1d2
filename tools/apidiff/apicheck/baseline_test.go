package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBaselineCatchesABreak runs what make apicheck runs, the pinned
// apidiff against the committed baseline, on a copy of the client module
// with WithNoWait removed and WithMaxRetries changed: the gate fails and
// names both, with the repository's CHANGELOG, and passes once the
// Unreleased section lists them under Breaking.
func TestBaselineCatchesABreak(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../../..")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "client", "go.mod"))
	baseline := filepath.Join(root, "client", "api", "v0.1.0.apidiff")
	require.FileExists(t, baseline)

	dir := t.TempDir()
	for _, m := range []string{"client", "api", "internal/keys", "internal/breaker"} { // the client's replace targets, in place
		copyTree(t, filepath.Join(root, m), filepath.Join(dir, m))
	}
	opts := filepath.Join(dir, "client", "options.go")
	src, err := os.ReadFile(opts)
	require.NoError(t, err)
	s := string(src)
	start, end := strings.Index(s, "// WithNoWait makes"), strings.Index(s, "// WithProbePoll sets")
	require.True(t, start > 0 && end > start, "options.go declares WithNoWait before WithProbePoll")
	s = s[:start] + s[end:]
	s = strings.Replace(s, "func WithMaxRetries(n int) Option {", "func WithMaxRetries(n int, _ ...int) Option {", 1)
	require.NoError(t, os.WriteFile(opts, []byte(s), 0o644))

	cmd := exec.Command("go", "tool", "-modfile="+filepath.Join(root, "tools", "apidiff", "go.mod"), "apidiff", "-m",
		baseline, "github.com/cooldownd/cooldownd/client")
	cmd.Dir = filepath.Join(dir, "client")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	report, err := cmd.Output()
	require.NoError(t, err, "apidiff:\n%s", stderr.String())

	log, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	require.NoError(t, err)
	err = check(strings.NewReader(string(report)), string(log), &strings.Builder{})
	require.Error(t, err, "the report:\n%s", report)
	assert.Contains(t, err.Error(), "WithNoWait: removed")
	assert.Contains(t, err.Error(), "WithMaxRetries: changed")

	decided := strings.Replace(string(log), "## [Unreleased]\n",
		"## [Unreleased]\n\n### Breaking\n\n- `WithNoWait` is gone; `WithMaxRetries` takes more.\n", 1)
	require.NotEqual(t, string(log), decided, "CHANGELOG.md has an Unreleased section")
	assert.NoError(t, check(strings.NewReader(string(report)), decided, &strings.Builder{}))
}

// copyTree copies the regular files under from to to.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	}))
}
