package charttest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const proxyName = fullname + "-proxy"

// TestProxyOffByDefault: the proxy is opt-in.
func TestProxyOffByDefault(t *testing.T) {
	t.Parallel()
	r := render(t, nil)
	assert.False(t, has[*appsv1.Deployment](r, proxyName))
	assert.False(t, has[*corev1.Service](r, proxyName))
	assert.False(t, has[*corev1.ConfigMap](r, proxyName))
}

// TestProxyRenders: proxy.enabled renders a Deployment running the image's
// /cooldown-proxy against the release's cooldownd, its routes and
// fallbacks in a ConfigMap, and a Service that selects the proxy pods only.
func TestProxyRenders(t *testing.T) {
	t.Parallel()
	r := render(t, parseValues(t, `
proxy:
  enabled: true
  fallbacks:
    gpt-4o: [{model: gpt-4o-mini}]
  tokenSecret: {name: proxy-token}
`))
	d := one[*appsv1.Deployment](t, r, proxyName)
	require.Len(t, d.Spec.Template.Spec.Containers, 1)
	c := d.Spec.Template.Spec.Containers[0]
	assert.Equal(t, []string{"/cooldown-proxy"}, c.Command)
	flags := flagsOf(t, c.Args)
	assert.Equal(t, "0.0.0.0:8081", flags["listen"])
	assert.Equal(t, "/etc/cooldown-proxy/config.yaml", flags["config"])
	assert.Equal(t, "/etc/cooldown-proxy/fallbacks.yaml", flags["fallback-file"])
	_, server := deployment(t, r)
	assert.Equal(t, server.Image, c.Image, "the chart's image holds both binaries")
	env := envOf(c)
	assert.Contains(t, env, "COOLDOWN_TOKEN")
	require.NotNil(t, c.ReadinessProbe)
	assert.Equal(t, "/healthz", c.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, int64(65), *d.Spec.Template.Spec.TerminationGracePeriodSeconds, "outlasts the shutdown timeout")

	cm := one[*corev1.ConfigMap](t, r, proxyName)
	var cfg map[string]any
	require.NoError(t, yaml.UnmarshalStrict([]byte(cm.Data["config.yaml"]), &cfg))
	assert.Equal(t, "http://"+fullname+"."+namespace+".svc.cluster.local:8080", cfg["cooldownd"])
	assert.Equal(t, []any{"/anthropic=https://api.anthropic.com", "/openai=https://api.openai.com"}, cfg["route"])
	assert.Equal(t, true, cfg["mirror"])
	assert.Equal(t, "60s", cfg["shutdown-timeout"])
	var fb map[string][]map[string]string
	require.NoError(t, yaml.UnmarshalStrict([]byte(cm.Data["fallbacks.yaml"]), &fb))
	assert.Equal(t, map[string][]map[string]string{"gpt-4o": {{"model": "gpt-4o-mini"}}}, fb)

	svc := one[*corev1.Service](t, r, proxyName)
	assert.Equal(t, "proxy", svc.Spec.Selector["app.kubernetes.io/component"])
	assert.True(t, subset(svc.Spec.Selector, d.Spec.Template.Labels), "the proxy Service selects the proxy pods")
	main := one[*corev1.Service](t, r, fullname)
	assert.False(t, subset(main.Spec.Selector, d.Spec.Template.Labels), "cooldownd's Service never selects a proxy pod")
}

// TestProxyValuesAreChecked: the schema refuses a malformed route.
func TestProxyValuesAreChecked(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"route without a scheme": "proxy: {enabled: true, routes: {/openai: api.openai.com}}",
		"prefix without a slash": "proxy: {enabled: true, routes: {openai: https://api.openai.com}}",
		"unknown key":            "proxy: {enabled: true, listen: 0.0.0.0:1}",
	} {
		_, err := tryRender(t, parseValues(t, doc))
		assert.Error(t, err, name)
	}
}
