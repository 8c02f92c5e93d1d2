package charttest

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestMetricsPortWithAuth: with auth on (the default), cooldownd refuses
// /metrics on its API port (it names every tenant; decision 0044), so the
// chart serves it on a port of its own (--metrics-addr, container port
// metrics, a ClusterIP Service <fullname>-metrics whatever service.type) and
// the ServiceMonitor, the scrape annotations and the NetworkPolicy use that
// port, over plain HTTP even when the API has TLS. With auth.insecureNoAuth
// the chart renders what it always did: /metrics on the http port.
func TestMetricsPortWithAuth(t *testing.T) {
	t.Parallel()
	monitored := "metrics: {scrapeAnnotations: true, serviceMonitor: {enabled: true}}\nnetworkPolicy: {enabled: true}\n"
	tests := []struct {
		name       string
		values     string
		separate   bool
		port       string // the scrape's port name
		portNumber string // prometheus.io/port
		scheme     string
	}{
		{"auth on (generated token)", monitored, true, "metrics", "9090", "http"},
		{"auth on, tokens, TLS, LoadBalancer", monitored + "auth: {tokens: [{name: a, tenant: team-a, role: client, token: 0123456789abcdef0123}]}\n" +
			"tls: {enabled: true, existingSecret: tls}\nservice: {type: LoadBalancer}\n", true, "metrics", "9090", "http"},
		{"auth on, another port", "metrics: {port: 9464, scrapeAnnotations: true, serviceMonitor: {enabled: true}}\nnetworkPolicy: {enabled: true}\n", true, "metrics", "9464", "http"},
		{"auth off", monitored + "auth: {insecureNoAuth: true}\n", false, "http", "8080", "http"},
		{"auth off, TLS", monitored + "auth: {insecureNoAuth: true}\ntls: {enabled: true, existingSecret: tls}\n", false, "http", "8080", "https"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := render(t, parseValues(t, tt.values))
			d, c := deployment(t, r)
			flags := flagsOf(t, c.Args)
			api := one[*corev1.Service](t, r, fullname)
			require.Len(t, api.Spec.Ports, 1, "the API Service has the http port only")
			assert.Equal(t, "http", api.Spec.Ports[0].Name)
			sm := one[*serviceMonitor](t, r, fullname)
			require.Len(t, sm.Spec.Endpoints, 1)
			ep := sm.Spec.Endpoints[0]
			assert.Equal(t, tt.port, ep.Port)
			assert.Equal(t, "/metrics", ep.Path)
			assert.Equal(t, tt.scheme, ep.Scheme)
			ann := d.Spec.Template.Annotations
			assert.Equal(t, "true", ann["prometheus.io/scrape"])
			assert.Equal(t, tt.portNumber, ann["prometheus.io/port"])
			assert.Equal(t, "/metrics", ann["prometheus.io/path"])
			assert.Equal(t, tt.scheme, ann["prometheus.io/scheme"])
			np := one[*networkingv1.NetworkPolicy](t, r, fullname)
			var npPorts []string
			for _, p := range np.Spec.Ingress[0].Ports {
				npPorts = append(npPorts, p.Port.String())
			}
			containerPorts := map[string]int32{}
			for _, p := range c.Ports {
				containerPorts[p.Name] = p.ContainerPort
			}

			if !tt.separate {
				assert.NotContains(t, flags, "metrics-addr")
				assert.False(t, has[*corev1.Service](r, fullname+"-metrics"))
				assert.NotContains(t, containerPorts, "metrics")
				assert.True(t, selects(t, &sm.Spec.Selector, api.Labels), "the ServiceMonitor scrapes the API Service")
				assert.Equal(t, []string{"http"}, npPorts)
				assert.Contains(t, r.Notes, "/metrics and /healthz")
				return
			}
			assert.Equal(t, ":"+tt.portNumber, flags["metrics-addr"])
			assert.Equal(t, tt.portNumber, itoa(containerPorts["metrics"]))
			ms := one[*corev1.Service](t, r, fullname+"-metrics")
			assert.Equal(t, "http://"+ms.Name+"."+namespace+".svc.cluster.local:"+tt.portNumber+"/metrics", metricsURL.FindString(r.Notes), "NOTES.txt names the metrics URL")
			assert.Equal(t, corev1.ServiceTypeClusterIP, ms.Spec.Type, "the metrics never leave the cluster")
			require.Len(t, ms.Spec.Ports, 1)
			assert.Equal(t, "metrics", ms.Spec.Ports[0].Name)
			assert.Equal(t, tt.portNumber, itoa(ms.Spec.Ports[0].Port))
			assert.Equal(t, intstr.FromString("metrics"), ms.Spec.Ports[0].TargetPort)
			assert.True(t, selects(t, &metav1.LabelSelector{MatchLabels: ms.Spec.Selector}, d.Spec.Template.Labels), "the metrics Service selects the pods")
			assert.True(t, selects(t, &sm.Spec.Selector, ms.Labels), "the ServiceMonitor scrapes the metrics Service")
			assert.False(t, selects(t, &sm.Spec.Selector, api.Labels), "the ServiceMonitor does not scrape the API Service")
			assert.Empty(t, ep.TLSConfig, "the metrics listener is plain HTTP")
			assert.Equal(t, []string{"http", "metrics"}, npPorts)
			assert.NotContains(t, r.Notes, "/metrics and /healthz")
		})
	}
}

var metricsURL = regexp.MustCompile(`http://\S+/metrics`)

// TestMetricsPortValidation: the metrics port must be a port, and not the
// API's (cooldownd refuses --metrics-addr equal to --addr).
func TestMetricsPortValidation(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, values, want string }{
		{"the API's port", "metrics: {port: 8080}", "metrics.port (8080) must differ from containerPort"},
		{"the API's port, moved", "containerPort: 9090", "metrics.port (9090) must differ from containerPort"},
		{"zero", "metrics: {port: 0}", "metrics"},
		{"too high", "metrics: {port: 70000}", "metrics"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tryRender(t, parseValues(t, tt.values))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	// Without auth the port is not used, and not checked against the API's.
	render(t, parseValues(t, "auth: {insecureNoAuth: true}\nmetrics: {port: 8080}"))
}
