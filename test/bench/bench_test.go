//go:build integration

package main

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/redistest"
)

// TestBenchSmoke runs the benchmark command in its shortest mode and checks
// that it exits 0 and prints its table. Its figures are not checked: they
// depend on the machine and its load.
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
	out, err = exec.Command(bin, "-short", "-phase", "100ms", "-c", "1,4", "-dir", filepath.Join(dir, "run")).CombinedOutput()
	require.NoError(t, err, "the bench run failed:\n%s", out)
	for _, want := range []string{"req/s", "floor: EVALSHA return 1", "Admit+Report", "Admit 3 cand. (2 cooling)", "client.Do guard", "WithMirror", "cooldownd peak RSS"} {
		assert.Contains(t, string(out), want)
	}
}
