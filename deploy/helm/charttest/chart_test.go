package charttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// variants are the value sets every invariant is checked against: the
// defaults, each ci/*-values.yaml and each optional feature on its own.
func variants(t *testing.T) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{"default": nil}
	for _, name := range ciFiles(t) {
		out["ci/"+name] = ciValues(t, name)
	}
	for name, doc := range features {
		out["feature/"+name] = parseValues(t, doc)
	}
	return out
}

// features turn on one optional feature each (on top of the defaults).
var features = map[string]string{
	"hpa":                  "autoscaling: {enabled: true, minReplicas: 3, maxReplicas: 9}",
	"servicemonitor":       "metrics: {serviceMonitor: {enabled: true, namespace: monitoring, labels: {release: prom}}}",
	"networkpolicy":        "networkPolicy: {enabled: true}",
	"networkpolicy-strict": "networkPolicy: {enabled: true, allowExternal: false, egress: {enabled: true}}",
	"ingress":              "ingress: {enabled: true, className: nginx}",
	"tls":                  "tls: {enabled: true, existingSecret: serving-cert}",
	"salt":                 "salt: {value: 0123456789abcdef}",
	"salt-existing":        "salt: {existingSecret: my-salt, existingSecretKey: s}",
	"tokens-existing":      "auth: {existingSecret: my-tokens, existingSecretTokensKey: t.yaml}",
	"tokens-inline":        "auth: {tokens: [{name: a, tenant: t1, role: client, token: 0123456789abcdef}]}",
	"insecure-no-auth":     "auth: {insecureNoAuth: true}",
	"no-persistence":       "redis: {bundled: {persistence: {enabled: false}}}",
	"redis-existing-pw":    "redis: {bundled: {auth: {existingSecret: my-redis, existingSecretPasswordKey: pw}}}",
	"pdb-max-unavailable":  "podDisruptionBudget: {maxUnavailable: 25%}",
	"pdb-off":              "podDisruptionBudget: {enabled: false}",
	"no-serviceaccount":    "serviceAccount: {create: false}",
	"no-test":              "testFramework: {enabled: false}",
	"nodeport":             "service: {type: NodePort, nodePort: 30080}",
	"no-prestop":           "preStopSleepSeconds: 0",
	"long-name":            "fullnameOverride: a-very-long-release-name-that-is-exactly-at-the-sixty-three-limit",
	"no-memory-limit":      "resources: {limits: null}",
	"prometheusrule":       "metrics: {prometheusRule: {enabled: true, labels: {release: prom}}}",
	"grafana-dashboard":    "metrics: {grafanaDashboard: {enabled: true, annotations: {grafana_folder: cooldownd}}}",
	"policy-overrides":     policyOverrides,
	// Coalescing (decision 0054) and its routing between the replicas (decision 0064).
	"coalesce":                  coalesceInterval,
	"coalesce-routing":          coalesceRouting,
	"coalesce-routing-existing": "coalesce: {interval: 100ms, routing: {enabled: true, existingSecret: my-peer, secretKey: token}}",
	// With TLS, a peer CA and a strict NetworkPolicy: ci/all-features-values.yaml.
	// The policy file alone in the projected volume: no tokens, no Redis password.
	"policy-overrides-only-file": policyOverrides + `
auth: {insecureNoAuth: true}
redis: {bundled: {enabled: false}, external: {enabled: true, addrs: ["redis.db:6379"]}}`,
}

// policyOverrides sets policy.overrides, in the server's policy file format
// (docs/policies.md).
const policyOverrides = `
policy:
  overrides:
    default:
      open_max: 2m
      failure_rate: 0.25
    tenants:
      team-a:
        consecutive_failures: 3
        max_probes: 2
        labels:
          - match: "openai *"
            rate_limit_cooldown: 5s
          - match: "azure/*"
            quota_block: 24h
            jitter: 0
            trip_quorum: 2
            retry_budget_min: 10
      team-b:
        lease_ttl: 1m
        shadow: true
        throttle_k: 1.5
        fleet_window: 45s
`

// TestLint runs Helm's linter (chart metadata, values schema, templates)
// on the defaults and on every ci/ variant. Info messages (e.g. "icon is
// recommended") are allowed; warnings and errors are not.
func TestLint(t *testing.T) {
	t.Parallel()
	sets := map[string]map[string]any{"default": {}}
	for _, name := range ciFiles(t) {
		sets[name] = ciValues(t, name)
	}
	for name, vals := range sets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := lint.AllWithKubeVersion(chartDir, vals, namespace, kubeVersion)
			for _, m := range l.Messages {
				assert.Less(t, m.Severity, support.WarningSev, "lint: %s", m.Error())
			}
		})
	}
}

// TestInvariants renders every variant and checks what must always hold.
func TestInvariants(t *testing.T) {
	t.Parallel()
	for name, vals := range variants(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			checkInvariants(t, render(t, vals))
		})
	}
}

