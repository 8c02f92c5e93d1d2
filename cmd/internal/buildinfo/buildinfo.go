// Package buildinfo says which build of cooldownd a binary is: the version
// and revision set by the build (-ldflags -X, as the Dockerfile and the
// release builds do), else read from the Go toolchain's embedded module and
// VCS information (go install …@v1.2.3, or go build in a git checkout).
//
//	go build -ldflags "-X github.com/cooldownd/cooldownd/cmd/internal/buildinfo.version=v1.2.3 \
//	  -X github.com/cooldownd/cooldownd/cmd/internal/buildinfo.revision=$(git rev-parse HEAD)" ./cmd/cooldownd
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Set by -ldflags "-X …buildinfo.version=… -X …buildinfo.revision=…".
var (
	version  string
	revision string
)

// Info is a build's identity.
type Info struct {
	// Version is a release version such as v1.2.3, or "devel" for a build
	// that says nothing better (a plain go build of a working copy).
	Version string
	// Revision is the VCS commit the binary was built from, with a
	// "-dirty" suffix when the working copy had local changes; "unknown"
	// when the build did not record it (-buildvcs=false, no git).
	Revision string
	// GoVersion is the toolchain's.
	GoVersion string
}

// Get returns this binary's build information.
func Get() Info { return resolve(version, revision, debug.ReadBuildInfo) }

// resolve picks ldflags values first, then the embedded build information.
func resolve(ldVersion, ldRevision string, read func() (*debug.BuildInfo, bool)) Info {
	in := Info{Version: ldVersion, Revision: ldRevision}
	if bi, ok := read(); ok {
		in.GoVersion = bi.GoVersion
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		if in.Revision == "" {
			var rev string
			var dirty bool
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					dirty = s.Value == "true"
				}
			}
			if rev != "" && dirty {
				rev += "-dirty"
			}
			in.Revision = rev
		}
	}
	if in.Version == "" {
		in.Version = "devel"
	}
	if in.Revision == "" {
		in.Revision = "unknown"
	}
	return in
}

// String is the one-line form both binaries print: "v1.2.3 (abc123def456, go1.26.8)".
func (in Info) String() string {
	parts := []string{shortRev(in.Revision)}
	if in.GoVersion != "" {
		parts = append(parts, in.GoVersion)
	}
	return in.Version + " (" + strings.Join(parts, ", ") + ")"
}

// shortRev keeps 12 hex digits of a full commit id (and its -dirty mark).
func shortRev(r string) string {
	base, dirty := strings.CutSuffix(r, "-dirty")
	if len(base) > 12 && strings.Trim(base, "0123456789abcdef") == "" {
		base = base[:12]
	}
	if dirty {
		return base + "-dirty"
	}
	return base
}
