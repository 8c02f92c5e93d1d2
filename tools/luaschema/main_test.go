package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckedInIsFresh: the checked-in lua/schema.lua and schema_gen.go
// are what the generator writes from internal/store/schema now (make
// check-generate says the same; this fails in go test ./... too).
func TestCheckedInIsFresh(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		path string
		gen  func() ([]byte, error)
	}{
		{"../../internal/store/lua/schema.lua", Lua},
		{"../../internal/store/schema_gen.go", Go},
	} {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			want, err := tt.gen()
			require.NoError(t, err)
			got, err := os.ReadFile(tt.path)
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got), "stale: run make generate (go run ./tools/luaschema)")
		})
	}
}

// TestConstantsAreUnique: no constant is declared twice.
func TestConstantsAreUnique(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, c := range Constants() {
		assert.False(t, seen[c[0]], c[0])
		seen[c[0]] = true
	}
}
