package charttest

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestGoldenDefault pins the default render (manifests and the test hook);
// values the chart generates randomly are masked.
func TestGoldenDefault(t *testing.T) {
	t.Parallel()
	r := render(t, nil)
	got := maskGenerated(r.Manifest)
	for _, h := range r.Hooks {
		got += "---\n" + h.Raw
	}
	checkGolden(t, "default.golden.yaml", got)

	// The same values render the same manifests (apart from generated secrets).
	again := render(t, nil)
	assert.Equal(t, maskGenerated(r.Manifest), maskGenerated(again.Manifest))
}
