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
	"regexp"
	"strconv"
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
		refused: []string{"at '/policy/openBase': minimum: got 0, want 1"}},
	{name: "openBase 0s", sets: []string{"policy.openBase=0s"},
		refused: []string{"at '/policy/openBase': '0s' does not match pattern '[1-9]'"}},
	{name: "openBase 1ms", sets: []string{"policy.openBase=1ms"}},
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
	{name: "jitter 1.0 from --set", sets: []string{"policy.jitter=1.0"}, refused: []string{"at '/policy/jitter': '1.0' does not match pattern"}},
	{name: "jitter 0.99999 from --set", sets: []string{"policy.jitter=0.99999"}},
	{name: "failureRate 1", sets: []string{"policy.failureRate=1"}},
	{name: "failureRate 1.0 from --set", sets: []string{"policy.failureRate=1.0"}},
	{name: "failureRate above 1 from --set", sets: []string{"policy.failureRate=1.5"},
		refused: []string{"at '/policy/failureRate': '1.5' does not match pattern"}},
	{name: "failureRate just above 1 from --set", sets: []string{"policy.failureRate=1.0001"},
		refused: []string{"at '/policy/failureRate': '1.0001' does not match pattern"}},
	{name: "failureRate above 1", doc: `policy: {failureRate: 1.0001}`,
		refused: []string{"at '/policy/failureRate'", "maximum: got 1.0001, want 1"}},
	{name: "failureRate below one basis point", sets: []string{"policy.failureRate=0.00001"},
		refused: []string{"at '/policy/failureRate': '0.00001' does not match pattern"}},
	{name: "failureRate just below half a basis point", sets: []string{"policy.failureRate=0.000049"},
		refused: []string{"at '/policy/failureRate': '0.000049' does not match pattern"}},
	{name: "failureRate just below half a basis point as a number", doc: `policy: {failureRate: 0.000049}`,
		refused: []string{"at '/policy/failureRate'", "value must be 0", "minimum: got 4.9×10⁻⁰⁵, want 5×10⁻⁰⁵"}},
	{name: "failureRate half a basis point (rounds to one)", sets: []string{"policy.failureRate=0.00005"}},
	{name: "failureRate half a basis point as a number", doc: `policy: {failureRate: 0.00005}`},
	{name: "failureRate one basis point", sets: []string{"policy.failureRate=0.0001"}},
	{name: "failureRate 0.0 from --set (off)", sets: []string{"policy.failureRate=0.0"}},
	{name: "a rule off with 0 from --set", sets: []string{"policy.quotaBlock=0", "policy.rateLimitCooldown=0"}},
	{name: "block above 7 days", sets: []string{"policy.quotaBlock=169h"},
		refused: []string{"policy.quotaBlock must be at most 168h, got 169h"}},
	{name: "block of 7 days", sets: []string{"policy.quotaBlock=168h"}},
	{name: "lease TTL below a millisecond", sets: []string{"policy.leaseTTL=1500us"},
		refused: []string{"policy.leaseTTL must be whole milliseconds, got 1500us"}},
	{name: "fractional duration in whole milliseconds", sets: []string{"policy.leaseTTL=1.5s", "policy.openMax=1.5h"}},
	{name: "lease TTL 0", sets: []string{"policy.leaseTTL=0"}, refused: []string{"at '/policy/leaseTTL': minimum: got 0, want 1"}},
	{name: "lease TTL 0ms", sets: []string{"policy.leaseTTL=0ms"}, refused: []string{"at '/policy/leaseTTL': '0ms' does not match pattern '[1-9]'"}},
	{name: "lease TTL 1ms", sets: []string{"policy.leaseTTL=1ms"}},
	{name: "lease TTL max 24h, its own maximum", sets: []string{"policy.leaseTTLMax=24h"}},
	{name: "lease TTL max 0 (the API's bound)", sets: []string{"policy.leaseTTLMax=0"}},
	{name: "lease TTL max above its own maximum", sets: []string{"policy.leaseTTLMax=24h1ms"},
		refused: []string{"policy.leaseTTLMax must be at most 24h, got 24h1ms"}},
	{name: "lease TTL of a nanosecond", sets: []string{"policy.leaseTTL=1ns"},
		refused: []string{"policy.leaseTTL must be whole milliseconds, got 1ns"}},
	{name: "17 probes", sets: []string{"policy.maxProbes=17"}, refused: []string{"/policy/maxProbes"}},
	{name: "16 probes", sets: []string{"policy.maxProbes=16"}},
	{name: "consecutive failures above the cap", sets: []string{"policy.consecutiveFailures=100001"}, refused: []string{"/policy/consecutiveFailures"}},
	{name: "tokens reload 50ms", sets: []string{"config.tokensReloadInterval=50ms"},
		refused: []string{"config.tokensReloadInterval must be at least 100ms"}},
	{name: "shutdown timeout 0", sets: []string{"config.shutdownTimeout=0"},
		refused: []string{"config.shutdownTimeout must be positive"}},
	{name: "history above 1000", sets: []string{"config.history=1001"}, refused: []string{"/config/history"}},
	{name: "coalesce interval 9ms", sets: []string{"coalesce.interval=9ms"},
		refused: []string{"coalesce.interval must be empty or 0 (off), or in [10ms, 5s] (--coalesce-interval), got 9ms"}},
	{name: "coalesce interval 10ms", sets: []string{"coalesce.interval=10ms"}},
	{name: "coalesce interval 5s", sets: []string{"coalesce.interval=5s"}},
	{name: "coalesce interval 5s1ms", sets: []string{"coalesce.interval=5s1ms"},
		refused: []string{"coalesce.interval must be empty or 0 (off), or in [10ms, 5s] (--coalesce-interval), got 5s1ms"}},
	{name: "coalesce interval 0 from --set (off)", sets: []string{"coalesce.interval=0"}},
	{name: "coalesce interval 0s (off)", sets: []string{"coalesce.interval=0s"}},
	{name: "every problem at once", sets: []string{"policy.window=20m", "policy.openBase=10m", "config.idleTTL=30s", "policy.minCalls=0"},
		refused: []string{"policy.window must be", "policy.openMax (5m) must be at least policy.openBase (10m)", "config.idleTTL", "policy.minCalls must be"}},

	// The fleet rules (decision 0034).
	{name: "retryBudget 0 (off)", sets: []string{"policy.retryBudget=0"}},
	{name: "retryBudget 1", sets: []string{"policy.retryBudget=1"}},
	{name: "decimal retryBudget from --set", sets: []string{"policy.retryBudget=0.35"}},
	{name: "retryBudget above 1 from --set", sets: []string{"policy.retryBudget=1.5"},
		refused: []string{"at '/policy/retryBudget': '1.5' does not match pattern"}},
	{name: "retryBudget 1.0 from --set", sets: []string{"policy.retryBudget=1.0"}},
	{name: "retryBudget above 1", doc: `policy: {retryBudget: 1.5}`, refused: []string{"/policy/retryBudget"}},
	{name: "retryBudget below one basis point", sets: []string{"policy.retryBudget=0.00001"},
		refused: []string{"at '/policy/retryBudget': '0.00001' does not match pattern"}},
	{name: "retryBudget just below half a basis point", doc: `policy: {retryBudget: 0.000049}`,
		refused: []string{"at '/policy/retryBudget'", "minimum: got 4.9×10⁻⁰⁵, want 5×10⁻⁰⁵"}},
	{name: "retryBudget half a basis point", sets: []string{"policy.retryBudget=0.00005"}},
	{name: "retryBudget one basis point", sets: []string{"policy.retryBudget=0.0001"}},
	{name: "retryBudgetMin 1000", sets: []string{"policy.retryBudgetMin=1000"}},
	{name: "retryBudgetMin 0", sets: []string{"policy.retryBudgetMin=0"}},
	{name: "retryBudgetMin 1001", sets: []string{"policy.retryBudgetMin=1001"}, refused: []string{"/policy/retryBudgetMin"}},
	{name: "throttleK 2", sets: []string{"policy.throttleK=2"}},
	{name: "throttleK 1", sets: []string{"policy.throttleK=1"}},
	{name: "throttleK 10", sets: []string{"policy.throttleK=10"}},
	{name: "decimal throttleK from --set", sets: []string{"policy.throttleK=1.5"}},
	{name: "throttleK below 1 from --set", sets: []string{"policy.throttleK=0.5"},
		refused: []string{"at '/policy/throttleK': '0.5' does not match pattern"}},
	{name: "throttleK just below 1 from --set", sets: []string{"policy.throttleK=0.999"},
		refused: []string{"at '/policy/throttleK': '0.999' does not match pattern"}},
	{name: "throttleK just below 1", doc: `policy: {throttleK: 0.999}`,
		refused: []string{"at '/policy/throttleK'", "value must be 0", "minimum: got 0.999, want 1"}},
	{name: "throttleK 1.0 from --set", sets: []string{"policy.throttleK=1.0"}},
	{name: "throttleK 10.0 from --set", sets: []string{"policy.throttleK=10.0"}},
	{name: "throttleK 0.0 from --set (off)", sets: []string{"policy.throttleK=0.0"}},
	{name: "throttleK above 10 from --set", sets: []string{"policy.throttleK=10.5"},
		refused: []string{"at '/policy/throttleK': '10.5' does not match pattern"}},
	{name: "throttleK just above 10 from --set", sets: []string{"policy.throttleK=10.01"},
		refused: []string{"at '/policy/throttleK': '10.01' does not match pattern"}},
	{name: "throttleK above 10", doc: `policy: {throttleK: 11}`, refused: []string{"/policy/throttleK"}},
	{name: "tripQuorum 16", sets: []string{"policy.tripQuorum=16"}},
	{name: "tripQuorum 17", sets: []string{"policy.tripQuorum=17"}, refused: []string{"/policy/tripQuorum"}},
	{name: "fleetWindow 10m", sets: []string{"policy.fleetWindow=10m"}},
	{name: "fleetWindow 1ms", sets: []string{"policy.fleetWindow=1ms", "policy.throttleK=2", "policy.tripQuorum=2"}},
	{name: "fleetWindow 20m with the default retry budget", sets: []string{"policy.fleetWindow=20m"},
		refused: []string{"policy.fleetWindow must be in [1ms, 10m] while policy.retryBudget, policy.throttleK or policy.tripQuorum is on, got 20m"}},
	{name: "fleetWindow 0 with the throttle", sets: []string{"policy.fleetWindow=0", "policy.retryBudget=0", "policy.throttleK=2"},
		refused: []string{"policy.fleetWindow must be in [1ms, 10m] while policy.retryBudget, policy.throttleK or policy.tripQuorum is on, got 0"}},
	{name: "fleetWindow 11m with a trip quorum of 2", sets: []string{"policy.fleetWindow=11m", "policy.retryBudget=0", "policy.tripQuorum=2"},
		refused: []string{"policy.fleetWindow must be in [1ms, 10m] while"}},
	{name: "fleetWindow 20m with every fleet rule off", sets: []string{"policy.fleetWindow=20m", "policy.retryBudget=0", "policy.tripQuorum=1"}},
	{name: "fleetWindow 0 with every fleet rule off", sets: []string{"policy.fleetWindow=0", "policy.retryBudget=0"}},
	{name: "fleetWindow below a millisecond", sets: []string{"policy.fleetWindow=1500us"},
		refused: []string{"policy.fleetWindow must be whole milliseconds, got 1500us"}},
	{name: "fleetWindow above 7 days", sets: []string{"policy.fleetWindow=169h", "policy.retryBudget=0"},
		refused: []string{"policy.fleetWindow must be at most 168h, got 169h"}},
	{name: "shadow true", sets: []string{"policy.shadow=true"}},
	{name: "shadow false", sets: []string{"policy.shadow=false"}},
	{name: "shadow yes", sets: []string{"policy.shadow=yes"}, refused: []string{"/policy/shadow"}},
	{name: "every fleet rule on", sets: []string{"policy.retryBudget=0.1", "policy.retryBudgetMin=10", "policy.throttleK=2", "policy.tripQuorum=2", "policy.fleetWindow=1m", "policy.shadow=true"}},
	{name: "overrides: a tenant's throttle_k below 1", doc: `
policy: {overrides: {tenants: {team-a: {throttle_k: 0.5}}}}`,
		refused: []string{"at '/policy/overrides/tenants/team-a/throttle_k'", "value must be 0", "minimum: got 0.5, want 1"}},
	{name: "overrides: a label rule's failure_rate below half a basis point", doc: `
policy: {overrides: {tenants: {team-a: {labels: [{match: "a*", failure_rate: 0.00004}]}}}}`,
		refused: []string{"at '/policy/overrides/tenants/team-a/labels/0/failure_rate'", "minimum: got 4×10⁻⁰⁵, want 5×10⁻⁰⁵"}},
	{name: "overrides: the default's retry_budget half a basis point", doc: `
policy: {overrides: {default: {retry_budget: 0.00005}}}`},
	{name: "overrides: a tenant's open_base 0", doc: `
policy: {overrides: {tenants: {team-a: {open_base: 0s}}}}`,
		refused: []string{"at '/policy/overrides/tenants/team-a/open_base': '0s' does not match pattern '[1-9]'"}},
	{name: "overrides: a label rule's lease_ttl 1ms", doc: `
policy: {overrides: {tenants: {team-a: {labels: [{match: "a*", lease_ttl: 1ms}]}}}}`},
	{name: "overrides: a label rule's max_probes", doc: `
policy: {overrides: {tenants: {team-a: {max_probes: 2, labels: [{match: "a*", max_probes: 2}]}}}}`,
		refused: []string{"at '/policy/overrides/tenants/team-a/labels/0': additional properties 'max_probes' not allowed"}},
	{name: "overrides: a tenant's max_probes", doc: `
policy: {overrides: {tenants: {team-a: {max_probes: 2, labels: [{match: "a*"}]}}}}`},
	{name: "overrides: a label rule's trip quorum reads the default's fleet window", doc: `
policy: {retryBudget: 0, overrides: {default: {fleet_window: 20m}, tenants: {team-a: {labels: [{match: "a*", trip_quorum: 2}]}}}}`,
		refused: []string{"policy.overrides.default.fleet_window must be in [1ms, 10m] while policy.retryBudget, policy.throttleK or policy.overrides.tenants.team-a.labels[0].trip_quorum is on, got 20m (in the policy the server resolves for policy.overrides.tenants.team-a.labels[0])"}},
	{name: "overrides: the budget off for a tenant frees its fleet window", doc: `
policy: {overrides: {tenants: {team-a: {retry_budget: 0, fleet_window: 30m}}}}`},
	{name: "overrides: shadow for a label rule", doc: `
policy: {overrides: {default: {shadow: false}, tenants: {team-a: {throttle_k: 2, labels: [{match: "new *", shadow: true, retry_budget: 0.5}]}}}}`},
	{name: "overrides: shadow yes", doc: `
policy: {overrides: {tenants: {team-a: {shadow: "yes"}}}}`, refused: []string{"/policy/overrides/tenants/team-a/shadow"}},

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

