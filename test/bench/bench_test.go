//go:build integration

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/redistest"
)

// TestBenchSmoke runs the benchmark command in its shortest mode and checks
// that it exits 0 and prints its table, the ratios beside the references
// (the no-op handler of each protocol, the no-op+EVALSHA one, the Redis
// floor), the summary of issue 25's goals with a verdict on every line, and
// the before/after row. Its figures are not checked: they depend on the
// machine and its load. ratelimit is not given, so the command must say so.
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("bench: skipped with -short")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		redistest.Missing(t, "redis-server")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bench")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	cmd := exec.Command(bin, "-short", "-phase", "100ms", "-c", "1,4", "-dir", filepath.Join(dir, "run"))
	cmd.Env = append(os.Environ(), ratelimitEnv+"=")
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "the bench run failed:\n%s", out)
	text := string(out)
	for _, want := range []string{"req/s", opFloor, opAdmitReport, opAdmit3, "client.Do guard", "WithMirror", "cooldownd peak RSS",
		opNoopAdmit, opNoopReport, opNoopRedisAdmit, "json-h1", "grpc",
		"Ratios:", "×no-op", "×no-op+EVALSHA", "÷no-op", "×return 1", "÷ratelimit", "p99 ×ratelimit",
		"ratelimit: not built", "Summary: issue 25's goals", "before/after row"} {
		assert.Contains(t, text, want)
	}
	// Every goal at both concurrencies, each with a verdict.
	_, summary, ok := strings.Cut(text, "Summary: issue 25's goals")
	require.True(t, ok)
	for _, c := range []string{"c=1 ", "c=4 "} {
		for _, g := range []string{"server CPU per Admit ≤ 1.2× the no-op's", "server CPU per Report ≤ 1.2× the no-op's",
			"Redis ≤ 10 µs of script per healthy Admit", "Redis ≤ 15 µs of script per healthy Report",
			"Admit ≥ 1.05× ratelimit's req/s", "Admit p99 no worse than ratelimit's"} {
			assert.Regexp(t, regexp.MustCompile(`(?m)^  `+regexp.QuoteMeta(c+g)+`\s+\S.*\s(MET|NOT MET|not measured)$`), summary, "goal %q", c+g)
		}
	}
	assert.Regexp(t, `(?m)^\d+ of 12 met\.$`, summary)
	assert.Regexp(t, `(?m)^  c=\d+ Admit ≥ 1\.05× ratelimit's req/s\s+ratelimit: not built\s+not measured$`, summary)
}
