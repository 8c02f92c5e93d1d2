package charttest

import (
	"encoding/base64"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/fake"
)

// Values that turn on coalescing (docs/decisions/0054) and, with it, the
// routing of each connection's batches between the replicas (decision 0064).
const (
	coalesceInterval  = "coalesce: {interval: 100ms}"
	coalesceRouting   = "coalesce: {interval: 100ms, routing: {enabled: true}}"
	coalesceRoutingCA = "coalesce: {interval: 100ms, routing: {enabled: true, caSecret: peer-ca}}\ntls: {enabled: true, existingSecret: serving-cert}"
)

// peerSecret is the Secret the chart generates the peer token into.
const peerSecret = fullname + "-peer-token"

// peerTokenFile is where cooldownd reads the peer token, in the secrets volume.
const peerTokenFile = "/etc/cooldownd/peer-token"

// coalesceFlags returns the container's --coalesce-* flags.
func coalesceFlags(t *testing.T, args []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range flagsOf(t, args) {
		if strings.HasPrefix(k, "coalesce-") {
			out[k] = v
		}
	}
	return out
}

// podIPEnv returns the container's POD_IP variables.
func podIPEnv(c corev1.Container) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, e := range c.Env {
		if e.Name == "POD_IP" {
			out = append(out, e)
		}
	}
	return out
}

// secretsMount returns the container's mount of the secrets volume.
func secretsMount(t *testing.T, c corev1.Container) corev1.VolumeMount {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		if vm.Name == "secrets" {
			return vm
		}
	}
	require.Fail(t, "the secrets volume is not mounted")
	return corev1.VolumeMount{}
}

// TestCoalesceOffByDefault: coalescing is off unless coalesce.interval is a
// duration above 0, and routing is off unless asked for: no
// COOLDOWND_COALESCE_INTERVAL, no --coalesce-* flag, no POD_IP, no peer
// token Secret or file.
func TestCoalesceOffByDefault(t *testing.T) {
	t.Parallel()
	for name, values := range map[string]map[string]any{
		"default":        nil,
		"empty interval": parseValues(t, `coalesce: {interval: ""}`),
		"0 from --set":   setValues(t, "coalesce.interval=0"),
		"0s":             setValues(t, "coalesce.interval=0s"),
		"routing off":    parseValues(t, "coalesce: {routing: {enabled: false, existingSecret: my-peer}}"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := render(t, values)
			d, c := deployment(t, r)
			assert.Empty(t, coalesceFlags(t, c.Args), "no --coalesce-* flag")
			assert.Empty(t, podIPEnv(c), "no POD_IP")
			assert.NotContains(t, projectedFiles(t, d), "peer-token")
			assert.False(t, has[*corev1.Secret](r, peerSecret), "no peer token Secret")
			for _, s := range all[*corev1.Secret](r) {
				assert.NotContains(t, s.Data, "peer-token", "Secret %s", s.Name)
			}
			assert.NotContains(t, one[*corev1.ConfigMap](t, r, fullname).Data, "COOLDOWND_COALESCE_INTERVAL")
		})
	}
}

// TestCoalesceInterval: coalesce.interval reaches cooldownd as
// COOLDOWND_COALESCE_INTERVAL in the chart's ConfigMap (as the other server
// settings do, so a change rolls the pods through checksum/config), and
// routes nothing by itself.
func TestCoalesceInterval(t *testing.T) {
	t.Parallel()
	base, _ := deployment(t, render(t, nil))
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"values file", parseValues(t, coalesceInterval), "100ms"},
		{"--set", setValues(t, "coalesce.interval=250ms"), "250ms"},
		{"lowest", setValues(t, "coalesce.interval=10ms"), "10ms"},
		{"highest", setValues(t, "coalesce.interval=5s"), "5s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := render(t, tc.values)
			d, c := deployment(t, r)
			assert.Equal(t, tc.want, one[*corev1.ConfigMap](t, r, fullname).Data["COOLDOWND_COALESCE_INTERVAL"])
			assert.Empty(t, coalesceFlags(t, c.Args), "the interval comes from the ConfigMap only; no routing")
			assert.Empty(t, podIPEnv(c))
			assert.NotContains(t, projectedFiles(t, d), "peer-token")
			assert.False(t, has[*corev1.Secret](r, peerSecret))
			assert.NotEqual(t, base.Spec.Template.Annotations["checksum/config"], d.Spec.Template.Annotations["checksum/config"],
				"a change of coalesce.interval rolls the pods")
		})
	}
}