func checkInvariants(t *testing.T, r *rendered) {
	t.Helper()
	ds := all[*appsv1.Deployment](r)
	require.Len(t, ds, 1)
	d := ds[0]
	name := d.Name // fullname, or fullnameOverride
	require.Len(t, d.Spec.Template.Spec.Containers, 1)
	c := d.Spec.Template.Spec.Containers[0]
	podLabels := d.Spec.Template.Labels

	// Names fit DNS labels; every object carries the standard labels and
	// lives in the release namespace.
	for _, m := range append(append([]manifest{}, r.Manifests...), r.Hooks...) {
		assert.LessOrEqual(t, len(m.Name), 63, "%s %s: name too long", m.Kind, m.Name)
		assert.Regexp(t, `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`, m.Name)
		lbls := m.Obj.(interface{ GetLabels() map[string]string }).GetLabels()
		for _, k := range []string{"helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by"} {
			assert.Contains(t, lbls, k, "%s %s: label %s", m.Kind, m.Name, k)
		}
		if m.Kind != "ServiceMonitor" {
			assert.Equal(t, namespace, m.Obj.(interface{ GetNamespace() string }).GetNamespace(), "%s %s", m.Kind, m.Name)
		}
	}

	// The Deployment selects its own pods and keeps serving during rollouts.
	assert.True(t, selects(t, d.Spec.Selector, podLabels), "Deployment selector does not match its pods")
	require.Equal(t, appsv1.RollingUpdateDeploymentStrategyType, d.Spec.Strategy.Type)
	require.NotNil(t, d.Spec.Strategy.RollingUpdate)
	assert.Equal(t, intstr.FromInt32(0), *d.Spec.Strategy.RollingUpdate.MaxUnavailable)
	if hpas := all[*autoscalingv2.HorizontalPodAutoscaler](r); len(hpas) > 0 {
		assert.Nil(t, d.Spec.Replicas, "replicas must be left to the HPA")
		require.NotNil(t, hpas[0].Spec.MinReplicas)
		assert.GreaterOrEqual(t, *hpas[0].Spec.MinReplicas, int32(2))
		assert.Equal(t, "Deployment", hpas[0].Spec.ScaleTargetRef.Kind)
		assert.Equal(t, d.Name, hpas[0].Spec.ScaleTargetRef.Name)
	} else {
		require.NotNil(t, d.Spec.Replicas)
		assert.GreaterOrEqual(t, *d.Spec.Replicas, int32(2))
	}

	// Topology spread: every constraint selects these pods.
	require.NotEmpty(t, d.Spec.Template.Spec.TopologySpreadConstraints)
	for _, tsc := range d.Spec.Template.Spec.TopologySpreadConstraints {
		assert.True(t, selects(t, tsc.LabelSelector, podLabels), "topology spread on %s does not select the pods", tsc.TopologyKey)
	}

	// The Service targets the container's named port; the probes hit
	// /healthz (readiness, startup: Redis answers) and /livez (liveness:
	// the process serves) on that same port — both served by cooldownd.
	svc := one[*corev1.Service](t, r, name)
	assert.True(t, subset(svc.Spec.Selector, podLabels), "Service selector %v does not match pod labels %v", svc.Spec.Selector, podLabels)
	require.Len(t, svc.Spec.Ports, 1)
	sp := svc.Spec.Ports[0]
	assert.Equal(t, "http", sp.Name)
	require.Equal(t, intstr.FromString("http"), sp.TargetPort)
	require.NotEmpty(t, c.Ports)
	assert.Equal(t, "http", c.Ports[0].Name)
	assert.Contains(t, c.Args, "--addr=:"+itoa(c.Ports[0].ContainerPort), "cooldownd must listen on the container port")
	// With auth on, /metrics has a port of its own (TestMetricsPortWithAuth).
	if addr, ok := flagsOf(t, c.Args)["metrics-addr"]; ok {
		require.Len(t, c.Ports, 2)
		assert.Equal(t, "metrics", c.Ports[1].Name)
		assert.Equal(t, ":"+itoa(c.Ports[1].ContainerPort), addr, "cooldownd must serve /metrics on the metrics port")
	} else {
		require.Len(t, c.Ports, 1)
	}
	wantPath := map[string]string{"readiness": "/healthz", "liveness": "/livez", "startup": "/healthz"}
	for probeName, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
		require.NotNil(t, p, "%s probe", probeName)
		require.NotNil(t, p.HTTPGet, "%s probe is not httpGet", probeName)
		assert.Equal(t, wantPath[probeName], p.HTTPGet.Path, "%s probe path", probeName)
		assert.Equal(t, sp.TargetPort, p.HTTPGet.Port, "%s probe port is not the port the Service targets", probeName)
		wantScheme := corev1.URISchemeHTTP
		if _, ok := flagsOf(t, c.Args)["tls-cert-file"]; ok {
			wantScheme = corev1.URISchemeHTTPS
		}
		assert.Equal(t, wantScheme, p.HTTPGet.Scheme, "%s probe scheme", probeName)
	}

	// Hardening.
	checkHardened(t, d.Spec.Template.Spec, c, 65532)
	assert.False(t, *d.Spec.Template.Spec.AutomountServiceAccountToken)

	// Rolls on config changes.
	assert.Contains(t, d.Spec.Template.Annotations, "checksum/config")
	assert.Contains(t, d.Spec.Template.Annotations, "checksum/secret")

	// Policy and settings come from the chart's ConfigMap, all COOLDOWND_*.
	require.Len(t, c.EnvFrom, 1)
	require.NotNil(t, c.EnvFrom[0].ConfigMapRef)
	cm := one[*corev1.ConfigMap](t, r, c.EnvFrom[0].ConfigMapRef.Name)
	for k := range cm.Data {
		assert.True(t, strings.HasPrefix(k, "COOLDOWND_"), "ConfigMap key %s", k)
	}

	// The policy file is in a ConfigMap of its own, rendered, projected,
	// passed and checksummed exactly when the server is told to read it,
	// and never exported as environment.
	policyCM := name + "-policy"
	if len(policyCM) > 63 {
		policyCM = strings.TrimSuffix(name[:56], "-") + "-policy"
	}
	policyFile, policyFlag := flagsOf(t, c.Args)["policy-file"]
	assert.Equal(t, policyFlag, has[*corev1.ConfigMap](r, policyCM), "--policy-file is given iff ConfigMap %s is rendered", policyCM)
	_, policyChecksum := d.Spec.Template.Annotations["checksum/policy"]
	assert.Equal(t, policyFlag, policyChecksum, "checksum/policy is set iff --policy-file is given")
	for _, m := range all[*corev1.ConfigMap](r) {
		if _, ok := m.Data["policies.yaml"]; ok {
			assert.Equal(t, policyCM, m.Name, "policies.yaml is in ConfigMap %s", m.Name)
		}
	}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil {
			assert.NotEqual(t, policyCM, ef.ConfigMapRef.Name, "the policy ConfigMap is not envFrom")
		}
	}
	if policyFlag {
		assert.Equal(t, map[string]string{"policies.yaml": one[*corev1.ConfigMap](t, r, policyCM).Data["policies.yaml"]},
			one[*corev1.ConfigMap](t, r, policyCM).Data, "the policy ConfigMap holds policies.yaml only")
		assert.Equal(t, configMapRef+policyCM+"/policies.yaml", projectedFiles(t, d)[strings.TrimPrefix(policyFile, "/etc/cooldownd/")])
	}

	// Every file flag points into the projected Secret volume, every
	// projected file is used by a flag, and Secrets the chart renders hold
	// the projected keys.
	checkSecretFiles(t, r, d, c)

	// PodDisruptionBudget selects exactly these pods.
	for _, pdb := range all[*policyv1.PodDisruptionBudget](r) {
		assert.True(t, selects(t, pdb.Spec.Selector, podLabels), "PDB selector does not match the pods")
		assert.True(t, (pdb.Spec.MinAvailable == nil) != (pdb.Spec.MaxUnavailable == nil), "PDB sets exactly one of minAvailable, maxUnavailable")
	}

	// The bundled Redis, when present, is hardened, reachable through its
	// Service, and has the flush commands disabled.
	for _, sts := range all[*appsv1.StatefulSet](r) {
		checkBundledRedis(t, r, sts)
	}

	// The helm test hook calls the gRPC health handler through the Service.
	for _, h := range r.Hooks {
		pod, ok := h.Obj.(*corev1.Pod)
		require.True(t, ok, "unexpected hook %s", h.Kind)
		assert.Equal(t, "test", pod.Annotations["helm.sh/hook"])
		require.Len(t, pod.Spec.Containers, 1)
		script := strings.Join(pod.Spec.Containers[0].Command, " ")
		assert.Contains(t, script, "/grpc.health.v1.Health/Check")
		assert.Contains(t, script, "-X POST -H 'Content-Type: application/json' -d '{}'")
		assert.Contains(t, script, "://"+svc.Name+"."+namespace+".svc.cluster.local:"+itoa(sp.Port)+"/")
		assert.Contains(t, script, `SERVING_STATUS_SERVING`)
		assert.Equal(t, corev1.RestartPolicyNever, pod.Spec.RestartPolicy)
		checkHardened(t, pod.Spec, pod.Spec.Containers[0], 65532)
	}
}

// checkHardened checks the pod and container security contexts.
func checkHardened(t *testing.T, spec corev1.PodSpec, c corev1.Container, uid int64) {
	t.Helper()
	psc := spec.SecurityContext
	require.NotNil(t, psc, "pod securityContext")
	require.NotNil(t, psc.RunAsNonRoot)
	assert.True(t, *psc.RunAsNonRoot)
	require.NotNil(t, psc.RunAsUser)
	assert.Equal(t, uid, *psc.RunAsUser)
	require.NotNil(t, psc.SeccompProfile)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, psc.SeccompProfile.Type)
	sc := c.SecurityContext
	require.NotNil(t, sc, "container securityContext")
	require.NotNil(t, sc.ReadOnlyRootFilesystem)
	assert.True(t, *sc.ReadOnlyRootFilesystem)
	require.NotNil(t, sc.AllowPrivilegeEscalation)
	assert.False(t, *sc.AllowPrivilegeEscalation)
	require.NotNil(t, sc.Capabilities)
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	assert.Empty(t, sc.Capabilities.Add)
	assert.Nil(t, sc.Privileged)
	require.NotNil(t, c.Resources.Requests, "resources.requests")
	assert.False(t, c.Resources.Requests.Memory().IsZero(), "memory request")
}

func checkSecretFiles(t *testing.T, r *rendered, d *appsv1.Deployment, c corev1.Container) {
	t.Helper()
	files := projectedFiles(t, d)
	mounted := false
	for _, vm := range c.VolumeMounts {
		if vm.Name == "secrets" {
			mounted = true
			assert.Equal(t, "/etc/cooldownd", vm.MountPath)
			assert.True(t, vm.ReadOnly)
			assert.Empty(t, vm.SubPath, "a subPath mount would never see Secret updates")
		}
	}
	assert.Equal(t, len(files) > 0, mounted, "the secrets volume is mounted iff it has files")
	used := map[string]bool{}
	for name, v := range flagsOf(t, c.Args) {
		if !strings.HasSuffix(name, "-file") {
			continue
		}
		rel, ok := strings.CutPrefix(v, "/etc/cooldownd/")
		require.True(t, ok, "--%s=%s is not in the secrets volume", name, v)
		assert.Contains(t, files, rel, "--%s=%s is not projected", name, v)
		used[rel] = true
	}
	for path, ref := range files {
		assert.True(t, used[path], "projected file %s (%s) is not used by any flag", path, ref)
		if cmRef, ok := strings.CutPrefix(ref, configMapRef); ok {
			cmName, key, _ := strings.Cut(cmRef, "/")
			assert.Contains(t, one[*corev1.ConfigMap](t, r, cmName).Data, key, "ConfigMap %s lacks key %s", cmName, key)
			continue
		}
		secretName, key, _ := strings.Cut(ref, "/")
		if has[*corev1.Secret](r, secretName) {
			s := one[*corev1.Secret](t, r, secretName)
			assert.Contains(t, s.Data, key, "Secret %s lacks key %s", secretName, key)
		}
	}
}

