package buildinfo

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	const rev = "0123456789abcdef0123456789abcdef01234567"
	embedded := func(mainVersion string, settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/cooldownd/cooldownd", Version: mainVersion}, Settings: settings}, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	tests := []struct {
		name       string
		ldV, ldR   string
		read       func() (*debug.BuildInfo, bool)
		want       Info
		wantString string
	}{
		{"ldflags win", "v1.2.3", rev, embedded("v0.9.0", debug.BuildSetting{Key: "vcs.revision", Value: "ffff"}),
			Info{"v1.2.3", rev, "go1.26.8"}, "v1.2.3 (0123456789ab, go1.26.8)"},
		{"go install @version", "", "", embedded("v1.4.0"), Info{"v1.4.0", "unknown", "go1.26.8"}, "v1.4.0 (unknown, go1.26.8)"},
		{"git checkout, clean", "", "", embedded("(devel)", debug.BuildSetting{Key: "vcs.revision", Value: rev}, debug.BuildSetting{Key: "vcs.modified", Value: "false"}),
			Info{"devel", rev, "go1.26.8"}, "devel (0123456789ab, go1.26.8)"},
		{"git checkout, dirty", "", "", embedded("(devel)", debug.BuildSetting{Key: "vcs.revision", Value: rev}, debug.BuildSetting{Key: "vcs.modified", Value: "true"}),
			Info{"devel", rev + "-dirty", "go1.26.8"}, "devel (0123456789ab-dirty, go1.26.8)"},
		{"ldflags version only", "v2.0.0", "", embedded("(devel)", debug.BuildSetting{Key: "vcs.revision", Value: rev}),
			Info{"v2.0.0", rev, "go1.26.8"}, "v2.0.0 (0123456789ab, go1.26.8)"},
		{"nothing recorded", "", "", none, Info{"devel", "unknown", ""}, "devel (unknown)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := resolve(tt.ldV, tt.ldR, tt.read)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.wantString, got.String())
		})
	}
}

func TestGetNeverEmpty(t *testing.T) {
	t.Parallel()
	in := Get()
	assert.NotEmpty(t, in.Version)
	assert.NotEmpty(t, in.Revision)
}
