package charttest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// boundsCase is a set of values and whether cooldownd accepts them. Each
// case is given as `helm --set` strings (sets) or a values document (doc).
type boundsCase struct {
	name string
	sets []string
	doc  string
	// refused: the chart must fail with every one of these; empty: the chart
	// renders and cooldownd starts.
	refused []string
}

// boundsCases hold the binary's own limits (internal/breaker Policy.Validate,
// cmd/cooldownd config.validate, internal/policy Parse) at and just past
// each edge.
var boundsCases = []boundsCase{
	{name: "defaults"},
	{name: "window 20m", sets: []string{"policy.window=20m"},
		refused: []string{"policy.window must be in [1ms, 10m] while policy.failureRate is on, got 20m", "cooldownd would refuse to start"}},
	{name: "window 10m", sets: []string{"policy.window=10m"}},
	{name: "window 20m with the rate rule off", sets: []string{"policy.window=20m", "policy.failureRate=0"}},
	{name: "openBase above openMax", sets: []string{"policy.openBase=10m"},
		refused: []string{"policy.openMax (5m) must be at least policy.openBase (10m)"}},
	{name: "openBase equal to openMax", sets: []string{"policy.openBase=5m"}},
	{name: "openBase 0", sets: []string{"policy.openBase=0"},
		refused: []string{"policy.openBase must be positive, got 0"}},
	{name: "idleTTL 30s", sets: []string{"config.idleTTL=30s"},
		refused: []string{"config.idleTTL must be at least 1m (--idle-ttl), got 30s"}},
	{name: "idleTTL 1m", sets: []string{"config.idleTTL=1m"}},
	{name: "minCalls 0", sets: []string{"policy.minCalls=0"},
		refused: []string{"policy.minCalls must be in [1, 100000] while policy.failureRate is on, got 0"}},
	{name: "minCalls 0 with the rate rule off", sets: []string{"policy.minCalls=0", "policy.failureRate=0"}},
	{name: "minCalls above the counter cap", sets: []string{"policy.minCalls=100001"}, refused: []string{"/policy/minCalls"}},
	{name: "decimal failureRate from --set", sets: []string{"policy.failureRate=0.25"}},
	{name: "decimal jitter from --set", sets: []string{"policy.jitter=0.999"}},
	{name: "jitter 1", sets: []string{"policy.jitter=1"}, refused: []string{"/policy/jitter"}},
	{name: "jitter 1.0 from --set", sets: []string{"policy.jitter=1.0"}, refused: []string{"policy.jitter must be in [0, 1), got 1.0"}},
	{name: "failureRate 1", sets: []string{"policy.failureRate=1"}},
	{name: "failureRate above 1 from --set", sets: []string{"policy.failureRate=1.5"},
		refused: []string{"policy.failureRate must be in (0, 1] or 0 to disable the rule, got 1.5"}},
	{name: "failureRate below one basis point", sets: []string{"policy.failureRate=0.00001"},
		refused: []string{"policy.failureRate must be at least 0.0001 (one basis point)"}},
	{name: "failureRate one basis point", sets: []string{"policy.failureRate=0.0001"}},
	{name: "a rule off with 0 from --set", sets: []string{"policy.quotaBlock=0", "policy.rateLimitCooldown=0"}},
	{name: "block above 7 days", sets: []string{"policy.quotaBlock=169h"},
		refused: []string{"policy.quotaBlock must be at most 168h (7 days), got 169h"}},
	{name: "block of 7 days", sets: []string{"policy.quotaBlock=168h"}},
	{name: "lease TTL below a millisecond", sets: []string{"policy.leaseTTL=1500us"},
		refused: []string{"policy.leaseTTL must be whole milliseconds, got 1500us"}},
	{name: "fractional duration in whole milliseconds", sets: []string{"policy.leaseTTL=1.5s", "policy.openMax=1.5h"}},
	{name: "lease TTL 0", sets: []string{"policy.leaseTTL=0"}, refused: []string{"policy.leaseTTL must be at least 1ms, got 0"}},
	{name: "17 probes", sets: []string{"policy.maxProbes=17"}, refused: []string{"/policy/maxProbes"}},
	{name: "16 probes", sets: []string{"policy.maxProbes=16"}},
	{name: "consecutive failures above the cap", sets: []string{"policy.consecutiveFailures=100001"}, refused: []string{"/policy/consecutiveFailures"}},
	{name: "tokens reload 50ms", sets: []string{"config.tokensReloadInterval=50ms"},
		refused: []string{"config.tokensReloadInterval must be at least 100ms"}},
	{name: "shutdown timeout 0", sets: []string{"config.shutdownTimeout=0"},
		refused: []string{"config.shutdownTimeout must be positive"}},
	{name: "history above 1000", sets: []string{"config.history=1001"}, refused: []string{"/config/history"}},
	{name: "every problem at once", sets: []string{"policy.window=20m", "policy.openBase=10m", "config.idleTTL=30s", "policy.minCalls=0"},
		refused: []string{"policy.window must be", "policy.openMax (5m) must be at least policy.openBase (10m)", "config.idleTTL", "policy.minCalls must be"}},

	// The policy file, layered as cooldownd layers it.
	{name: "overrides: tenant open_base above the default's open_max", doc: `
policy: {overrides: {default: {open_max: 2m}, tenants: {team-a: {open_base: 3m}}}}`,
		refused: []string{"policy.overrides.default.open_max (2m) must be at least policy.overrides.tenants.team-a.open_base (3m) (in the policy the server resolves for policy.overrides.tenants.team-a)"}},
	{name: "overrides: a label rule's window", doc: `
policy: {overrides: {tenants: {team-a: {labels: [{match: "a*", open_max: 10m}, {match: "b*", window: 11m}]}}}}`,
		refused: []string{"policy.overrides.tenants.team-a.labels[1].window must be in [1ms, 10m] while policy.failureRate is on, got 11m"}},
	{name: "overrides: open_max below the flags' open_base", doc: `
policy: {openBase: 30s, overrides: {default: {open_max: 20s}}}`,
		refused: []string{"policy.overrides.default.open_max (20s) must be at least policy.openBase (30s) (in the policy the server resolves for policy.overrides.default)"}},
	{name: "overrides: the rate rule off for a tenant frees its labels' window", doc: `
policy: {overrides: {tenants: {team-b: {failure_rate: 0, labels: [{match: "c*", window: 30m, min_calls: 0}]}}}}`},
	{name: "overrides: a 0 duration", doc: `
policy: {overrides: {default: {quota_block: 0}, tenants: {team-a: {max_probes: 16, jitter: 0.5}}}}`},
	{name: "overrides: jitter 1", doc: `
policy: {overrides: {tenants: {team-a: {jitter: 1}}}}`, refused: []string{"/policy/overrides/tenants/team-a/jitter"}},
}

