package charttest

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/strvals"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.yaml from the current chart")

const (
	chartDir    = "../cooldownd"
	releaseName = "demo"
	namespace   = "cooldownd"
	fullname    = "demo-cooldownd"
)

// kubeVersion is the cluster version the chart is rendered for; the chart
// needs at least 1.30 (Chart.yaml kubeVersion, kube_version_test.go).
var kubeVersion = &chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// (monitoring.coreos.com/v1) the chart renders. k8s.io/api lacks the type;
// strict decoding into this struct still rejects unknown fields.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel          string `json:"jobLabel,omitempty"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port              string           `json:"port"`
			Path              string           `json:"path"`
			Scheme            string           `json:"scheme"`
			Interval          string           `json:"interval,omitempty"`
			ScrapeTimeout     string           `json:"scrapeTimeout,omitempty"`
			HonorLabels       bool             `json:"honorLabels"`
			TLSConfig         map[string]any   `json:"tlsConfig,omitempty"`
			Relabelings       []map[string]any `json:"relabelings,omitempty"`
			MetricRelabelings []map[string]any `json:"metricRelabelings,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// prometheusRule is the Prometheus Operator's PrometheusRule
// (monitoring.coreos.com/v1) as the chart renders it; strict decoding
// rejects unknown fields.
type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert,omitempty"`
				Record      string            `json:"record,omitempty"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// setValues parses values as `helm --set` does (strvals): numbers with a
// fraction stay strings, whole numbers become int64.
func setValues(t *testing.T, sets ...string) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, s := range sets {
		require.NoError(t, strvals.ParseInto(s, out), "--set %s", s)
	}
	return out
}

// newObject returns an empty typed object for an apiVersion and kind, or nil
// when the chart is not expected to render that kind.
func newObject(apiVersion, kind string) any {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}
	case "v1 Service":
		return &corev1.Service{}
	case "v1 Secret":
		return &corev1.Secret{}
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}
	case "v1 Pod":
		return &corev1.Pod{}
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}
	case "networking.k8s.io/v1 Ingress":
		return &networkingv1.Ingress{}
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &serviceMonitor{}
	case "monitoring.coreos.com/v1 PrometheusRule":
		return &prometheusRule{}
	}
	return nil
}

// manifest is one rendered document.
type manifest struct {
	Source string // template path, from Helm's "# Source:" comment
	Kind   string
	Name   string
	Raw    string
	Obj    any // strictly decoded typed object
}

// rendered is one release rendered client-side.
type rendered struct {
	Manifest  string // the non-hook manifests as Helm prints them
	Manifests []manifest
	Hooks     []manifest
	Notes     string
}

// loadChart loads the chart from disk (fresh each time: rendering may
// mutate it).
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	require.NoError(t, err)
	return ch
}

// parseValues parses a YAML values document.
func parseValues(t *testing.T, doc string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(doc))
	require.NoError(t, err)
	return v.AsMap()
}

// ciValues reads ci/<name>.
func ciValues(t *testing.T, name string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "ci", name))
	require.NoError(t, err)
	return v.AsMap()
}

// ciFiles lists the chart's ci/*-values.yaml files.
func ciFiles(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	names := make([]string, 0, len(paths))
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	return names
}

// tryRender renders the chart like `helm install --dry-run=client` (hooks
// and NOTES.txt included) and returns Helm's error unchanged.
func tryRender(t *testing.T, values map[string]any) (*rendered, error) {
	t.Helper()
	return tryRenderAt(t, values, kubeVersion)
}

// tryRenderAt is tryRender for the cluster version kv; nil renders with
// Helm's default capabilities, as `helm template` without --kube-version.
func tryRenderAt(t *testing.T, values map[string]any, kv *chartutil.KubeVersion) (*rendered, error) {
	t.Helper()
	cfg := &action.Configuration{Log: func(string, ...any) {}}
	install := action.NewInstall(cfg)
	install.DryRun = true
	install.DryRunOption = "client"
	install.ClientOnly = true
	install.Replace = true
	install.ReleaseName = releaseName
	install.Namespace = namespace
	install.KubeVersion = kv
	if values == nil {
		values = map[string]any{}
	}
	rel, err := install.Run(loadChart(t), values)
	if err != nil {
		return nil, err
	}
	r := &rendered{Manifest: rel.Manifest, Notes: rel.Info.Notes}
	r.Manifests = decodeAll(t, rel.Manifest)
	for _, h := range rel.Hooks {
		r.Hooks = append(r.Hooks, decodeAll(t, "# Source: "+h.Path+"\n"+h.Manifest)...)
	}
	return r, nil
}

// render renders the chart and fails the test on error.
func render(t *testing.T, values map[string]any) *rendered {
	t.Helper()
	r, err := tryRender(t, values)
	require.NoError(t, err)
	return r
}

var (
	docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)
	sourceLine   = regexp.MustCompile(`(?m)^# Source: (.+)$`)
)

