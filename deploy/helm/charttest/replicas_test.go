package charttest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failoverWarning is NOTES.txt's warning for a topology whose new master,
// after a failover, has fewer replicas than cooldownd waits for.
const failoverWarning = "WARNING: AFTER A FAILOVER THE NEW MASTER HAS TOO FEW REPLICAS"

// external is the values of an external Redis in mode with extra
// redis.external values (YAML flow mapping entries).
func external(t *testing.T, mode, extra string) map[string]any {
	t.Helper()
	addrs := "[r:6379]"
	master := ""
	if mode == "sentinel" {
		addrs, master = "[s-0:26379, s-1:26379, s-2:26379]", ", masterName: m"
	}
	if extra != "" {
		extra = ", " + extra
	}
	return parseValues(t, "redis: {bundled: {enabled: false}, external: {enabled: true, mode: "+mode+", addrs: "+addrs+master+
		", existingSecret: redis, tls: {enabled: true}"+extra+"}}\nauth: {existingSecret: tokens}")
}

// TestExamplesKeepAReplicaAfterAFailover (issue 28 point 2): the chart
// does not run Sentinel or Cluster, so what it keeps is the topology it
// documents and checks. Its default and its Sentinel and Cluster examples
// say two replicas per master: after a failover the new master still has
// one, so transitions are acknowledged again within seconds instead of
// answered NOT_REPLICATED until the old master has resynced (16-17 s with
// one, docs/reliability.md#one-replica-or-two). They render without the
// failover warning and leave --wait-replicas to cooldownd's auto.
func TestExamplesKeepAReplicaAfterAFailover(t *testing.T) {
	t.Parallel()
	ext := loadChart(t).Values["redis"].(map[string]any)["external"].(map[string]any)
	assert.EqualValues(t, 2, ext["replicasPerMaster"], "values.yaml: redis.external.replicasPerMaster")
	assert.Equal(t, "auto", ext["waitReplicas"], "values.yaml: redis.external.waitReplicas")
	for _, name := range []string{"sentinel-values.yaml", "cluster-values.yaml"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			values := ciValues(t, name)
			got := values["redis"].(map[string]any)["external"].(map[string]any)["replicasPerMaster"]
			assert.EqualValues(t, 2, got, "ci/%s: redis.external.replicasPerMaster", name)
			r := render(t, values)
			assert.NotContains(t, r.Notes, failoverWarning)
			_, c := deployment(t, r)
			assert.NotContains(t, flagsOf(t, c.Args), "wait-replicas", "auto is cooldownd's default")
		})
	}
}

