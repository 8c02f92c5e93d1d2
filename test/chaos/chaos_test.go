//go:build integration

package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/redistest"
)

// TestChaosShort runs the chaos command's short mode (every fault, about
// 25 s) and expects PASS; then the same with a seeded server bug, which the
// checker must catch: the checker can fail.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: skipped with -short")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		redistest.Missing(t, "redis-server")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "chaos")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)

	out, err = exec.Command(bin, "-short", "-dir", filepath.Join(dir, "run")).CombinedOutput()
	require.NoError(t, err, "the chaos run failed:\n%s", out)
	assert.Contains(t, string(out), "\nPASS")
	assert.Contains(t, string(out), "0 not linearizable")

	out, err = exec.Command(bin, "-short", "-d", "15s", "-seed-fault", "double-probe", "-dir", filepath.Join(dir, "seeded")).CombinedOutput()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "a seeded double probe must fail the run:\n%s", out)
	assert.Equal(t, 1, ee.ExitCode())
	assert.True(t, strings.Contains(string(out), "at most max_probes probes in flight"), "%s", out)
}