func checkBundledRedis(t *testing.T, r *rendered, sts *appsv1.StatefulSet) {
	t.Helper()
	require.NotNil(t, sts.Spec.Replicas)
	assert.Equal(t, int32(1), *sts.Spec.Replicas)
	podLabels := sts.Spec.Template.Labels
	assert.True(t, selects(t, sts.Spec.Selector, podLabels))
	require.Len(t, sts.Spec.Template.Spec.Containers, 1)
	c := sts.Spec.Template.Spec.Containers[0]
	checkHardened(t, sts.Spec.Template.Spec, c, 999)
	assert.True(t, has[*corev1.Service](r, sts.Spec.ServiceName), "governing Service %s", sts.Spec.ServiceName)
	assert.Equal(t, corev1.ClusterIPNone, one[*corev1.Service](t, r, sts.Spec.ServiceName).Spec.ClusterIP)
	svc := one[*corev1.Service](t, r, sts.Name)
	assert.True(t, subset(svc.Spec.Selector, podLabels))
	assert.Equal(t, int32(6379), svc.Spec.Ports[0].Port)
	assert.Equal(t, intstr.FromString("redis"), svc.Spec.Ports[0].TargetPort)
	assert.Equal(t, "redis", c.Ports[0].Name)
	// The password never reaches the command line.
	env := envOf(c)
	assert.True(t, strings.HasPrefix(env["REDIS_PASSWORD"], "secret:"), "REDIS_PASSWORD from a Secret")
	assert.Equal(t, env["REDIS_PASSWORD"], env["REDISCLI_AUTH"])
	assert.NotContains(t, strings.Join(append(c.Command, c.Args...), " "), "--requirepass")
	// The password cooldownd reads is the one Redis requires.
	ds := all[*appsv1.Deployment](r)
	require.Len(t, ds, 1)
	cd := ds[0].Spec.Template.Spec.Containers[0]
	pw := projectedFiles(t, ds[0])["redis-password"]
	assert.Equal(t, "secret:"+pw, env["REDIS_PASSWORD"])
	assert.Contains(t, cd.Args, "--redis-addrs="+svc.Name+":6379")
	// Flush commands are disabled.
	conf := one[*corev1.ConfigMap](t, r, sts.Name).Data["redis.conf"]
	assert.Contains(t, conf, `rename-command FLUSHALL ""`)
	assert.Contains(t, conf, `rename-command FLUSHDB ""`)
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
		require.NotNil(t, p)
		require.NotNil(t, p.Exec)
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// TestRedisModes checks that each Redis topology reaches the container's
// flags and env exactly: nothing missing, nothing extra.
func TestRedisModes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		values    map[string]any
		flags     map[string]string // every --redis-* flag
		url       string            // COOLDOWND_REDIS_URL, "" for none
		password  string            // <secret>/<key> of the projected redis-password
		caFile    string            // <secret>/<key> of the projected redis-ca.crt
		bundledSS bool
	}{
		{
			name:   "bundled",
			values: nil,
			flags: map[string]string{
				"redis-mode": "single", "redis-addrs": "demo-cooldownd-redis:6379",
				"redis-password-file": "/etc/cooldownd/redis-password",
			},
			password:  "demo-cooldownd-redis/redis-password",
			bundledSS: true,
		},
		{
			name:   "bundled with existing password",
			values: parseValues(t, features["redis-existing-pw"]),
			flags: map[string]string{
				"redis-mode": "single", "redis-addrs": "demo-cooldownd-redis:6379",
				"redis-password-file": "/etc/cooldownd/redis-password",
			},
			password:  "my-redis/pw",
			bundledSS: true,
		},
		{
			name:   "single url",
			values: ciValues(t, "external-single-values.yaml"),
			flags: map[string]string{
				"redis-mode": "single", "redis-username": "cooldownd", "redis-tls": "",
				"redis-password-file": "/etc/cooldownd/redis-password",
			},
			url:      "rediss://redis.example.internal:6380/0",
			password: "cooldownd-redis/password",
		},
		{
			name: "single addr without password",
			values: parseValues(t, `
redis: {bundled: {enabled: false}, external: {enabled: true, addrs: ["redis.db:6379"], db: 3}}`),
			flags: map[string]string{"redis-mode": "single", "redis-addrs": "redis.db:6379", "redis-db": "3"},
		},
		{
			name:   "sentinel",
			values: ciValues(t, "sentinel-values.yaml"),
			flags: map[string]string{
				"redis-mode":          "sentinel",
				"redis-addrs":         "redis-sentinel-0.redis-sentinel:26379,redis-sentinel-1.redis-sentinel:26379,redis-sentinel-2.redis-sentinel:26379",
				"redis-master-name":   "mymaster",
				"redis-db":            "2",
				"redis-password-file": "/etc/cooldownd/redis-password",
			},
			password: "cooldownd-redis/redis-password",
		},
		{
			name:   "cluster",
			values: ciValues(t, "cluster-values.yaml"),
			flags: map[string]string{
				"redis-mode":          "cluster",
				"redis-addrs":         "redis-cluster-0.redis-cluster-headless:6379,redis-cluster-1.redis-cluster-headless:6379,redis-cluster-2.redis-cluster-headless:6379",
				"redis-username":      "cooldownd",
				"redis-tls":           "",
				"redis-tls-ca-file":   "/etc/cooldownd/redis-ca.crt",
				"redis-password-file": "/etc/cooldownd/redis-password",
			},
			password: "cooldownd-redis/redis-password",
			caFile:   "redis-ca/ca.crt",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := render(t, tc.values)
			d, c := deployment(t, r)
			assert.Equal(t, tc.flags, redisFlags(t, c.Args), "--redis-* flags")
			env := envOf(c)
			if tc.url == "" {
				assert.NotContains(t, env, "COOLDOWND_REDIS_URL")
			} else {
				assert.Equal(t, tc.url, env["COOLDOWND_REDIS_URL"])
			}
			assert.NotContains(t, env, "COOLDOWND_REDIS_PASSWORD", "the password comes from a file")
			files := projectedFiles(t, d)
			if tc.password == "" {
				assert.NotContains(t, files, "redis-password")
			} else {
				assert.Equal(t, tc.password, files["redis-password"])
			}
			if tc.caFile == "" {
				assert.NotContains(t, files, "redis-ca.crt")
			} else {
				assert.Equal(t, tc.caFile, files["redis-ca.crt"])
			}
			assert.Equal(t, tc.bundledSS, has[*appsv1.StatefulSet](r, "demo-cooldownd-redis"))
			assert.Equal(t, tc.bundledSS, has[*corev1.Service](r, "demo-cooldownd-redis"))
		})
	}
}