// TestCoalesceRouting: with coalesce.routing.enabled each replica names
// itself to the others by its pod IP (POD_IP from the downward API,
// expanded by Kubernetes in --coalesce-peer-address) on the container port
// the Service targets, and reads the token from the Secret the chart
// generates (32 random characters), projected read-only into /etc/cooldownd.
func TestCoalesceRouting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		values string
		port   string
	}{
		{"default port", coalesceRouting, "8080"},
		{"another port", coalesceRouting + "\ncontainerPort: 9000", "9000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := render(t, parseValues(t, tc.values))
			d, c := deployment(t, r)

			env := podIPEnv(c)
			require.Len(t, env, 1, "POD_IP once")
			assert.Empty(t, env[0].Value)
			require.NotNil(t, env[0].ValueFrom, "POD_IP from the downward API")
			require.NotNil(t, env[0].ValueFrom.FieldRef, "POD_IP from a fieldRef")
			assert.Equal(t, "status.podIP", env[0].ValueFrom.FieldRef.FieldPath)

			// The peer address is the serving port: the one the Service targets.
			require.Equal(t, "http", c.Ports[0].Name)
			assert.Equal(t, tc.port, itoa(c.Ports[0].ContainerPort))
			assert.Contains(t, c.Args, "--addr=:"+tc.port)
			svc := one[*corev1.Service](t, r, fullname)
			assert.Equal(t, c.Ports[0].Name, svc.Spec.Ports[0].TargetPort.String())
			assert.Equal(t, map[string]string{
				"coalesce-peer-address":    "$(POD_IP):" + tc.port,
				"coalesce-peer-token-file": peerTokenFile,
			}, coalesceFlags(t, c.Args), "--coalesce-* flags, and no CA without TLS")
			assert.Equal(t, "100ms", one[*corev1.ConfigMap](t, r, fullname).Data["COOLDOWND_COALESCE_INTERVAL"])

			// The token: projected read-only from the generated Secret.
			assert.Equal(t, peerSecret+"/peer-token", projectedFiles(t, d)["peer-token"])
			vm := secretsMount(t, c)
			assert.Equal(t, "/etc/cooldownd", vm.MountPath)
			assert.True(t, vm.ReadOnly)
			s := one[*corev1.Secret](t, r, peerSecret)
			assert.Equal(t, corev1.SecretTypeOpaque, s.Type)
			assert.Equal(t, []string{"peer-token"}, keysOf(s.Data))
			assert.Regexp(t, `^[A-Za-z0-9]{32}$`, string(s.Data["peer-token"]))
		})
	}
}

// TestCoalescePeerTokenDoesNotRollThePods: the generated token is random
// per render (helm template cannot look the old one up), so nothing in the
// pod template may depend on it: two renders give two tokens and the same
// pods.
func TestCoalescePeerTokenDoesNotRollThePods(t *testing.T) {
	t.Parallel()
	values := parseValues(t, coalesceRouting)
	r1, r2 := render(t, values), render(t, values)
	t1 := one[*corev1.Secret](t, r1, peerSecret).Data["peer-token"]
	t2 := one[*corev1.Secret](t, r2, peerSecret).Data["peer-token"]
	require.NotEqual(t, string(t1), string(t2), "a fresh token per render without a cluster")
	d1, _ := deployment(t, r1)
	d2, _ := deployment(t, r2)
	assert.Equal(t, d1.Spec.Template, d2.Spec.Template, "the pod template must not depend on the generated token")
}

