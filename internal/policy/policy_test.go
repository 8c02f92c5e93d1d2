package policy_test

import (
	"strings"
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
	assert.Equal(t, 5*time.Second, openai.RateLimitCooldown, "first matching rule")
	assert.Equal(t, base.Jitter, openai.Jitter, "only the first match applies")
	assert.Equal(t, 3, openai.ConsecutiveFailures, "label over tenant")

	other := r.For("team-a", "anthropic claude")
	assert.Zero(t, other.Jitter)
	assert.Equal(t, base.RateLimitCooldown, other.RateLimitCooldown)
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
		{"invalid resolved policy", "default: {jitter: 1.5}", "default: jitter must be in [0, 1)"},
		{"bad tenant", "tenants: {Team_A: {jitter: 0}}", "tenants.Team_A"},
		{"invalid tenant policy", "tenants: {a: {max_probes: 0}}", "tenants.a: max_probes must be"},
		{"max_probes per label", "tenants: {a: {labels: [{match: '*', max_probes: 2}]}}", "max_probes can be set per tenant, not per label"},
		{"missing match", "tenants: {a: {labels: [{jitter: 0}]}}", "match is required"},
		{"bad pattern", "tenants: {a: {labels: [{match: '[', jitter: 0}]}}", "not a valid pattern"},
		{"invalid label policy", "tenants: {a: {labels: [{match: '*', open_base: -1s}]}}", "tenants.a.labels[0]: open_base must not be negative"},
		{"syntax", "default: [", "invalid policy file"},
		{"unknown knob in a tenant", "tenants:\n  a:\n    open_maximum: 1m\n", `tenants.a: line 3: unknown key "open_maximum"`},
		{"unknown knob in a label rule", "tenants: {a: {labels: [{match: x, cooldown: 5s}]}}", `tenants.a.labels[0]: line 1: unknown key "cooldown"`},
		{"flag name as key", "default: {open-max: 1m}", `default: line 1: unknown key "open-max"`},
		{"camelCase key", "default: {openMax: 1m}", `unknown key "openMax"`},
		{"unknown section", "tenant: {a: {}}", `top level: line 1: unknown key "tenant" (want default or tenants)`},
		{"knob at top level", "jitter: 0", `unknown key "jitter"`},
		{"key twice", "default: {jitter: 0, jitter: 0.2}", "default: line 1: jitter is given twice"},
		{"tenant twice", "tenants: {a: {jitter: 0}, a: {jitter: 0.2}}", "tenants: line 1: a is given twice"},
		{"count not whole", "default: {consecutive_failures: 2.5}", "default: line 1: consecutive_failures: want an integer"},
		{"count quoted", "default: {min_calls: '7'}", "min_calls: want an integer"},
		{"ratio a word", "default: {failure_rate: high}", "failure_rate: want a number such as 0.5"},
		{"duration a number", "default: {open_max: 120}", `open_max: "120" is not a duration`},
		{"duration a list", "default: {open_max: [1m]}", "open_max: want a duration"},
		{"section a list", "default: [jitter]", "default: line 1: want a mapping"},
		{"labels a mapping", "tenants: {a: {labels: {match: x}}}", "tenants.a: line 1: labels: want a list of rules"},
		{"match a number", "tenants: {a: {labels: [{match: 7}]}}", "match: want a label pattern"},
		// A switch is a YAML boolean, nothing else: YAML 1.1's yes and on
		// are strings in YAML 1.2, and a quoted true is a string.
		{"switch yes", "default: {shadow: yes}", "default: line 1: shadow: want true or false"},
		{"switch on", "tenants: {a: {shadow: on}}", "tenants.a: line 1: shadow: want true or false"},
		{"switch quoted", "default: {shadow: 'true'}", "shadow: want true or false"},
		{"switch a number", "default: {shadow: 1}", "shadow: want true or false"},
		{"switch a list", "default: {shadow: [true]}", "shadow: want true or false"},
		{"switch empty", "default: {shadow: }", "shadow: want true or false"},
		{"switch tagged yes", "default: {shadow: !!bool yes}", `shadow: "yes" is not true or false`},
		{"switch in a label rule a word", "tenants: {a: {labels: [{match: '*', shadow: enabled}]}}", "tenants.a.labels[0]: line 1: shadow: want true or false"},
		{"ratio a boolean", "default: {retry_budget: true}", "retry_budget: want a number such as 0.5"},
		{"count a boolean", "default: {trip_quorum: false}", "trip_quorum: want an integer"},
		{"duration a boolean", "default: {fleet_window: true}", "fleet_window: want a duration"},
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

// TestErrorsNameTheFileKeys: every knob's validation error names the key an
// operator wrote, in the section it is in.
func TestErrorsNameTheFileKeys(t *testing.T) {
	t.Parallel()
	bad := map[string]string{ // a value each knob rejects
		"consecutive_failures": "-1", "failure_rate": "1.5", "min_calls": "0", "window": "11m",
		"open_base": "0s", "open_max": "-1s", "jitter": "1", "rate_limit_cooldown": "-1s",
		"overload_floor": "-1s", "quota_block": "1500us", "auth_block": "-2s", "max_probes": "0", "lease_ttl": "-1s",
		"retry_budget": "1.5", "retry_budget_min": "1001", "throttle_k": "0.5", "trip_quorum": "17", "fleet_window": "10m1ms",
		"lease_ttl_max": "25h",
	}
	switches := 0
	for _, k := range breaker.Knobs() {
		if k.Kind == breaker.Switch {
			switches++ // true and false are both valid: TestParseRejects has its bad syntax
		}
	}
	require.Len(t, bad, len(breaker.Knobs())-switches, "a bad value for every knob but the switches")
	for _, k := range breaker.Knobs() {
		if k.Kind == breaker.Switch {
			continue
		}
		key := k.Key()
		require.Contains(t, bad, key)
		for _, where := range []string{"default", "tenants.a", "tenants.a.labels[0]"} {
			if k.TenantOnly && strings.HasSuffix(where, "]") {
				continue // not settable per label: TestParseRejects
			}
			t.Run(key+"/"+where, func(t *testing.T) {
				t.Parallel()
				doc := map[string]string{
					"default":             "default: {" + key + ": " + bad[key] + "}",
					"tenants.a":           "tenants: {a: {" + key + ": " + bad[key] + "}}",
					"tenants.a.labels[0]": "tenants: {a: {labels: [{match: '*', " + key + ": " + bad[key] + "}]}}",
				}[where]
				_, err := policy.Parse([]byte(doc), breaker.DefaultPolicy())
				require.ErrorIs(t, err, policy.ErrInvalid)
				assert.ErrorIs(t, err, breaker.ErrInvalidPolicy)
				assert.Contains(t, err.Error(), where+": "+key, "names the file's key")
				assert.NotContains(t, err.Error(), "rate_limit_default", "never the Go field's name")
				assert.NotContains(t, err.Error(), k.Flag(), "never the flag")
			})
		}
	}
}

// TestEveryKnobInEverySection: each knob of the table can be set in each
// section where it is allowed, with its own value, and nothing else moves.
func TestEveryKnobInEverySection(t *testing.T) {
	t.Parallel()
	base := breaker.DefaultPolicy()
	for _, k := range breaker.Knobs() {
		value := map[breaker.Kind]string{breaker.Count: "2", breaker.Ratio: "0.375", breaker.Span: "11s", breaker.Switch: "true"}[k.Kind]
		if k.Key() == "throttle_k" {
			value = "2.5" // 0 or 1 to 10
		}
		want := base
		v, err := k.Parse(value)
		require.NoError(t, err)
		k.Set(&want, v)
		for _, tc := range []struct{ where, doc, tenant, label string }{
			{"default", "default: {" + k.Key() + ": " + value + "}", "anyone", "x"},
			{"tenant", "tenants: {a: {" + k.Key() + ": " + value + "}}", "a", "x"},
			{"label", "tenants: {a: {labels: [{match: 'x*', " + k.Key() + ": " + value + "}]}}", "a", "xy"},
		} {
			if k.TenantOnly && tc.where == "label" {
				continue
			}
			t.Run(k.Key()+"/"+tc.where, func(t *testing.T) {
				t.Parallel()
				r, err := policy.Parse([]byte(tc.doc), base)
				require.NoError(t, err)
				assert.Equal(t, want, r.For(tc.tenant, tc.label))
				assert.NotEqual(t, base, want, "the value is not the default: the test sees it applied")
			})
		}
	}
}

// TestSwitch: a switch takes each YAML 1.2 spelling of a boolean in every
// section, and a layer's false turns off the layer below's true.
func TestSwitch(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, doc     string
		tenant, label string
		want          bool
	}{
		{"default true", "default: {shadow: true}", "anyone", "x", true},
		{"default True", "default: {shadow: True}", "anyone", "x", true},
		{"default TRUE", "default: {shadow: TRUE}", "anyone", "x", true},
		{"tagged", "default: {shadow: !!bool true}", "anyone", "x", true},
		{"default false", "default: {shadow: false}", "anyone", "x", false},
		{"tenant over default", "default: {shadow: true}\ntenants: {a: {shadow: False}}", "a", "x", false},
		{"another tenant keeps the default", "default: {shadow: true}\ntenants: {a: {shadow: false}}", "b", "x", true},
		{"label rule over tenant", "tenants: {a: {shadow: false, labels: [{match: 'new *', shadow: true}]}}", "a", "new model", true},
		{"label rule not matching", "tenants: {a: {labels: [{match: 'new *', shadow: true}]}}", "a", "old model", false},
		{"label rule off over tenant on", "tenants: {a: {shadow: true, labels: [{match: '*', shadow: FALSE}]}}", "a", "any", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := policy.Parse([]byte(tt.doc), breaker.DefaultPolicy())
			require.NoError(t, err)
			got := r.For(tt.tenant, tt.label)
			assert.Equal(t, tt.want, got.Shadow)
			want := breaker.DefaultPolicy()
			want.Shadow = tt.want
			assert.Equal(t, want, got, "nothing else moves")
		})
	}

	base := breaker.DefaultPolicy()
	base.Shadow = true // the flags' --shadow
	r, err := policy.Parse([]byte("tenants: {a: {shadow: false}}"), base)
	require.NoError(t, err)
	assert.True(t, r.For("b", "").Shadow, "the flags' value where the file says nothing")
	assert.False(t, r.For("a", "").Shadow, "the file's false over the flags' true")
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