// TestGeneratedSecrets checks the bundled Redis password and the admin
// token the chart generates when none is given.
func TestGeneratedSecrets(t *testing.T) {
	t.Parallel()
	r := render(t, nil)
	pw := one[*corev1.Secret](t, r, "demo-cooldownd-redis").Data["redis-password"]
	assert.Regexp(t, `^[A-Za-z0-9]{32}$`, string(pw))

	s := one[*corev1.Secret](t, r, fullname)
	token := string(s.Data["admin-token"])
	assert.Regexp(t, `^[A-Za-z0-9]{40}$`, token)
	var file struct {
		Tokens []map[string]string `json:"tokens"`
	}
	require.NoError(t, yaml.UnmarshalStrict(s.Data["tokens.yaml"], &file))
	assert.Equal(t, []map[string]string{{"name": "generated-admin", "tenant": "default", "role": "admin", "token": token}}, file.Tokens)

	// Inline tokens are written as given, in the server's tokens file format.
	r = render(t, parseValues(t, features["tokens-inline"]))
	s = one[*corev1.Secret](t, r, fullname)
	assert.NotContains(t, s.Data, "admin-token")
	require.NoError(t, yaml.UnmarshalStrict(s.Data["tokens.yaml"], &file))
	assert.Equal(t, []map[string]string{{"name": "a", "tenant": "t1", "role": "client", "token": "0123456789abcdef"}}, file.Tokens)
}