// TestWaitReplicasAgainstTheTopology: a count of replicas per master that a
// failover leaves short of what cooldownd waits for is warned about in
// NOTES.txt with what it costs; a wait for more replicas than a master has,
// or a Sentinel or Cluster without replicas waited for, is refused (every
// transition would be answered NOT_REPLICATED); an explicit count is passed
// as --wait-replicas, also read back from extraArgs.
func TestWaitReplicasAgainstTheTopology(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		values  map[string]any
		warn    bool
		flag    string // --wait-replicas rendered; "" none; "in extraArgs": not read back
		refused []string
	}{
		{"sentinel, two replicas", external(t, "sentinel", "replicasPerMaster: 2"), false, "", nil},
		{"cluster, two replicas", external(t, "cluster", "replicasPerMaster: 2"), false, "", nil},
		{"sentinel, one replica", external(t, "sentinel", "replicasPerMaster: 1"), true, "", nil},
		{"cluster, one replica", external(t, "cluster", "replicasPerMaster: 1"), true, "", nil},
		{"sentinel, two replicas, both waited for", external(t, "sentinel", "replicasPerMaster: 2, waitReplicas: 2"), true, "2", nil},
		{"sentinel, three replicas, two waited for", external(t, "sentinel", "replicasPerMaster: 3, waitReplicas: 2"), false, "2", nil},
		{"sentinel, one replica, none waited for", external(t, "sentinel", "replicasPerMaster: 1, waitReplicas: 0"), false, "0", nil},
		{"cluster, no replica, none waited for", external(t, "cluster", "replicasPerMaster: 0, waitReplicas: 0"), false, "0", nil},
		{"single, no replica", external(t, "single", "replicasPerMaster: 0"), false, "", nil},
		{"single, one replica, waited for", external(t, "single", "replicasPerMaster: 1, waitReplicas: 1"), false, "1", nil},
		{"sentinel, waits for more than a master has", external(t, "sentinel", "replicasPerMaster: 1, waitReplicas: 2"), false, "",
			[]string{"redis.external.waitReplicas (2) is more than redis.external.replicasPerMaster (1)", "NOT_REPLICATED"}},
		{"single, waits for a replica it has not", external(t, "single", "replicasPerMaster: 0, waitReplicas: 1"), false, "",
			[]string{"redis.external.waitReplicas (1) is more than redis.external.replicasPerMaster (0)"}},
		{"sentinel without replicas", external(t, "sentinel", "replicasPerMaster: 0"), false, "",
			[]string{"redis.external.replicasPerMaster is 0 with mode=sentinel", "waitReplicas: 0"}},
		{"cluster without replicas, auto", external(t, "cluster", "replicasPerMaster: 0"), false, "",
			[]string{"redis.external.replicasPerMaster is 0 with mode=cluster"}},
		{"extraArgs wait for more than a master has", merge(t, external(t, "sentinel", "replicasPerMaster: 1"), "extraArgs: [--wait-replicas=2]"), false, "2",
			[]string{"--wait-replicas in extraArgs (2) is more than redis.external.replicasPerMaster (1)"}},
		{"extraArgs wait for both of two", merge(t, external(t, "cluster", "replicasPerMaster: 2"), "extraArgs: [--wait-replicas, \"2\"]"), true, "in extraArgs", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := tryRender(t, tc.values)
			if len(tc.refused) > 0 {
				require.Error(t, err)
				for _, w := range tc.refused {
					assert.Contains(t, err.Error(), w)
				}
				return
			}
			require.NoError(t, err)
			if tc.warn {
				assert.Contains(t, r.Notes, failoverWarning)
				assert.Contains(t, r.Notes, "NOT_REPLICATED", "the warning says what it costs")
				assert.Contains(t, r.Notes, "docs/reliability.md")
			} else {
				assert.NotContains(t, r.Notes, failoverWarning)
			}
			if tc.flag == "in extraArgs" {
				return
			}
			_, c := deployment(t, r)
			flags := flagsOf(t, c.Args)
			if tc.flag == "" {
				assert.NotContains(t, flags, "wait-replicas")
			} else {
				assert.Equal(t, tc.flag, flags["wait-replicas"])
			}
		})
	}
}

// TestWaitReplicasSchema: the schema holds each value to its own range
// (decision 0046): a count of 0 to 16 (cooldownd's --wait-replicas bound),
// or auto.
func TestWaitReplicasSchema(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		extra string
		ok    bool
	}{
		{"auto", "waitReplicas: auto", true},
		{"sixteen", "replicasPerMaster: 16, waitReplicas: 16", true},
		{"seventeen", "replicasPerMaster: 17", false},
		{"negative", "waitReplicas: -1", false},
		{"a word", "waitReplicas: all", false},
		{"a fraction", "replicasPerMaster: 1.5", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tryRender(t, external(t, "sentinel", tc.extra))
			if tc.ok {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, "values don't meet the specifications of the schema")
			}
		})
	}
}

// merge adds the top-level values of doc to values.
func merge(t *testing.T, values map[string]any, doc string) map[string]any {
	t.Helper()
	for k, x := range parseValues(t, doc) {
		values[k] = x
	}
	return values
}
