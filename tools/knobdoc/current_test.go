package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGeneratedFilesAreCurrent: the chart's schema and the README say what
// breaker.Knobs says (make generate writes them; make check-generate and
// this test catch drift).
func TestGeneratedFilesAreCurrent(t *testing.T) {
	t.Parallel()
	require.NoError(t, run(repoRoot, true))
}