// decodeAll splits a multi-document manifest and strictly decodes each
// document into its Kubernetes type: unknown fields, duplicate keys and
// wrong types fail the test.
func decodeAll(t *testing.T, stream string) []manifest {
	t.Helper()
	var out []manifest
	source := ""
	for _, doc := range docSeparator.Split(stream, -1) {
		if m := sourceLine.FindStringSubmatch(doc); m != nil {
			source = m[1]
		}
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var tm metav1.TypeMeta
		require.NoError(t, yaml.Unmarshal([]byte(doc), &tm), "%s: not YAML", source)
		obj := newObject(tm.APIVersion, tm.Kind)
		require.NotNil(t, obj, "%s: unexpected kind %s %s", source, tm.APIVersion, tm.Kind)
		require.NoError(t, yaml.UnmarshalStrict([]byte(doc), obj), "%s: %s does not decode strictly:\n%s", source, tm.Kind, doc)
		meta, ok := obj.(metav1.Object)
		require.True(t, ok)
		out = append(out, manifest{Source: source, Kind: tm.Kind, Name: meta.GetName(), Raw: doc, Obj: obj})
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// all returns the rendered objects of type T.
func all[T any](r *rendered) []T {
	var out []T
	for _, m := range r.Manifests {
		if o, ok := m.Obj.(T); ok {
			out = append(out, o)
		}
	}
	return out
}

// one returns the rendered object of type T with the given name.
func one[T interface{ GetName() string }](t *testing.T, r *rendered, name string) T {
	t.Helper()
	for _, o := range all[T](r) {
		if o.GetName() == name {
			return o
		}
	}
	var zero T
	require.Failf(t, "object not rendered", "%T %q", zero, name)
	return zero
}

// has reports whether an object of type T with the given name is rendered.
func has[T interface{ GetName() string }](r *rendered, name string) bool {
	for _, o := range all[T](r) {
		if o.GetName() == name {
			return true
		}
	}
	return false
}

// deployment returns the cooldownd Deployment and its container.
func deployment(t *testing.T, r *rendered) (*appsv1.Deployment, corev1.Container) {
	t.Helper()
	d := one[*appsv1.Deployment](t, r, fullname)
	require.Len(t, d.Spec.Template.Spec.Containers, 1)
	c := d.Spec.Template.Spec.Containers[0]
	require.Equal(t, "cooldownd", c.Name)
	return d, c
}

// flagsOf returns the container's --name=value flags (value "" for bare
// booleans) and fails on a repeated flag.
func flagsOf(t *testing.T, args []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range args {
		require.True(t, strings.HasPrefix(a, "--"), "argument %q is not a --flag", a)
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		_, dup := out[name]
		require.False(t, dup, "flag --%s given twice", name)
		out[name] = value
	}
	return out
}

// redisFlags returns only the --redis-* flags.
func redisFlags(t *testing.T, args []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range flagsOf(t, args) {
		if strings.HasPrefix(k, "redis-") {
			out[k] = v
		}
	}
	return out
}

// envOf returns the container's literal env values and, for secret refs,
// "secret:<name>/<key>".
func envOf(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			out[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		case e.ValueFrom.ResourceFieldRef != nil:
			out[e.Name] = "resource:" + e.ValueFrom.ResourceFieldRef.Resource
		default:
			out[e.Name] = "ref"
		}
	}
	return out
}

// projectedFiles maps each file of the "secrets" projected volume (path
// relative to its mount) to "<secret>/<key>", or "configmap:<name>/<key>"
// for a file from a ConfigMap (the policy overrides).
func projectedFiles(t *testing.T, d *appsv1.Deployment) map[string]string {
	t.Helper()
	out := map[string]string{}
	add := func(path, ref string) {
		_, dup := out[path]
		require.False(t, dup, "file %s projected twice", path)
		out[path] = ref
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name != "secrets" {
			continue
		}
		require.NotNil(t, v.Projected, "volume secrets is not projected")
		for _, s := range v.Projected.Sources {
			switch {
			case s.Secret != nil:
				for _, it := range s.Secret.Items {
					add(it.Path, s.Secret.Name+"/"+it.Key)
				}
			case s.ConfigMap != nil:
				for _, it := range s.ConfigMap.Items {
					add(it.Path, configMapRef+s.ConfigMap.Name+"/"+it.Key)
				}
			default:
				require.Fail(t, "only Secret and ConfigMap sources are expected")
			}
		}
	}
	return out
}

// configMapRef prefixes projectedFiles' references to ConfigMap keys.
const configMapRef = "configmap:"

// selects reports whether a label selector selects a label set.
func selects(t *testing.T, sel *metav1.LabelSelector, set map[string]string) bool {
	t.Helper()
	require.NotNil(t, sel)
	s, err := metav1.LabelSelectorAsSelector(sel)
	require.NoError(t, err)
	require.False(t, s.Empty(), "empty selector selects everything")
	return s.Matches(labels.Set(set))
}

// subset reports whether every entry of small is in big.
func subset(small, big map[string]string) bool {
	for k, v := range small {
		if got, ok := big[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// goldenMask hides values the chart generates randomly (the bundled Redis
// password, the generated admin token and the coalescing peer token) so the
// golden file is stable.
var goldenMask = regexp.MustCompile(`(?m)^(  (?:redis-password|admin-token|tokens\.yaml|peer-token): ).+$`)

func maskGenerated(manifest string) string {
	docs := docSeparator.Split(manifest, -1)
	for i, d := range docs {
		if regexp.MustCompile(`(?m)^kind: Secret$`).MatchString(d) {
			docs[i] = goldenMask.ReplaceAllString(d, `${1}"GENERATED"`)
		}
	}
	return strings.Join(docs, "---")
}

// checkGolden compares got with testdata/<name>, or rewrites it with -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "no golden file: run go test ./... -update")
	if !bytes.Equal(want, []byte(got)) {
		require.Equal(t, string(want), got, "%s is stale: review the diff, then run go test ./... -update", path)
	}
}

// keysOf returns the sorted keys of a map.
func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