// TestFeatures checks each optional feature's resources.
func TestFeatures(t *testing.T) {
	t.Parallel()
	feature := func(t *testing.T, name string) *rendered {
		t.Helper()
		return render(t, parseValues(t, features[name]))
	}
	base := render(t, nil)
	for _, kind := range []string{"HorizontalPodAutoscaler", "ServiceMonitor", "NetworkPolicy", "Ingress"} {
		for _, m := range base.Manifests {
			assert.NotEqual(t, kind, m.Kind, "%s is off by default", kind)
		}
	}

	t.Run("hpa", func(t *testing.T) {
		t.Parallel()
		r := feature(t, "hpa")
		h := one[*autoscalingv2.HorizontalPodAutoscaler](t, r, fullname)
		assert.Equal(t, int32(3), *h.Spec.MinReplicas)
		assert.Equal(t, int32(9), h.Spec.MaxReplicas)
		require.Len(t, h.Spec.Metrics, 1)
		assert.Equal(t, corev1.ResourceCPU, h.Spec.Metrics[0].Resource.Name)
		assert.Equal(t, int32(70), *h.Spec.Metrics[0].Resource.Target.AverageUtilization)
	})
	t.Run("servicemonitor", func(t *testing.T) {
		t.Parallel()
		r := feature(t, "servicemonitor")
		sm := one[*serviceMonitor](t, r, fullname)
		assert.Equal(t, "monitoring", sm.Namespace)
		assert.Equal(t, "prom", sm.Labels["release"])
		assert.Equal(t, []string{namespace}, sm.Spec.NamespaceSelector.MatchNames)
		// Auth is on by default, so /metrics has a Service of its own
		// (TestMetricsPortWithAuth).
		svc := one[*corev1.Service](t, r, fullname+"-metrics")
		assert.True(t, selects(t, &sm.Spec.Selector, svc.Labels), "ServiceMonitor does not select the Service")
		require.Len(t, sm.Spec.Endpoints, 1)
		assert.Equal(t, svc.Spec.Ports[0].Name, sm.Spec.Endpoints[0].Port)
		assert.Equal(t, "/metrics", sm.Spec.Endpoints[0].Path)
		assert.Equal(t, "http", sm.Spec.Endpoints[0].Scheme)
	})
	t.Run("networkpolicy", func(t *testing.T) {
		t.Parallel()
		r := feature(t, "networkpolicy")
		d, _ := deployment(t, r)
		np := one[*networkingv1.NetworkPolicy](t, r, fullname)
		assert.True(t, selects(t, &np.Spec.PodSelector, d.Spec.Template.Labels))
		assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)
		require.Len(t, np.Spec.Ingress, 1)
		assert.Empty(t, np.Spec.Ingress[0].From, "allowExternal accepts every peer")
		assert.Equal(t, intstr.FromString("http"), *np.Spec.Ingress[0].Ports[0].Port)
		// The bundled Redis only accepts cooldownd's pods.
		sts := one[*appsv1.StatefulSet](t, r, "demo-cooldownd-redis")
		rnp := one[*networkingv1.NetworkPolicy](t, r, "demo-cooldownd-redis")
		assert.True(t, selects(t, &rnp.Spec.PodSelector, sts.Spec.Template.Labels))
		assert.False(t, selects(t, &rnp.Spec.PodSelector, d.Spec.Template.Labels))
		require.Len(t, rnp.Spec.Ingress, 1)
		require.Len(t, rnp.Spec.Ingress[0].From, 1)
		assert.True(t, selects(t, rnp.Spec.Ingress[0].From[0].PodSelector, d.Spec.Template.Labels))
	})
	t.Run("networkpolicy-strict", func(t *testing.T) {
		t.Parallel()
		r := feature(t, "networkpolicy-strict")
		np := one[*networkingv1.NetworkPolicy](t, r, fullname)
		assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, np.Spec.PolicyTypes)
		require.Len(t, np.Spec.Ingress[0].From, 1)
		// The helm test pod is a permitted client.
		require.Len(t, r.Hooks, 1)
		test := r.Hooks[0].Obj.(*corev1.Pod)
		assert.True(t, selects(t, np.Spec.Ingress[0].From[0].PodSelector, test.Labels), "the test pod is blocked")
		// Egress: DNS and the bundled Redis.
		require.Len(t, np.Spec.Egress, 2)
		sts := one[*appsv1.StatefulSet](t, r, "demo-cooldownd-redis")
		assert.True(t, selects(t, np.Spec.Egress[1].To[0].PodSelector, sts.Spec.Template.Labels))
	})
	t.Run("ingress", func(t *testing.T) {
		t.Parallel()
		r := feature(t, "ingress")
		ing := one[*networkingv1.Ingress](t, r, fullname)
		assert.Equal(t, "nginx", *ing.Spec.IngressClassName)
		require.Len(t, ing.Spec.Rules, 1)
		assert.Equal(t, "cooldownd.example.com", ing.Spec.Rules[0].Host)
		p := ing.Spec.Rules[0].HTTP.Paths[0]
		assert.Equal(t, "/", p.Path)
		assert.Equal(t, fullname, p.Backend.Service.Name)
		assert.Equal(t, "http", p.Backend.Service.Port.Name)
	})
	t.Run("tls", func(t *testing.T) {
		t.Parallel()
		r := feature(t, "tls")
		d, c := deployment(t, r)
		f := flagsOf(t, c.Args)
		assert.Equal(t, "/etc/cooldownd/tls/tls.crt", f["tls-cert-file"])
		assert.Equal(t, "/etc/cooldownd/tls/tls.key", f["tls-key-file"])
		files := projectedFiles(t, d)
		assert.Equal(t, "serving-cert/tls.crt", files["tls/tls.crt"])
		assert.Equal(t, "serving-cert/tls.key", files["tls/tls.key"])
		assert.Equal(t, corev1.URISchemeHTTPS, c.ReadinessProbe.HTTPGet.Scheme)
		script := strings.Join(r.Hooks[0].Obj.(*corev1.Pod).Spec.Containers[0].Command, " ")
		assert.Contains(t, script, "https://demo-cooldownd.")
	})
	t.Run("salt", func(t *testing.T) {
		t.Parallel()
		r := feature(t, "salt")
		d, c := deployment(t, r)
		// The salt is for the applications: cooldownd derives no ids.
		assert.NotContains(t, flagsOf(t, c.Args), "salt-file")
		assert.NotContains(t, projectedFiles(t, d), "salt")
		assert.Equal(t, "0123456789abcdef", string(one[*corev1.Secret](t, r, fullname).Data["salt"]))

		r = feature(t, "salt-existing")
		assert.NotContains(t, one[*corev1.Secret](t, r, fullname).Data, "salt")
	})
	t.Run("tokens-existing", func(t *testing.T) {
		t.Parallel()
		r := feature(t, "tokens-existing")
		d, c := deployment(t, r)
		assert.Equal(t, "/etc/cooldownd/tokens.yaml", flagsOf(t, c.Args)["tokens-file"])
		assert.Equal(t, "my-tokens/t.yaml", projectedFiles(t, d)["tokens.yaml"])
		assert.False(t, has[*corev1.Secret](r, fullname), "no chart Secret when every secret exists")
	})
	t.Run("insecure-no-auth", func(t *testing.T) {
		t.Parallel()
		r := feature(t, "insecure-no-auth")
		d, c := deployment(t, r)
		f := flagsOf(t, c.Args)
		assert.Contains(t, f, "insecure-no-auth")
		assert.NotContains(t, f, "tokens-file")
		assert.NotContains(t, projectedFiles(t, d), "tokens.yaml")
		assert.False(t, has[*corev1.Secret](r, fullname))
	})
	t.Run("no-persistence", func(t *testing.T) {
		t.Parallel()
		r := feature(t, "no-persistence")
		sts := one[*appsv1.StatefulSet](t, r, "demo-cooldownd-redis")
		assert.Empty(t, sts.Spec.VolumeClaimTemplates)
		var data *corev1.Volume
		for i, v := range sts.Spec.Template.Spec.Volumes {
			if v.Name == "data" {
				data = &sts.Spec.Template.Spec.Volumes[i]
			}
		}
		require.NotNil(t, data)
		assert.NotNil(t, data.EmptyDir)
		conf := one[*corev1.ConfigMap](t, r, "demo-cooldownd-redis").Data["redis.conf"]
		assert.Contains(t, conf, "appendonly no")

		// With persistence: a claim template named like the mount, and AOF on.
		r = render(t, nil)
		sts = one[*appsv1.StatefulSet](t, r, "demo-cooldownd-redis")
		require.Len(t, sts.Spec.VolumeClaimTemplates, 1)
		assert.Equal(t, "data", sts.Spec.VolumeClaimTemplates[0].Name)
		assert.Equal(t, "1Gi", sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String())
		conf = one[*corev1.ConfigMap](t, r, "demo-cooldownd-redis").Data["redis.conf"]
		assert.Contains(t, conf, "appendonly yes")
	})
	t.Run("pdb", func(t *testing.T) {
		t.Parallel()
		pdb := one[*policyv1.PodDisruptionBudget](t, base, fullname)
		assert.Equal(t, intstr.FromInt32(1), *pdb.Spec.MinAvailable)
		pdb = one[*policyv1.PodDisruptionBudget](t, feature(t, "pdb-max-unavailable"), fullname)
		assert.Nil(t, pdb.Spec.MinAvailable)
		assert.Equal(t, intstr.FromString("25%"), *pdb.Spec.MaxUnavailable)
		assert.False(t, has[*policyv1.PodDisruptionBudget](feature(t, "pdb-off"), fullname))
	})
	t.Run("serviceaccount", func(t *testing.T) {
		t.Parallel()
		d, _ := deployment(t, base)
		assert.Equal(t, fullname, d.Spec.Template.Spec.ServiceAccountName)
		assert.True(t, has[*corev1.ServiceAccount](base, fullname))
		r := feature(t, "no-serviceaccount")
		d, _ = deployment(t, r)
		assert.Equal(t, "default", d.Spec.Template.Spec.ServiceAccountName)
		assert.Empty(t, all[*corev1.ServiceAccount](r))
	})
	t.Run("nodeport", func(t *testing.T) {
		t.Parallel()
		svc := one[*corev1.Service](t, feature(t, "nodeport"), fullname)
		assert.Equal(t, corev1.ServiceTypeNodePort, svc.Spec.Type)
		assert.Equal(t, int32(30080), svc.Spec.Ports[0].NodePort)
	})
	t.Run("no-test", func(t *testing.T) {
		t.Parallel()
		assert.Empty(t, feature(t, "no-test").Hooks)
	})
	t.Run("long-name", func(t *testing.T) {
		t.Parallel()
		r := feature(t, "long-name")
		for _, m := range r.Manifests {
			assert.LessOrEqual(t, len(m.Name), 63, m.Name)
		}
		override := "a-very-long-release-name-that-is-exactly-at-the-sixty-three-limit"
		require.True(t, has[*appsv1.Deployment](r, override[:63]), "fullname is truncated to 63")
		assert.True(t, has[*corev1.Service](r, strings.TrimSuffix(override[:57], "-")+"-redis"), "derived names keep their suffix")
		assert.True(t, has[*corev1.Service](r, strings.TrimSuffix(override[:48], "-")+"-redis-headless"))
	})
	t.Run("gomemlimit", func(t *testing.T) {
		t.Parallel()
		_, c := deployment(t, base)
		assert.Equal(t, "241591910", envOf(c)["GOMEMLIMIT"], "90 %% of the default 256Mi")
		for limit, want := range map[string]string{
			"1Gi": "966367641", "512M": "460800000", "1.5Gi": "1449551462", "268435456": "241591910", "100Ki": "92160",
		} {
			_, c := deployment(t, render(t, setValues(t, "resources.limits.memory="+limit)))
			assert.Equal(t, want, envOf(c)["GOMEMLIMIT"], "limit %s", limit)
		}
		_, err := tryRender(t, setValues(t, "resources.limits.memory=1Pi"))
		require.ErrorContains(t, err, `resources.limits.memory "1Pi" is not a memory quantity`)
		_, c = deployment(t, feature(t, "no-memory-limit"))
		assert.NotContains(t, envOf(c), "GOMEMLIMIT")
	})
	t.Run("policy-overrides", func(t *testing.T) {
		t.Parallel()
		const path = "/etc/cooldownd/policy/policies.yaml"
		const policyCM = fullname + "-policy"
		checksum := func(r *rendered, name string) string {
			d, _ := deployment(t, r)
			return d.Spec.Template.Annotations["checksum/"+name]
		}

		// Off by default: no policy ConfigMap, no key, no file, no flag, no
		// checksum (the golden file pins the rest).
		d, c := deployment(t, base)
		assert.False(t, has[*corev1.ConfigMap](base, policyCM))
		assert.NotContains(t, one[*corev1.ConfigMap](t, base, fullname).Data, "policies.yaml")
		assert.NotContains(t, flagsOf(t, c.Args), "policy-file")
		assert.NotContains(t, projectedFiles(t, d), "policy/policies.yaml")
		assert.NotContains(t, d.Spec.Template.Annotations, "checksum/policy")

		r := feature(t, "policy-overrides")
		d, c = deployment(t, r)
		assert.Equal(t, path, flagsOf(t, c.Args)["policy-file"])

		// The file is in its own ConfigMap (labelled like the server's),
		// not in the server's: that one is the container's envFrom, and
		// would export the file as a variable named policies.yaml.
		server := one[*corev1.ConfigMap](t, r, fullname)
		assert.NotContains(t, server.Data, "policies.yaml")
		assert.Equal(t, one[*corev1.ConfigMap](t, base, fullname).Data, server.Data, "overrides leave the server's ConfigMap alone")
		pcm := one[*corev1.ConfigMap](t, r, policyCM)
		assert.Equal(t, server.Labels, pcm.Labels)
		assert.Equal(t, []string{"policies.yaml"}, keysOf(pcm.Data))
		assert.Empty(t, pcm.BinaryData)
		require.Len(t, c.EnvFrom, 1)
		for _, ef := range c.EnvFrom {
			assert.Nil(t, ef.SecretRef)
			require.NotNil(t, ef.ConfigMapRef)
			assert.Equal(t, fullname, ef.ConfigMapRef.Name)
			assert.NotEqual(t, policyCM, ef.ConfigMapRef.Name)
		}
		for _, e := range c.Env {
			assert.NotEqual(t, "policies.yaml", e.Name)
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				assert.NotEqual(t, policyCM, e.ValueFrom.ConfigMapKeyRef.Name)
			}
		}

		// The file holds the overrides as given, in a form the server's
		// strict decoder accepts: snake_case knobs, integers as integers,
		// durations as strings.
		data := pcm.Data["policies.yaml"]
		require.NotEmpty(t, data)
		var file policyFile
		require.NoError(t, yaml.UnmarshalStrict([]byte(data), &file), "policies.yaml:\n%s", data)
		ptr := func(v string) *string { return &v }
		assert.Equal(t, policyFile{
			Default: policyKnobs{OpenMax: ptr("2m"), FailureRate: new(0.25)},
			Tenants: map[string]policyTenant{
				"team-a": {
					policyKnobs: policyKnobs{ConsecutiveFailures: new(3), MaxProbes: new(2)},
					Labels: []policyLabelRule{
						{Match: "openai *", policyKnobs: policyKnobs{RateLimitCooldown: ptr("5s")}},
						{Match: "azure/*", policyKnobs: policyKnobs{QuotaBlock: ptr("24h"), Jitter: new(0.0), TripQuorum: new(2), RetryBudgetMin: new(10)}},
					},
				},
				"team-b": {policyKnobs: policyKnobs{LeaseTTL: ptr("1m"), Shadow: new(true), ThrottleK: new(1.5), FleetWindow: ptr("45s")}},
			},
		}, file)
		var asGiven, back map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(policyOverrides), &asGiven))
		require.NoError(t, yaml.Unmarshal([]byte(data), &back))
		assert.Equal(t, asGiven["policy"].(map[string]any)["overrides"], back, "policies.yaml is policy.overrides verbatim")

		// Mounted read-only from the policy ConfigMap through the projected
		// volume (the root filesystem is read-only).
		assert.Equal(t, configMapRef+policyCM+"/policies.yaml", projectedFiles(t, d)["policy/policies.yaml"])
		var mount *corev1.VolumeMount
		for i, vm := range c.VolumeMounts {
			if vm.Name == "secrets" {
				mount = &c.VolumeMounts[i]
			}
		}
		require.NotNil(t, mount)
		assert.True(t, mount.ReadOnly)
		assert.True(t, strings.HasPrefix(path, mount.MountPath+"/"))

		// The server reads the file at start only: any change rolls the pods,
		// through checksum/policy (the server's ConfigMap, hence
		// checksum/config, does not change).
		assert.NotEmpty(t, checksum(r, "policy"))
		assert.Equal(t, checksum(base, "config"), checksum(r, "config"))
		changed := render(t, parseValues(t, strings.Replace(policyOverrides, "open_max: 2m", "open_max: 3m", 1)))
		assert.NotEqual(t, checksum(r, "policy"), checksum(changed, "policy"))
		assert.Equal(t, checksum(r, "policy"), checksum(feature(t, "policy-overrides"), "policy"), "the same overrides keep the pods")

		// Without any Secret file the volume holds the policy file alone.
		r = feature(t, "policy-overrides-only-file")
		d, c = deployment(t, r)
		assert.Equal(t, map[string]string{"policy/policies.yaml": configMapRef + policyCM + "/policies.yaml"}, projectedFiles(t, d))
		assert.Equal(t, path, flagsOf(t, c.Args)["policy-file"])
		require.Len(t, c.VolumeMounts, 1)
		assert.Equal(t, "/etc/cooldownd", c.VolumeMounts[0].MountPath)

		// A file far over the 128 KiB an environment variable may hold
		// renders: it never becomes one.
		rules := strings.Repeat("{match: 'a-rather-long-label-pattern/*', rate_limit_cooldown: 5s}, ", 4000)
		r = render(t, parseValues(t, "policy: {overrides: {tenants: {team-a: {labels: ["+rules+"]}}}}"))
		assert.Greater(t, len(one[*corev1.ConfigMap](t, r, policyCM).Data["policies.yaml"]), 200000)

		// A long release name keeps the suffix within 63 characters.
		r = render(t, parseValues(t, features["long-name"]+"\n"+policyOverrides))
		ds := all[*appsv1.Deployment](r)
		require.Len(t, ds, 1)
		d = ds[0]
		long := strings.TrimSuffix(d.Name[:56], "-") + "-policy"
		assert.Len(t, long, 63)
		assert.True(t, has[*corev1.ConfigMap](r, long))
		assert.Equal(t, configMapRef+long+"/policies.yaml", projectedFiles(t, d)["policy/policies.yaml"])
	})
	t.Run("prestop", func(t *testing.T) {
		t.Parallel()
		_, c := deployment(t, base)
		require.NotNil(t, c.Lifecycle)
		assert.Equal(t, int64(5), c.Lifecycle.PreStop.Sleep.Seconds)
		_, c = deployment(t, feature(t, "no-prestop"))
		assert.Nil(t, c.Lifecycle)
	})
}

