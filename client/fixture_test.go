package client

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// readFixture reads the shared fixture testdata/<name> (at the repository's
// root, read by the TS client's tests too) into a T.
func readFixture[T any](t testing.TB, name string) T {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", name))
	require.NoError(t, err)
	var v T
	require.NoError(t, json.Unmarshal(b, &v), "testdata/%s", name)
	return v
}
