package policy_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/policy"
)

const example = `
default:
  open_max: 2m
tenants:
  team-a:
    consecutive_failures: 3
    max_probes: 2
    labels:
      - match: "openai *"
        rate_limit_cooldown: 5s
      - match: "*"
        jitter: 0
`

func TestResolve(t *testing.T) {
	t.Parallel()
	base := breaker.DefaultPolicy()
	r, err := policy.Parse([]byte(example), base)
	require.NoError(t, err)

	def := r.For("team-b", "openai gpt-4o")
	assert.Equal(t, 2*time.Minute, def.OpenMax, "default section over the flags")
	assert.Equal(t, base.ConsecutiveFailures, def.ConsecutiveFailures, "flags kept")

	a := r.For("team-a", "")
	assert.Equal(t, 3, a.ConsecutiveFailures)
	assert.Equal(t, 2, a.MaxProbes)
	assert.Equal(t, 2*time.Minute, a.OpenMax, "tenant over default")
	assert.Equal(t, base.Jitter, a.Jitter, "no label: no label rule")

	openai := r.For("team-a", "openai gpt-4o")
	assert.Equal(t, 5*time.Second, openai.RateLimitDefault, "first matching rule")
	assert.Equal(t, base.Jitter, openai.Jitter, "only the first match applies")
	assert.Equal(t, 3, openai.ConsecutiveFailures, "label over tenant")

	other := r.For("team-a", "anthropic claude")
	assert.Zero(t, other.Jitter)
	assert.Equal(t, base.RateLimitDefault, other.RateLimitDefault)
	assert.Equal(t, 2, other.MaxProbes, "max_probes is the tenant's for every label")
}

func TestEmptyFileKeepsTheFlags(t *testing.T) {
	t.Parallel()
	base := breaker.DefaultPolicy()
	base.OpenBase = 3 * time.Second
	r, err := policy.Parse(nil, base)
	require.NoError(t, err)
	assert.Equal(t, base, r.For("anyone", "any label"))
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, doc, want string }{
		{"unknown knob", "default: {open_maximum: 1m}", "open_maximum"},
		{"bad duration", "default: {open_max: soon}", "not a duration"},
		{"invalid resolved policy", "default: {jitter: 1.5}", "default: breaker: invalid policy: jitter"},
		{"bad tenant", "tenants: {Team_A: {jitter: 0}}", "tenants.Team_A"},
		{"invalid tenant policy", "tenants: {a: {max_probes: 0}}", "tenants.a: breaker: invalid policy: max_probes"},
		{"max_probes per label", "tenants: {a: {labels: [{match: '*', max_probes: 2}]}}", "max_probes can be set per tenant, not per label"},
		{"missing match", "tenants: {a: {labels: [{jitter: 0}]}}", "match is required"},
		{"bad pattern", "tenants: {a: {labels: [{match: '[', jitter: 0}]}}", "not a valid pattern"},
		{"invalid label policy", "tenants: {a: {labels: [{match: '*', open_base: -1s}]}}", "tenants.a.labels[0]: breaker: invalid policy: open_base"},
		{"syntax", "default: [", "invalid policy file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := policy.Parse([]byte(tt.doc), breaker.DefaultPolicy())
			require.ErrorIs(t, err, policy.ErrInvalid)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte("default: {open_max: 1m}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := policy.Parse(data, breaker.DefaultPolicy())
		if err != nil {
			return
		}
		for _, tenant := range []string{"team-a", "x"} {
			for _, label := range []string{"", "openai gpt-4o"} {
				require.NoError(t, r.For(tenant, label).Validate(), "every resolved policy is valid")
				assert.Equal(t, r.For(tenant, "").MaxProbes, r.For(tenant, label).MaxProbes)
			}
		}
	})
}