// TestPolicyConfigMap checks that policy values reach the COOLDOWND_*
// variables the server reads, with numbers in a form Go's flag parsing
// accepts (no 1e+06).
func TestPolicyConfigMap(t *testing.T) {
	t.Parallel()
	cm := one[*corev1.ConfigMap](t, render(t, ciValues(t, "all-features-values.yaml")), fullname)
	assert.Equal(t, "3", cm.Data["COOLDOWND_CONSECUTIVE_FAILURES"])
	assert.Equal(t, "5s", cm.Data["COOLDOWND_OPEN_BASE"])
	assert.Equal(t, "0", cm.Data["COOLDOWND_JITTER"])
	assert.Equal(t, "2000000", cm.Data["COOLDOWND_MAX_CONNECTIONS_PER_TENANT"])
	assert.Equal(t, "0.5", cm.Data["COOLDOWND_FAILURE_RATE"])
	assert.Equal(t, "2", cm.Data["COOLDOWND_THROTTLE_K"])
	assert.Equal(t, "2", cm.Data["COOLDOWND_TRIP_QUORUM"])
	assert.Equal(t, "1m", cm.Data["COOLDOWND_FLEET_WINDOW"])
	assert.Equal(t, "true", cm.Data["COOLDOWND_SHADOW"])
	assert.Equal(t, "0.2", cm.Data["COOLDOWND_RETRY_BUDGET"], "the default")
	assert.Equal(t, "3", cm.Data["COOLDOWND_RETRY_BUDGET_MIN"], "the default")

	// Every policy value in values.yaml has its variable.
	vals, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "values.yaml"))
	require.NoError(t, err)
	policy, err := vals.Table("policy")
	require.NoError(t, err)
	cm = one[*corev1.ConfigMap](t, render(t, nil), fullname)
	// leaseTTLMax is LEASE_TTL_MAX: a word starts at a capital after a lower
	// case letter, and at the last capital of an acronym followed by lower case.
	camel := regexp.MustCompile(`([a-z0-9])([A-Z])`)
	acronym := regexp.MustCompile(`([A-Z])([A-Z][a-z])`)
	for k := range policy {
		if k == "overrides" {
			continue // the policy file, not a variable (TestFeatures/policy-overrides)
		}
		words := acronym.ReplaceAllString(camel.ReplaceAllString(k, "${1}_${2}"), "${1}_${2}")
		env := "COOLDOWND_" + strings.ToUpper(words)
		assert.Contains(t, cm.Data, env, "policy.%s", k)
	}
}