// TestChartDefaultsAreTheBinarys: every COOLDOWND_* variable the default
// ConfigMap sets equals the default cooldownd's --help states for it (for
// the policy, internal/breaker's DefaultPolicy), and every policy flag of
// cooldownd has its variable in the ConfigMap, so a knob added to the
// binary cannot be missing from the chart.
func TestChartDefaultsAreTheBinarys(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs cooldownd")
	}
	t.Parallel()
	bin := cooldowndBinary(t)
	cmd := exec.Command(bin, "--help")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	help := map[string]string{} // COOLDOWND_X -> default
	for _, m := range helpDefault.FindAllStringSubmatch(string(out), -1) {
		help[m[1]] = m[2]
	}
	require.Contains(t, help, "COOLDOWND_SHADOW", "cooldownd --help lists its knobs:\n%s", out)
	data := one[*corev1.ConfigMap](t, render(t, nil), fullname).Data
	require.NotEmpty(t, data)
	for k, v := range data {
		def, ok := help[k]
		if !assert.True(t, ok, "the ConfigMap sets %s, which cooldownd does not read", k) {
			continue
		}
		assert.True(t, sameSetting(v, def), "%s: the chart's default %q, cooldownd's %q", k, v, def)
	}
	// Every knob of the policy table (the flags after --lease-ttl are the
	// fleet rules') reaches the ConfigMap.
	for _, k := range []string{"CONSECUTIVE_FAILURES", "FAILURE_RATE", "MIN_CALLS", "WINDOW", "OPEN_BASE", "OPEN_MAX", "JITTER",
		"RATE_LIMIT_COOLDOWN", "OVERLOAD_FLOOR", "QUOTA_BLOCK", "AUTH_BLOCK", "MAX_PROBES", "LEASE_TTL", "LEASE_TTL_MAX",
		"RETRY_BUDGET", "RETRY_BUDGET_MIN", "THROTTLE_K", "TRIP_QUORUM", "FLEET_WINDOW", "SHADOW"} {
		require.Contains(t, help, "COOLDOWND_"+k)
		assert.Contains(t, data, "COOLDOWND_"+k, "the chart does not pass --%s", strings.ToLower(strings.ReplaceAll(k, "_", "-")))
	}
}