// values of a bounds case, parsed as Helm parses them.
func (c boundsCase) values(t *testing.T) map[string]any {
	t.Helper()
	if c.doc != "" {
		return parseValues(t, c.doc)
	}
	return setValues(t, c.sets...)
}

// TestPolicyBounds checks that the chart refuses, at lint and template time,
// what cooldownd refuses at start, naming the value to change.
func TestPolicyBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range boundsCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tryRender(t, tc.values(t))
			if len(tc.refused) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.refused {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestChartAgreesWithBinary starts the real cooldownd with what the chart
// would give it (the ConfigMap's COOLDOWND_* variables and the policy file)
// for every bounds case: a case the chart renders must start, a case the
// chart refuses must be refused by cooldownd too. Refused cases cannot be
// rendered, so their variables are the defaults' with the case's values
// written as the ConfigMap writes them.
func TestChartAgreesWithBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs cooldownd")
	}
	t.Parallel()
	bin := cooldowndBinary(t)
	defaults := one[*corev1.ConfigMap](t, render(t, nil), fullname).Data
	for _, tc := range boundsCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			values := tc.values(t)
			var env map[string]string
			var policyFile string
			r, err := tryRender(t, values)
			if err == nil {
				require.Empty(t, tc.refused)
				env = one[*corev1.ConfigMap](t, r, fullname).Data
				if has[*corev1.ConfigMap](r, fullname+"-policy") {
					policyFile = one[*corev1.ConfigMap](t, r, fullname+"-policy").Data["policies.yaml"]
				}
			} else {
				require.NotEmpty(t, tc.refused, "the chart refused: %v", err)
				env, policyFile = envFromValues(t, defaults, values)
			}
			started, out := runCooldownd(t, bin, env, policyFile)
			if len(tc.refused) == 0 {
				assert.True(t, started, "the chart renders values that cooldownd refuses:\n%s", out)
			} else {
				assert.False(t, started, "the chart refuses values that cooldownd accepts (%v)", tc.refused)
			}
		})
	}
}

