package charttest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"sigs.k8s.io/yaml"
)

// TestREADMEProductionInstall renders the values of the root README's
// "Production: an external Redis Cluster" command, so the docs cannot drift
// from the chart.
func TestREADMEProductionInstall(t *testing.T) {
	t.Parallel()
	var values map[string]any
	doc := `
redis:
  bundled: {enabled: false}
  external:
    enabled: true
    mode: cluster
    addrs: [redis-0.redis:6379, redis-1.redis:6379, redis-2.redis:6379]
    existingSecret: cooldownd-redis
    existingSecretPasswordKey: password
auth:
  existingSecret: cooldownd-tokens
  generateAdminToken: false
`
	if err := yaml.Unmarshal([]byte(doc), &values); err != nil {
		t.Fatal(err)
	}
	r := render(t, values)
	_, c := deployment(t, r)
	flags := flagsOf(t, c.Args)
	assert.Equal(t, "cluster", flags["redis-mode"])
	assert.Equal(t, "redis-0.redis:6379,redis-1.redis:6379,redis-2.redis:6379", flags["redis-addrs"])
	assert.Equal(t, "/etc/cooldownd/tokens.yaml", flags["tokens-file"])
	assert.Contains(t, flags, "redis-password-file")
}