// TestCoalescePeerTokenKeptOnUpgrade renders the peer Secret against a
// cluster that already holds it (Helm's lookup, as helm upgrade does): the
// token stays, so the replicas of one rollout and the next share it.
func TestCoalescePeerTokenKeptOnUpgrade(t *testing.T) {
	t.Parallel()
	const kept = "kept0123456789abcdefghijklmnopqr"
	existing := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Secret",
		"metadata":   map[string]any{"name": peerSecret, "namespace": namespace},
		"data":       map[string]any{"peer-token": base64.StdEncoding.EncodeToString([]byte(kept))},
	}}
	s := renderedPeerSecret(t, renderInCluster(t, parseValues(t, coalesceRouting), existing))
	assert.Equal(t, kept, string(s.Data["peer-token"]), "the token in the cluster is kept")

	// A Secret of another release in the namespace is not taken.
	other := existing.DeepCopy()
	other.SetName("other-cooldownd-peer-token")
	s = renderedPeerSecret(t, renderInCluster(t, parseValues(t, coalesceRouting), other))
	assert.NotEqual(t, kept, string(s.Data["peer-token"]))
	assert.Regexp(t, `^[A-Za-z0-9]{32}$`, string(s.Data["peer-token"]))
}

// renderedPeerSecret decodes templates/peer-secret.yaml from rendered templates.
func renderedPeerSecret(t *testing.T, out map[string]string) *corev1.Secret {
	t.Helper()
	src := "cooldownd/templates/peer-secret.yaml"
	require.Contains(t, out, src)
	ms := decodeAll(t, "# Source: "+src+"\n"+out[src])
	require.Len(t, ms, 1)
	s, ok := ms[0].Obj.(*corev1.Secret)
	require.True(t, ok, "%s renders a %s", src, ms[0].Kind)
	require.Equal(t, peerSecret, s.Name)
	return s
}

// renderInCluster renders the chart's templates as an upgrade of the
// release does, with Helm's lookup answered from objects (Secrets only, the
// one kind the chart looks up).
func renderInCluster(t *testing.T, values map[string]any, objects ...runtime.Object) map[string]string {
	t.Helper()
	ch := loadChart(t)
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kubeVersion
	opts := chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 2, IsUpgrade: true}
	vals, err := chartutil.ToRenderValues(ch, values, opts, caps)
	require.NoError(t, err)
	out, err := engine.RenderWithClientProvider(ch, vals, secretsProvider{t: t, objects: objects})
	require.NoError(t, err)
	return out
}

// secretsProvider answers Helm's lookup of Secrets from a fake cluster.
type secretsProvider struct {
	t       *testing.T
	objects []runtime.Object
}

func (p secretsProvider) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	require.Equal(p.t, "v1/Secret", path.Join(apiVersion, kind), "the chart looks up Secrets only")
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	return fake.NewSimpleDynamicClient(runtime.NewScheme(), p.objects...).Resource(gvr), true, nil
}

// TestCoalesceRoutingExistingSecret: with coalesce.routing.existingSecret
// the chart creates no token Secret and projects the named one's key.
func TestCoalesceRoutingExistingSecret(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		values string
		want   string
	}{
		{"with its key", features["coalesce-routing-existing"], "my-peer/token"},
		{"default key", "coalesce: {interval: 100ms, routing: {enabled: true, existingSecret: my-peer}}", "my-peer/peer-token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := render(t, parseValues(t, tc.values))
			d, c := deployment(t, r)
			assert.False(t, has[*corev1.Secret](r, peerSecret), "no generated Secret with existingSecret")
			for _, s := range all[*corev1.Secret](r) {
				assert.NotContains(t, s.Data, "peer-token", "Secret %s", s.Name)
			}
			assert.Equal(t, tc.want, projectedFiles(t, d)["peer-token"])
			assert.True(t, secretsMount(t, c).ReadOnly)
			assert.Equal(t, peerTokenFile, flagsOf(t, c.Args)["coalesce-peer-token-file"])
			assert.Equal(t, "$(POD_IP):8080", flagsOf(t, c.Args)["coalesce-peer-address"])
		})
	}
}

