package charttest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// exportedMetrics reads the metric names cooldownd exports from its source
// (internal/server/metrics.go: Name: "..." and NewDesc("...")), with the
// series names Prometheus derives for histograms.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "internal", "server", "metrics.go"))
	require.NoError(t, err)
	out := map[string]bool{}
	re := regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(cooldownd_[a-z_]+)"`)
	for _, m := range re.FindAllSubmatch(src, -1) {
		name := string(m[1])
		out[name] = true
		if strings.HasSuffix(name, "_seconds") {
			for _, s := range []string{"_bucket", "_count", "_sum"} {
				out[name+s] = true
			}
		}
	}
	require.Contains(t, out, "cooldownd_connections_open", "the metric names could not be read from metrics.go")
	return out
}

// kubeStateMetrics are the kube-state-metrics series the alerts may use.
var kubeStateMetrics = []string{"kube_deployment_status_replicas_ready", "kube_deployment_spec_replicas"}

// TestPrometheusRule renders the optional alerts and checks each one: its
// expression uses only metrics cooldownd (or kube-state-metrics) exports,
// selects this release's series, is balanced, and its knobs reach it.
func TestPrometheusRule(t *testing.T) {
	t.Parallel()
	assert.Empty(t, all[*prometheusRule](render(t, nil)), "off by default")

	metrics := exportedMetrics(t)
	r := render(t, parseValues(t, `
metrics:
  prometheusRule:
    enabled: true
    namespace: monitoring
    labels: {release: prom}
    openFor: 30m
    expiredLeases: 7
    errorRatio: 0.1
    additionalLabels: {team: platform}
    extraRules: [{alert: Mine, expr: vector(1)}]
`))
	pr := one[*prometheusRule](t, r, fullname)
	assert.Equal(t, "monitoring", pr.Namespace)
	assert.Equal(t, "prom", pr.Labels["release"])
	require.Len(t, pr.Spec.Groups, 1)
	rules := pr.Spec.Groups[0].Rules
	byName := map[string]int{}
	for i, rule := range rules {
		byName[rule.Alert] = i
	}
	for _, name := range []string{"CooldowndConnectionOpenTooLong", "CooldowndProbeLeasesExpiring", "CooldowndRedisErrors", "CooldowndReplicasNotReady", "Mine"} {
		require.Contains(t, byName, name)
	}
	series := regexp.MustCompile(`\b(cooldownd_[a-z_]+|kube_[a-z_]+)\s*\{([^}]*)\}`)
	for _, rule := range rules {
		if rule.Alert == "Mine" {
			continue
		}
		t.Run(rule.Alert, func(t *testing.T) {
			assert.Equal(t, strings.Count(rule.Expr, "("), strings.Count(rule.Expr, ")"), "parentheses: %s", rule.Expr)
			assert.Equal(t, strings.Count(rule.Expr, "{"), strings.Count(rule.Expr, "}"), "braces: %s", rule.Expr)
			found := series.FindAllStringSubmatch(rule.Expr, -1)
			require.NotEmpty(t, found, rule.Expr)
			for _, m := range found {
				if strings.HasPrefix(m[1], "kube_") {
					assert.Contains(t, kubeStateMetrics, m[1])
					assert.Contains(t, m[2], `namespace="cooldownd",deployment="demo-cooldownd"`)
				} else {
					assert.True(t, metrics[m[1]], "%s is not a metric cooldownd exports", m[1])
					assert.Contains(t, m[2], `namespace="cooldownd",service="demo-cooldownd"`)
				}
			}
			assert.NotEmpty(t, rule.For)
			assert.Contains(t, []string{"warning", "critical"}, rule.Labels["severity"])
			assert.Equal(t, "platform", rule.Labels["team"])
			assert.NotEmpty(t, rule.Annotations["summary"])
			assert.NotEmpty(t, rule.Annotations["description"])
			for _, a := range rule.Annotations {
				// Helm must leave Prometheus's own template actions in place.
				assert.NotContains(t, a, "<no value>")
			}
		})
	}
	open := rules[byName["CooldowndConnectionOpenTooLong"]]
	assert.Equal(t, "30m", open.For)
	assert.Contains(t, open.Expr, `cause!="forced"`, "an admin's force-open is deliberate")
	assert.Contains(t, open.Annotations["summary"], "{{ $labels.tenant }}")
	assert.Contains(t, rules[byName["CooldowndProbeLeasesExpiring"]].Expr, "> 7")
	assert.Contains(t, rules[byName["CooldowndRedisErrors"]].Expr, "> 0.1")
	assert.Equal(t, "critical", rules[byName["CooldowndRedisErrors"]].Labels["severity"])

	// A custom selector and a disabled alert.
	r = render(t, parseValues(t, `metrics: {prometheusRule: {enabled: true, selector: 'job="cd"', disabled: [CooldowndReplicasNotReady]}}`))
	pr = one[*prometheusRule](t, r, fullname)
	assert.Equal(t, namespace, pr.Namespace)
	names := []string{}
	for _, rule := range pr.Spec.Groups[0].Rules {
		names = append(names, rule.Alert)
		assert.Contains(t, rule.Expr, `{job="cd"`)
	}
	assert.NotContains(t, names, "CooldowndReplicasNotReady")
	assert.Len(t, names, 3)

	_, err := tryRender(t, parseValues(t, `metrics: {prometheusRule: {enabled: true, disabled: [NoSuchAlert]}}`))
	require.ErrorContains(t, err, "/metrics/prometheusRule/disabled/0")
}

// TestGrafanaDashboard checks the optional dashboard ConfigMap: the chart's
// copy is docs/grafana/cooldownd.json byte for byte, it is rendered whole
// and valid, with the sidecar's label.
func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	docs, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "grafana", "cooldownd.json"))
	require.NoError(t, err)
	chartCopy, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "cooldownd.json"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(docs, chartCopy),
		"deploy/helm/cooldownd/dashboards/cooldownd.json differs from docs/grafana/cooldownd.json: copy the docs version over it")

	name := fullname + "-grafana-dashboard"
	assert.False(t, has[*corev1.ConfigMap](render(t, nil), name), "off by default")
	r := render(t, parseValues(t, features["grafana-dashboard"]))
	cm := one[*corev1.ConfigMap](t, r, name)
	assert.Equal(t, "1", cm.Labels["grafana_dashboard"])
	assert.Equal(t, "cooldownd", cm.Annotations["grafana_folder"])
	got := cm.Data["cooldownd.json"]
	assert.Equal(t, strings.TrimSpace(string(docs)), got)
	var dash struct {
		UID    string           `json:"uid"`
		Panels []map[string]any `json:"panels"`
	}
	require.NoError(t, json.Unmarshal([]byte(got), &dash))
	assert.NotEmpty(t, dash.UID)
	assert.NotEmpty(t, dash.Panels)

	// Every cooldownd metric the dashboard queries exists.
	metrics := exportedMetrics(t)
	for _, m := range slices.Compact(slices.Sorted(slices.Values(regexp.MustCompile(`cooldownd_[a-z_]+`).FindAllString(got, -1)))) {
		assert.True(t, metrics[m], "the dashboard queries %s, which cooldownd does not export", m)
	}

	r = render(t, parseValues(t, `metrics: {grafanaDashboard: {enabled: true, namespace: grafana, labels: {dash: "yes"}}}`))
	cm = one[*corev1.ConfigMap](t, r, name)
	assert.Equal(t, "grafana", cm.Namespace)
	assert.Equal(t, "yes", cm.Labels["dash"])
}