// TestValidateValues checks that wrong values fail with a message that names
// the values to change, and that all problems are reported at once.
func TestValidateValues(t *testing.T) {
	t.Parallel()
	const external = "redis: {bundled: {enabled: false}, external: {enabled: true"
	cases := []struct {
		name   string
		values string
		want   []string
	}{
		{"bundled and external", "redis: {external: {enabled: true, addrs: [r:6379]}}",
			[]string{"redis.bundled.enabled and redis.external.enabled are both true"}},
		{"no redis", "redis: {bundled: {enabled: false}}",
			[]string{"enable redis.bundled (a trial Redis in the release) or redis.external"}},
		{"single without address", external + "}}",
			[]string{"redis.external.mode=single needs redis.external.url (redis://host:6379/0) or redis.external.addrs"}},
		{"single with url and addrs", external + ", url: 'redis://r:6379', addrs: [r:6379]}}",
			[]string{"takes redis.external.url or redis.external.addrs, not both"}},
		{"single with two addrs", external + ", addrs: [a:1, b:2]}}",
			[]string{"takes one address in redis.external.addrs"}},
		{"password in url", external + ", url: 'redis://user:hunter2@r:6379/0'}}",
			[]string{"redis.external.url must not contain a password"}},
		{"sentinel without master", external + ", mode: sentinel, addrs: [s:26379]}}",
			[]string{"redis.external.mode=sentinel needs redis.external.masterName"}},
		{"sentinel without addrs", external + ", mode: sentinel, masterName: m}}",
			[]string{"redis.external.mode=sentinel needs redis.external.addrs"}},
		{"sentinel with url", external + ", mode: sentinel, masterName: m, addrs: [s:26379], url: 'redis://r:1'}}",
			[]string{"redis.external.url is for mode=single"}},
		{"cluster without addrs", external + ", mode: cluster}}",
			[]string{"redis.external.mode=cluster needs redis.external.addrs"}},
		{"cluster with db", external + ", mode: cluster, addrs: [c:6379], db: 1}}",
			[]string{"redis.external.db must be 0 with mode=cluster"}},
		{"master name outside sentinel", external + ", mode: cluster, addrs: [c:6379], masterName: m}}",
			[]string{"redis.external.masterName is only for mode=sentinel"}},
		{"bad address", external + ", mode: cluster, addrs: ['c']}}",
			[]string{`redis.external.addrs entry "c" is not host:port`}},
		{"ca without tls", external + ", addrs: [r:6379], tls: {existingCASecret: ca}}}",
			[]string{"redis.external.tls.existingCASecret needs redis.external.tls.enabled=true"}},
		{"no auth at all", "auth: {generateAdminToken: false}",
			[]string{"auth: give bearer tokens in auth.existingSecret", "or set auth.insecureNoAuth=true"}},
		{"insecure with tokens", "auth: {insecureNoAuth: true, existingSecret: t}",
			[]string{"auth.insecureNoAuth=true contradicts auth.tokens / auth.existingSecret"}},
		{"bad token entries", "auth: {tokens: [{name: a, tenant: Bad!, role: admin, token: short}, {tenant: t, role: admin}]}",
			[]string{"auth.tokens[0].tenant must match", "auth.tokens[0].token must be at least 16 bytes",
				"auth.tokens[1].name is required", "auth.tokens[1]: token or sha256 is required"}},
		{"token and sha256", "auth: {tokens: [{name: a, tenant: t, role: admin, token: 0123456789abcdef, sha256: abc}]}",
			[]string{"auth.tokens[0]: give token or sha256, not both"}},
		{"bad sha256", "auth: {tokens: [{name: a, tenant: t, role: admin, sha256: abc}]}",
			[]string{"auth.tokens[0].sha256 must be 64 hex characters"}},
		{"short salt", "salt: {value: short}",
			[]string{"salt.value must be 16 to 1024 bytes, got 5"}},
		{"tls without secret", "tls: {enabled: true}",
			[]string{"tls.enabled=true needs tls.existingSecret"}},
		{"pdb without budget", "podDisruptionBudget: {minAvailable: null}",
			[]string{"set podDisruptionBudget.minAvailable or podDisruptionBudget.maxUnavailable"}},
		{"hpa min above max", "autoscaling: {enabled: true, minReplicas: 5, maxReplicas: 3}",
			[]string{"autoscaling.minReplicas (5) is above autoscaling.maxReplicas (3)"}},
		{"hpa without metric", "autoscaling: {enabled: true, targetCPUUtilizationPercentage: null}",
			[]string{"set autoscaling.targetCPUUtilizationPercentage or autoscaling.targetMemoryUtilizationPercentage"}},
		{"ingress without hosts", "ingress: {enabled: true, hosts: []}",
			[]string{"ingress.enabled=true needs ingress.hosts"}},
		{"coalesce interval below 10ms", "coalesce: {interval: 9ms}",
			[]string{"coalesce.interval must be empty or 0 (off), or in [10ms, 5s] (--coalesce-interval), got 9ms"}},
		{"coalesce routing without interval", "coalesce: {routing: {enabled: true}}",
			[]string{"coalesce.routing.enabled needs coalesce.interval"}},
		{"coalesce CA without routing or TLS", "coalesce: {interval: 100ms, routing: {caSecret: ca}}",
			[]string{"coalesce.routing.caSecret needs coalesce.routing.enabled=true", "coalesce.routing.caSecret needs tls.enabled=true"}},
		{"coalesce CA without TLS", "coalesce: {interval: 100ms, routing: {enabled: true, caSecret: ca}}",
			[]string{"coalesce.routing.caSecret needs tls.enabled=true"}},
		{"egress to unknown redis", "networkPolicy: {enabled: true, egress: {enabled: true}}\n" + external + ", addrs: [r:6379]}}",
			[]string{"networkPolicy.egress.enabled with redis.external needs networkPolicy.egress.extraEgress"}},
		{"policy file too large for a ConfigMap", "policy: {overrides: {tenants: {team-a: {labels: [" +
			strings.Repeat("{match: 'a-rather-long-label-pattern/*', rate_limit_cooldown: 5s}, ", 20000) + "]}}}}",
			[]string{"policy: policy.overrides renders to a", "-byte policies.yaml", "1 MiB"}},
		{"all problems at once", "redis: {external: {enabled: true, addrs: [r:6379]}}\nauth: {generateAdminToken: false}\ntls: {enabled: true}",
			[]string{"redis.bundled.enabled and redis.external.enabled are both true", "auth: give bearer tokens", "tls.enabled=true needs tls.existingSecret"}},

		// The schema catches typos and wrong types before any template runs.
		{"schema: unknown key", "replicas: 3",
			[]string{"additional properties 'replicas' not allowed"}},
		{"schema: nested unknown key", "redis: {external: {masterNmae: m}}",
			[]string{"additional properties 'masterNmae' not allowed"}},
		{"schema: bad mode", "redis: {external: {mode: ring}}",
			[]string{"/redis/external/mode"}},
		{"schema: one replica is allowed but zero is not", "replicaCount: 0",
			[]string{"/replicaCount", "minimum"}},
		{"schema: bad duration", "policy: {openBase: ten}",
			[]string{"/policy/openBase"}},
		{"schema: unknown policy knob", "policy: {overrides: {default: {open_maximum: 2m}}}",
			[]string{"/policy/overrides/default", "additional properties 'open_maximum' not allowed"}},
		{"schema: camelCase policy knob", "policy: {overrides: {tenants: {team-a: {openMax: 2m}}}}",
			[]string{"/policy/overrides/tenants/team-a", "additional properties 'openMax' not allowed"}},
		{"schema: unknown knob in a label rule", "policy: {overrides: {tenants: {team-a: {labels: [{match: x, cooldown: 5s}]}}}}",
			[]string{"/policy/overrides/tenants/team-a/labels/0", "additional properties 'cooldown' not allowed"}},
		{"schema: unknown overrides section", "policy: {overrides: {tenant: {team-a: {}}}}",
			[]string{"/policy/overrides", "additional properties 'tenant' not allowed"}},
		{"schema: label rule without match", "policy: {overrides: {tenants: {team-a: {labels: [{quota_block: 1h}]}}}}",
			[]string{"/policy/overrides/tenants/team-a/labels/0", "'match'"}},
		{"schema: policy knob types", "policy: {overrides: {default: {open_max: 120, consecutive_failures: 2.5, failure_rate: high}}}",
			[]string{"/policy/overrides/default/open_max", "/policy/overrides/default/consecutive_failures", "/policy/overrides/default/failure_rate"}},
		{"schema: max_probes in a label rule (per tenant only)", "policy: {overrides: {tenants: {team-a: {max_probes: 2, labels: [{match: 'openai *'}, {match: 'azure/*', max_probes: 4}]}}}}",
			[]string{"at '/policy/overrides/tenants/team-a/labels/1': additional properties 'max_probes' not allowed"}},
		{"schema: bad tenant name", "policy: {overrides: {tenants: {Team_A: {max_probes: 2}}}}",
			[]string{"/policy/overrides/tenants", "additional properties 'Team_A' not allowed"}},
		{"schema: coalesce interval not a duration", "coalesce: {interval: fast}",
			[]string{"/coalesce/interval"}},
		{"schema: coalesce routing typo", "coalesce: {routing: {enable: true}}",
			[]string{"additional properties 'enable' not allowed"}},
		{"schema: empty coalesce secret key", "coalesce: {routing: {secretKey: ''}}",
			[]string{"/coalesce/routing/secretKey"}},
		{"schema: bad role", "auth: {tokens: [{name: a, tenant: t, role: root, token: 0123456789abcdef}]}",
			[]string{"/auth/tokens/0/role"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tryRender(t, parseValues(t, tc.values))
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			if !strings.HasPrefix(tc.name, "schema:") {
				assert.Equal(t, 1, strings.Count(err.Error(), "VALUES VALIDATION"), "one failure with every message: %v", err)
			}
		})
	}
}