// TestCoalesceRoutingNeedsInterval: routing carries coalesced batches, so
// the chart refuses it without an interval (cooldownd would refuse to
// start), in the one VALUES VALIDATION failure.
func TestCoalesceRoutingNeedsInterval(t *testing.T) {
	t.Parallel()
	const want = "coalesce: coalesce.routing.enabled needs coalesce.interval (a duration in [10ms, 5s], such as 100ms): routing carries the coalesced batches"
	for name, values := range map[string]map[string]any{
		"no interval":    parseValues(t, "coalesce: {routing: {enabled: true}}"),
		"empty interval": parseValues(t, `coalesce: {interval: "", routing: {enabled: true, existingSecret: my-peer}}`),
		"0 from --set":   setValues(t, "coalesce.interval=0", "coalesce.routing.enabled=true"),
		"0s":             setValues(t, "coalesce.interval=0s", "coalesce.routing.enabled=true"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := tryRender(t, values)
			require.Error(t, err)
			assert.Contains(t, err.Error(), want)
			assert.Equal(t, 1, strings.Count(err.Error(), "VALUES VALIDATION"), "%v", err)
		})
	}
}

// TestCoalesceRoutingTLS: with TLS serving the replicas call one another
// over HTTPS; the chart passes nothing more (system roots) unless
// coalesce.routing.caSecret names a CA bundle, projected as peer-ca.crt.
func TestCoalesceRoutingTLS(t *testing.T) {
	t.Parallel()
	r := render(t, parseValues(t, coalesceRouting+"\ntls: {enabled: true, existingSecret: serving-cert}"))
	d, c := deployment(t, r)
	assert.Equal(t, map[string]string{"coalesce-peer-address": "$(POD_IP):8080", "coalesce-peer-token-file": peerTokenFile},
		coalesceFlags(t, c.Args))
	assert.NotContains(t, projectedFiles(t, d), "peer-ca.crt")

	r = render(t, parseValues(t, coalesceRoutingCA))
	d, c = deployment(t, r)
	assert.Equal(t, "/etc/cooldownd/peer-ca.crt", coalesceFlags(t, c.Args)["coalesce-peer-ca-file"])
	assert.Equal(t, "peer-ca/ca.crt", projectedFiles(t, d)["peer-ca.crt"])
}

// TestCoalesceRoutingNetworkPolicy: behind a NetworkPolicy that admits
// only labelled clients, routing admits the release's own replicas on the
// serving port (not on metrics) and, with egress restricted, lets them call
// one another there. Without routing they stay shut out.
func TestCoalesceRoutingNetworkPolicy(t *testing.T) {
	t.Parallel()
	const strict = "networkPolicy: {enabled: true, allowExternal: false, egress: {enabled: true}}"
	check := func(t *testing.T, values string, routed bool) {
		t.Helper()
		r := render(t, parseValues(t, values))
		d, _ := deployment(t, r)
		np := one[*networkingv1.NetworkPolicy](t, r, fullname)
		peer := d.Spec.Template.Labels
		assert.Equal(t, routed, ingressAdmits(t, np.Spec.Ingress, peer, "http"), "a replica reaches another's serving port")
		assert.False(t, ingressAdmits(t, np.Spec.Ingress, peer, "metrics"), "a replica reaches another's metrics port")
		if np.Spec.Egress != nil {
			assert.Equal(t, routed, egressAllows(t, np.Spec.Egress, peer, "http"), "a replica may call another's serving port")
		}
	}
	t.Run("strict", func(t *testing.T) {
		t.Parallel()
		check(t, coalesceRouting+"\n"+strict, true)
	})
	t.Run("strict without routing", func(t *testing.T) {
		t.Parallel()
		check(t, strict, false)
	})
	t.Run("strict ingress only", func(t *testing.T) {
		t.Parallel()
		check(t, coalesceRouting+"\nnetworkPolicy: {enabled: true, allowExternal: false}", true)
	})
	t.Run("all features", func(t *testing.T) {
		t.Parallel()
		r := render(t, ciValues(t, "all-features-values.yaml"))
		d, _ := deployment(t, r)
		np := one[*networkingv1.NetworkPolicy](t, r, fullname)
		assert.True(t, ingressAdmits(t, np.Spec.Ingress, d.Spec.Template.Labels, "http"))
		assert.True(t, egressAllows(t, np.Spec.Egress, d.Spec.Template.Labels, "http"))
	})
	t.Run("open", func(t *testing.T) {
		t.Parallel()
		r := render(t, parseValues(t, coalesceRouting+"\nnetworkPolicy: {enabled: true}"))
		d, _ := deployment(t, r)
		np := one[*networkingv1.NetworkPolicy](t, r, fullname)
		assert.True(t, ingressAdmits(t, np.Spec.Ingress, d.Spec.Template.Labels, "http"), "allowExternal admits the replicas too")
	})
}