// envFromValues writes a case's policy.* and config.* values over the
// defaults' variables the way templates/configmap.yaml does, and its
// policy.overrides as the policy file.
func envFromValues(t *testing.T, defaults map[string]string, values map[string]any) (map[string]string, string) {
	t.Helper()
	env := map[string]string{}
	for k, v := range defaults {
		env[k] = v
	}
	names := map[string]string{
		"consecutiveFailures": "CONSECUTIVE_FAILURES", "failureRate": "FAILURE_RATE", "minCalls": "MIN_CALLS", "window": "WINDOW",
		"openBase": "OPEN_BASE", "openMax": "OPEN_MAX", "jitter": "JITTER", "rateLimitCooldown": "RATE_LIMIT_COOLDOWN",
		"overloadFloor": "OVERLOAD_FLOOR", "quotaBlock": "QUOTA_BLOCK", "authBlock": "AUTH_BLOCK", "maxProbes": "MAX_PROBES",
		"leaseTTL": "LEASE_TTL", "idleTTL": "IDLE_TTL", "history": "HISTORY", "shutdownTimeout": "SHUTDOWN_TIMEOUT",
		"maxConnectionsPerTenant": "MAX_CONNECTIONS_PER_TENANT", "tokensReloadInterval": "TOKENS_RELOAD_INTERVAL",
	}
	policyFile := ""
	for _, section := range []string{"policy", "config"} {
		m, _ := values[section].(map[string]any)
		for k, v := range m {
			if k == "overrides" {
				b, err := yaml.Marshal(v)
				require.NoError(t, err)
				policyFile = string(b)
				continue
			}
			name, ok := names[k]
			require.True(t, ok, "%s.%s has no variable", section, k)
			env["COOLDOWND_"+name] = fmt.Sprint(v)
		}
	}
	return env, policyFile
}

var (
	buildOnce sync.Once
	binPath   string
	errBuild  error
)

// cooldowndBinary builds cmd/cooldownd once per test binary.
func cooldowndBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "charttest-bin-")
		if err != nil {
			errBuild = err
			return
		}
		binPath = filepath.Join(dir, "cooldownd")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/cooldownd")
		cmd.Dir = filepath.Join("..", "..", "..")
		out, err := cmd.CombinedOutput()
		if err != nil {
			errBuild = fmt.Errorf("go build ./cmd/cooldownd: %w\n%s", err, out)
		}
	})
	require.NoError(t, errBuild)
	return binPath
}

// runCooldownd starts cooldownd (embedded Redis, no auth, loopback) with
// env and an optional policy file, and reports whether it came up serving
// (/livez answers) or exited first, with its output.
func runCooldownd(t *testing.T, bin string, env map[string]string, policyFile string) (bool, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	args := []string{"--addr=" + addr, "--log-format=json"}
	if policyFile != "" {
		p := filepath.Join(t.TempDir(), "policies.yaml")
		require.NoError(t, os.WriteFile(p, []byte(policyFile), 0o600))
		args = append(args, "--policy-file="+p)
	}
	// Generous: this is about the verdict, not about how fast it starts.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out strings.Builder
	var mu sync.Mutex
	cmd.Stdout = lockedWriter{&mu, &out}
	cmd.Stderr = lockedWriter{&mu, &out}
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	output := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	client := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			var ee *exec.ExitError
			require.True(t, errors.As(err, &ee), "cooldownd did not exit on its own: %v", err)
			return false, output()
		case <-ctx.Done():
			require.Fail(t, "cooldownd neither served nor exited", output())
		case <-tick.C:
			resp, err := client.Get("http://" + addr + "/livez")
			if err != nil {
				continue
			}
			_ = resp.Body.Close()
			_ = cmd.Process.Signal(os.Interrupt)
			<-exited
			return true, output()
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