// TestNotes renders NOTES.txt (through Helm's engine, as install does) and
// checks the URL and the warnings against the values.
func TestNotes(t *testing.T) {
	t.Parallel()
	const (
		authWarning  = "WARNING: AUTHENTICATION IS OFF"
		tlsWarning   = "WARNING: TLS TO REDIS IS OFF"
		pwWarning    = "WARNING: no Redis password"
		outside      = "reachable from outside the cluster"
		bundledNote  = "the bundled Redis is one pod without failover"
		replicasWarn = "WARNING: replicaCount is 1"
		shadowNote   = "NOTE: policy.shadow=true: the policy runs in shadow mode"
	)
	cases := []struct {
		name    string
		values  map[string]any
		want    []string
		notWant []string
	}{
		{"default", nil,
			[]string{"http://demo-cooldownd.cooldownd.svc.cluster.local:8080", bundledNote,
				"kubectl --namespace cooldownd port-forward svc/demo-cooldownd 8080:8080",
				"kubectl get secret --namespace cooldownd demo-cooldownd -o jsonpath='{.data.admin-token}' | base64 -d",
				"/grpc.health.v1.Health/Check"},
			[]string{"WARNING", shadowNote}},
		{"shadow", parseValues(t, "policy: {shadow: true}"),
			[]string{shadowNote, "denies no call for it; operator\noverrides are still enforced"}, []string{"WARNING"}},
		{"insecure", parseValues(t, features["insecure-no-auth"]),
			[]string{authWarning}, []string{outside, tlsWarning, "admin-token"}},
		{"insecure load balancer", parseValues(t, "auth: {insecureNoAuth: true}\nservice: {type: LoadBalancer}"),
			[]string{authWarning, outside, "export SERVICE_IP"}, nil},
		{"external without tls", parseValues(t, "redis: {bundled: {enabled: false}, external: {enabled: true, addrs: [r:6379]}}"),
			[]string{tlsWarning, pwWarning, "external, mode single"}, []string{authWarning, bundledNote}},
		{"external single rediss", ciValues(t, "external-single-values.yaml"),
			[]string{"external, mode single, rediss://redis.example.internal:6380/0"}, []string{"WARNING"}},
		{"sentinel without tls", ciValues(t, "sentinel-values.yaml"),
			[]string{tlsWarning, "master mymaster"}, []string{pwWarning}},
		{"cluster with tls", ciValues(t, "cluster-values.yaml"),
			[]string{"external, mode cluster"}, []string{"WARNING"}},
		{"tls and ingress", ciValues(t, "all-features-values.yaml"),
			[]string{"https://demo-cooldownd.cooldownd.svc.cluster.local:8080", "https://cooldownd.example.com/"}, []string{"WARNING"}},
		{"one replica", parseValues(t, "replicaCount: 1"),
			[]string{replicasWarn, "PodDisruptionBudget blocks node drains"}, nil},
		{"servicemonitor behind a strict network policy", parseValues(t, "metrics: {serviceMonitor: {enabled: true}}\nnetworkPolicy: {enabled: true, allowExternal: false}"),
			[]string{"Prometheus cannot scrape /metrics", "networkPolicy.extraIngress: [{namespaceSelector:"}, nil},
		{"servicemonitor with prometheus allowed", ciValues(t, "all-features-values.yaml"),
			nil, []string{"Prometheus cannot scrape"}},
		{"custom domain and port", parseValues(t, "clusterDomain: k8s.internal\nservice: {port: 9090}"),
			[]string{"http://demo-cooldownd.cooldownd.svc.k8s.internal:9090"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			notes := render(t, tc.values).Notes
			for _, w := range tc.want {
				assert.Contains(t, notes, w)
			}
			for _, w := range tc.notWant {
				assert.NotContains(t, notes, w)
			}
		})
	}
}

// TestValuesDocumented checks that every key in values.yaml is described in
// values.schema.json (which rejects unknown keys), down to the free-form
// Kubernetes objects, and that values.yaml carries the yaml-language-server
// header.
func TestValuesDocumented(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(raw), "# yaml-language-server: $schema=values.schema.json\n"))
	var values map[string]any
	require.NoError(t, yaml.Unmarshal(raw, &values))
	schemaRaw, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	require.NoError(t, err)
	var schema map[string]any
	require.NoError(t, json.Unmarshal(schemaRaw, &schema))
	assert.Equal(t, false, schema["additionalProperties"])
	var walk func(path string, v any, s map[string]any)
	walk = func(path string, v any, s map[string]any) {
		m, ok := v.(map[string]any)
		if !ok || s["additionalProperties"] != false {
			return // a leaf, or a free-form Kubernetes object
		}
		props, _ := s["properties"].(map[string]any)
		for k, child := range m {
			p, ok := props[k].(map[string]any)
			if !assert.True(t, ok, "%s%s is not in values.schema.json", path, k) {
				continue
			}
			assert.NotEmpty(t, p["description"], "%s%s has no description in values.schema.json", path, k)
			walk(path+k+".", child, p)
		}
	}
	walk("", values, schema)

	// And every key line in values.yaml has a comment right above it, or is
	// inside a documented default (lists and free-form objects).
	lines := strings.Split(string(raw), "\n")
	key := regexp.MustCompile(`^( *)([A-Za-z][A-Za-z0-9]*):`)
	documented := map[int]bool{} // indentation levels whose parent is free-form
	for i, line := range lines {
		m := key.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		indent := len(m[1])
		for lvl := range documented {
			if lvl >= indent {
				delete(documented, lvl)
			}
		}
		parentFree := false
		for lvl := range documented {
			if lvl < indent {
				parentFree = true
			}
		}
		if parentFree {
			continue
		}
		prev := strings.TrimSpace(lines[i-1])
		isSection := strings.HasSuffix(strings.TrimSpace(line), ":")
		if strings.HasPrefix(prev, "#") {
			// The comment block above starts with "# --": a documented value. When the
			// value is an object, its children are its default and need no comments.
			j := i - 1
			for j > 0 && strings.HasPrefix(strings.TrimSpace(lines[j-1]), "#") {
				j--
			}
			if isSection && strings.HasPrefix(strings.TrimSpace(lines[j]), "# --") {
				documented[indent] = true
			}
			continue
		}
		assert.True(t, isSection, "values.yaml:%d: %q has no comment above it", i+1, strings.TrimSpace(line))
	}
}

// policyFile mirrors the server's --policy-file format (internal/policy,
// docs/policies.md) for a strict decode of the rendered policies.yaml.
type policyFile struct {
	Default policyKnobs             `json:"default"`
	Tenants map[string]policyTenant `json:"tenants"`
}

type policyKnobs struct {
	ConsecutiveFailures *int     `json:"consecutive_failures,omitempty"`
	FailureRate         *float64 `json:"failure_rate,omitempty"`
	MinCalls            *int     `json:"min_calls,omitempty"`
	Window              *string  `json:"window,omitempty"`
	OpenBase            *string  `json:"open_base,omitempty"`
	OpenMax             *string  `json:"open_max,omitempty"`
	Jitter              *float64 `json:"jitter,omitempty"`
	RateLimitCooldown   *string  `json:"rate_limit_cooldown,omitempty"`
	OverloadFloor       *string  `json:"overload_floor,omitempty"`
	QuotaBlock          *string  `json:"quota_block,omitempty"`
	AuthBlock           *string  `json:"auth_block,omitempty"`
	MaxProbes           *int     `json:"max_probes,omitempty"`
	LeaseTTL            *string  `json:"lease_ttl,omitempty"`
	RetryBudget         *float64 `json:"retry_budget,omitempty"`
	RetryBudgetMin      *int     `json:"retry_budget_min,omitempty"`
	ThrottleK           *float64 `json:"throttle_k,omitempty"`
	TripQuorum          *int     `json:"trip_quorum,omitempty"`
	FleetWindow         *string  `json:"fleet_window,omitempty"`
	Shadow              *bool    `json:"shadow,omitempty"`
}

type policyTenant struct {
	policyKnobs `json:",inline"`
	Labels      []policyLabelRule `json:"labels,omitempty"`
}

type policyLabelRule struct {
	Match       string `json:"match"`
	policyKnobs `json:",inline"`
}