// helpDefault matches a flag's line in cooldownd --help.
var helpDefault = regexp.MustCompile(`\(env (COOLDOWND_[A-Z0-9_]+), default "([^"]*)"\)`)

// sameSetting compares two spellings of one value: durations by length
// (1m and 1m0s), numbers by value, booleans by truth, else as text.
func sameSetting(a, b string) bool {
	if x, err := time.ParseDuration(a); err == nil {
		y, err := time.ParseDuration(b)
		return err == nil && x == y
	}
	if x, err := strconv.ParseFloat(a, 64); err == nil {
		y, err := strconv.ParseFloat(b, 64)
		return err == nil && x == y
	}
	if x, err := strconv.ParseBool(a); err == nil {
		y, err := strconv.ParseBool(b)
		return err == nil && x == y
	}
	return a == b
}

// envFromValues writes a case's policy.*, config.* and coalesce.interval
// values over the defaults' variables the way templates/configmap.yaml does,
// and its policy.overrides as the policy file.
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
		"leaseTTL": "LEASE_TTL", "leaseTTLMax": "LEASE_TTL_MAX", "retryBudget": "RETRY_BUDGET", "retryBudgetMin": "RETRY_BUDGET_MIN", "throttleK": "THROTTLE_K",
		"tripQuorum": "TRIP_QUORUM", "fleetWindow": "FLEET_WINDOW", "shadow": "SHADOW", "idleTTL": "IDLE_TTL", "history": "HISTORY", "shutdownTimeout": "SHUTDOWN_TIMEOUT",
		"maxConnectionsPerTenant": "MAX_CONNECTIONS_PER_TENANT", "tokensReloadInterval": "TOKENS_RELOAD_INTERVAL",
	}
	if co, ok := values["coalesce"].(map[string]any); ok {
		for k, v := range co {
			require.Equal(t, "interval", k, "coalesce.%s has no variable", k)
			env["COOLDOWND_COALESCE_INTERVAL"] = fmt.Sprint(v)
		}
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
// env, an optional policy file and extra flags, and reports whether it came
// up serving (/livez answers) or exited first, with its output.
func runCooldownd(t *testing.T, bin string, env map[string]string, policyFile string, extra ...string) (bool, string) {
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
	args = append(args, extra...)
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
