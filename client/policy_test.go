package client

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// TestPolicyCoversEveryBreakerKnob: every knob of cooldownd's policy is
// either the field of Policy that Policy.breaker maps to it, and only to
// it, or left to the server (serverOnlyKnobs); a knob added to the breaker
// fails here until it is one or the other. Every field of Policy is a
// knob's.
func TestPolicyCoversEveryBreakerKnob(t *testing.T) {
	t.Parallel()
	knobs := breaker.Knobs()
	require.Equal(t, reflect.TypeFor[breaker.Policy]().NumField(), len(knobs), "every breaker.Policy field is a knob")
	pt := reflect.TypeFor[Policy]()
	mapped := map[string]bool{}
	for _, k := range knobs {
		t.Run(k.Name, func(t *testing.T) {
			field, isField := pt.FieldByName(policyField(k))
			if reason, ok := serverOnlyKnobs[k.Name]; ok {
				assert.NotEmpty(t, reason)
				assert.False(t, isField, "%s is left to the server and also a field of Policy", k.Name)
				var zero breaker.Policy
				p := DefaultPolicy()
				assert.Equal(t, k.Get(zero), k.Get(p.breaker()), "a knob left to the server runs with its zero value")
				return
			}
			require.True(t, isField, "breaker knob %s is neither a field of client.Policy (%s) nor in serverOnlyKnobs: decide", k.Name, policyField(k))
			mapped[field.Name] = true

			base := DefaultPolicy()
			changed := base
			v := reflect.ValueOf(&changed).Elem().FieldByIndex(field.Index)
			var want float64
			switch k.Kind {
			case breaker.Count:
				want = k.Get(base.breaker()) + 3
				v.SetInt(int64(want))
			case breaker.Ratio:
				want = 0.375
				v.SetFloat(want)
			case breaker.Span:
				want = float64(time.Duration(k.Get(base.breaker())) + 7*time.Millisecond)
				v.SetInt(int64(want))
			case breaker.Switch:
				want = 1 - k.Get(base.breaker())
				v.SetBool(want == 1)
			default:
				t.Fatalf("knob %s: unknown kind %d", k.Name, k.Kind)
			}
			got, before := changed.breaker(), base.breaker()
			assert.Equal(t, want, k.Get(got), "Policy.%s maps to %s", field.Name, k.Name)
			for _, other := range knobs {
				if other != k {
					assert.Equal(t, other.Get(before), other.Get(got), "Policy.%s changes %s too", field.Name, other.Name)
				}
			}
			assert.Equal(t, changed, policyOf(got), "policyOf is the inverse of Policy.breaker")
		})
	}
	for i := range pt.NumField() {
		assert.True(t, mapped[pt.Field(i).Name], "Policy.%s is no breaker knob's field", pt.Field(i).Name)
	}
}

// TestDefaultPolicyIsCooldowndsDefault: the client's defaults are the
// breaker's, so the in-process breaker behaves as cooldownd's defaults do.
func TestDefaultPolicyIsCooldowndsDefault(t *testing.T) {
	t.Parallel()
	want := breaker.DefaultPolicy()
	for _, k := range breaker.Knobs() {
		if _, ok := serverOnlyKnobs[k.Name]; ok {
			k.Set(&want, 0)
		}
	}
	assert.Equal(t, want, DefaultPolicy().breaker())
}

// TestPolicyErrorNamesTheField: New's error for an invalid policy names
// the field of Policy the caller set, not cooldownd's flag.
func TestPolicyErrorNamesTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*Policy)
		want string
	}{
		{name: "one knob", edit: func(p *Policy) { p.Jitter = 1 }, want: "client: local policy: Policy.Jitter must be in [0, 1), got 1"},
		{name: "a span", edit: func(p *Policy) { p.LeaseTTL = 0 }, want: "Policy.LeaseTTL must be in"},
		{name: "between knobs", edit: func(p *Policy) { p.OpenMax = p.OpenBase - time.Millisecond },
			want: "Policy.OpenMax (9.999s) must be at least Policy.OpenBase (10s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := DefaultPolicy()
			tt.edit(&p)
			_, err := New("http://127.0.0.1:1", WithLocalPolicy(p))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
