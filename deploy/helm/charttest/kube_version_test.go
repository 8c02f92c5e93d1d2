package charttest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chartutil"
)

// The Kubernetes versions the chart's kubeVersion constraint is about
// (docs/decisions/0039-the-chart-admits-helms-default-kube-version.md).
const (
	// minKube is the oldest Kubernetes the chart works on: 1.30 turned the
	// preStop sleep action on by default.
	minKube = "v1.30.0"
	// helmSourceDefault is what a helm built from source (`go install`,
	// `go run`, `go tool`: no -ldflags) assumes for `helm template`
	// without --kube-version.
	helmSourceDefault = "v1.20.0"
)

// kubeAt is a cluster reporting version as its GitVersion, as Helm sees it
// on a real cluster (vendor suffixes such as -eks-1552ad0 kept).
func kubeAt(t *testing.T, version string) *chartutil.KubeVersion {
	t.Helper()
	m := regexp.MustCompile(`^v(\d+)\.(\d+)\.\d+`).FindStringSubmatch(version)
	require.NotNil(t, m, "not a Kubernetes GitVersion: %q", version)
	return &chartutil.KubeVersion{Version: version, Major: m[1], Minor: m[2]}
}

// toolsGoMod is the go.mod of the helm the Makefile runs (make helm-check).
var toolsGoMod = filepath.Join("..", "..", "..", "tools", "helm", "go.mod")

// required is the version of module that the go.mod at path requires.
func required(t *testing.T, path, module string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(module) + ` (v\S+)`).FindSubmatch(b)
	require.NotNil(t, m, "%s requires no %s", path, module)
	return string(m[1])
}

// helmReleaseDefault is the version a helm release binary assumes by
// default: helm's Makefile stamps it from the client-go it is built with
// (v0.X.Y becomes v1.X.0), the client-go tools/helm/go.mod resolves.
func helmReleaseDefault(t *testing.T) string {
	t.Helper()
	v := required(t, toolsGoMod, "k8s.io/client-go")
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	require.GreaterOrEqual(t, len(parts), 2, "client-go %s", v)
	major, err := strconv.Atoi(parts[0])
	require.NoError(t, err)
	return fmt.Sprintf("v%d.%s.0", major+1, parts[1])
}

// TestKubeVersionHelmSourceDefault pins the fact the chart's constraint is
// built around: the helm the README names, built from the Go module proxy,
// renders for Kubernetes v1.20.0 unless given --kube-version.
func TestKubeVersionHelmSourceDefault(t *testing.T) {
	t.Parallel()
	assert.Equal(t, helmSourceDefault, chartutil.DefaultCapabilities.KubeVersion.Version,
		"helm's default Kubernetes version changed: review Chart.yaml kubeVersion and decision 0039")
}

// TestKubeVersion renders the chart for each cluster version: the chart's
// minimum and everything newer render, helm's defaults (a source build's
// and a release binary's) render, and a cluster older than the minimum is
// refused before anything is rendered.
func TestKubeVersion(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		version string // "" is helm's default: `helm template` without --kube-version
		ok      bool
	}{
		{name: "helm default (source build)", version: "", ok: true},
		{name: "helm default (source build), explicit", version: helmSourceDefault, ok: true},
		{name: "helm default (release binary)", version: helmReleaseDefault(t), ok: true},
		{name: "minimum", version: minKube, ok: true},
		{name: "minimum, vendor build", version: "v1.30.2-eks-1552ad0", ok: true},
		{name: "newer", version: "v1.33.4", ok: true},
		{name: "next major", version: "v2.0.0", ok: true},
		{name: "one minor too old", version: "v1.29.15", ok: false},
		{name: "one minor too old, vendor build", version: "v1.29.0-gke.1", ok: false},
		{name: "too old", version: "v1.27.3", ok: false},
		{name: "1.20 patch release", version: "v1.20.1", ok: false},
		{name: "1.20 vendor build", version: "v1.20.0-eks-1", ok: false},
		{name: "1.21", version: "v1.21.0", ok: false},
		{name: "1.19", version: "v1.19.0", ok: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var kv *chartutil.KubeVersion
			if tc.version != "" {
				kv = kubeAt(t, tc.version)
			}
			_, err := tryRenderAt(t, nil, kv)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "chart requires kubeVersion")
		})
	}
}

// TestKubeVersionDoesNotChangeTheRender checks that every variant renders
// the same manifests for helm's default as for the minimum and a newer
// cluster: the chart never branches on .Capabilities.KubeVersion, so what
// `helm template` prints without --kube-version is what a cluster gets.
func TestKubeVersionDoesNotChangeTheRender(t *testing.T) {
	t.Parallel()
	for name, vals := range variants(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want, err := tryRenderAt(t, vals, nil)
			require.NoError(t, err)
			for _, v := range []string{minKube, "v1.37.0"} {
				got, err := tryRenderAt(t, vals, kubeAt(t, v))
				require.NoError(t, err, v)
				assert.Equal(t, maskGenerated(want.Manifest), maskGenerated(got.Manifest), v)
				assert.Equal(t, want.Notes, got.Notes, v)
			}
		})
	}
}

// TestKubeVersionNotBranchedOn keeps the templates free of
// .Capabilities.KubeVersion, which TestKubeVersionDoesNotChangeTheRender
// relies on for values no variant sets.
func TestKubeVersionNotBranchedOn(t *testing.T) {
	t.Parallel()
	var paths []string
	err := filepath.WalkDir(filepath.Join(chartDir, "templates"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			paths = append(paths, p)
		}
		return err
	})
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.NotContains(t, string(b), "KubeVersion", "%s: the chart renders the same for every admitted version (decision 0039)", p)
	}
}

// TestHelmVersionPinnedOnce checks that the helm the Makefile runs
// (tools/helm/go.mod), the helm packages these tests use (this module's
// go.mod) and the helm the READMEs name are one version.
func TestHelmVersionPinnedOnce(t *testing.T) {
	t.Parallel()
	want := required(t, "go.mod", "helm.sh/helm/v3")
	assert.Equal(t, want, required(t, toolsGoMod, "helm.sh/helm/v3"), toolsGoMod)
	named := regexp.MustCompile(`helm\.sh/helm/v3/cmd/helm@(v[0-9][^\s` + "`" + `]*)`)
	for _, readme := range []string{filepath.Join("..", "..", "..", "README.md"), filepath.Join(chartDir, "README.md")} {
		b, err := os.ReadFile(readme)
		require.NoError(t, err)
		found := named.FindAllSubmatch(b, -1)
		require.NotEmpty(t, found, "%s names no helm.sh/helm/v3/cmd/helm@version", readme)
		for _, m := range found {
			assert.Equal(t, want, string(m[1]), readme)
		}
	}
}