// ingressAdmits reports whether a rule admits pods labelled pod in the
// release namespace on the named port.
func ingressAdmits(t *testing.T, rules []networkingv1.NetworkPolicyIngressRule, pod map[string]string, port string) bool {
	t.Helper()
	for _, rule := range rules {
		if portAllowed(rule.Ports, port) && peersInclude(t, rule.From, pod) {
			return true
		}
	}
	return false
}

// egressAllows reports whether a rule lets traffic out to pods labelled pod
// in the release namespace on the named port.
func egressAllows(t *testing.T, rules []networkingv1.NetworkPolicyEgressRule, pod map[string]string, port string) bool {
	t.Helper()
	for _, rule := range rules {
		if portAllowed(rule.Ports, port) && peersInclude(t, rule.To, pod) {
			return true
		}
	}
	return false
}

func portAllowed(ports []networkingv1.NetworkPolicyPort, name string) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if p.Port != nil && p.Port.String() == name {
			return true
		}
	}
	return false
}

// peersInclude: an empty peer list is everyone; a podSelector without a
// namespaceSelector is the policy's own namespace.
func peersInclude(t *testing.T, peers []networkingv1.NetworkPolicyPeer, pod map[string]string) bool {
	t.Helper()
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		if p.PodSelector != nil && p.NamespaceSelector == nil && p.IPBlock == nil && selects(t, p.PodSelector, pod) {
			return true
		}
	}
	return false
}

// TestCoalesceRoutingStartsCooldownd starts the real cooldownd with what
// the chart renders for routing (the ConfigMap's variables, the
// --coalesce-* flags with $(POD_IP) expanded and the Secret's token as the
// file): it must start. Without the interval the same flags must be
// refused, as the chart refuses them.
func TestCoalesceRoutingStartsCooldownd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs cooldownd")
	}
	t.Parallel()
	bin := cooldowndBinary(t)
	r := render(t, parseValues(t, coalesceRouting))
	_, c := deployment(t, r)
	env := one[*corev1.ConfigMap](t, r, fullname).Data
	tokenFile := filepath.Join(t.TempDir(), "peer-token")
	require.NoError(t, os.WriteFile(tokenFile, one[*corev1.Secret](t, r, peerSecret).Data["peer-token"], 0o600))
	var args []string
	for k, v := range coalesceFlags(t, c.Args) {
		v = strings.ReplaceAll(v, "$(POD_IP)", "127.0.0.1")
		v = strings.ReplaceAll(v, peerTokenFile, tokenFile)
		args = append(args, "--"+k+"="+v)
	}
	require.Len(t, args, 2)
	started, out := runCooldownd(t, bin, env, "", args...)
	assert.True(t, started, "cooldownd refuses the chart's routing:\n%s", out)

	off := map[string]string{}
	for k, v := range env {
		if k != "COOLDOWND_COALESCE_INTERVAL" {
			off[k] = v
		}
	}
	started, out = runCooldownd(t, bin, off, "", args...)
	assert.False(t, started, "cooldownd routes without an interval:\n%s", out)
}
