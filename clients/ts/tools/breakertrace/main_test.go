package main

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// TestSequencesReachTheFleetRules checks that the traces the TypeScript
// port is replayed against exercise every fleet rule: a generator that
// stopped reaching one would let the port drift there unnoticed.
func TestSequencesReachTheFleetRules(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 0x7e57))
	reached := map[string]int{}
	for range 200 {
		tr := sequence(rng, 150)
		for _, st := range tr.Steps {
			if st.Verdict == nil {
				continue
			}
			switch breaker.DenyReason(max(st.Verdict.Reason, st.Verdict.Shadowed)) {
			case breaker.ReasonRetryBudget:
				reached["retry budget"]++
			case breaker.ReasonThrottled:
				reached["throttle"]++
			}
			if st.Verdict.Shadowed != 0 {
				reached["shadow"]++
			}
			if st.Counts.FailureReporters > 1 {
				reached["several reporters"]++
			}
		}
		if q, _ := tr.Policy["tripQuorum"].(int64); q > 1 {
			reached["quorum policies"]++
		}
	}
	for _, rule := range []string{"retry budget", "throttle", "shadow", "several reporters", "quorum policies"} {
		assert.Positive(t, reached[rule], "%s never reached: %v", rule, reached)
	}
}

// TestValidationCases checks the validation cases: each names the knob
// Validate refuses, every knob is refused by some, and some are valid.
func TestValidationCases(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(4, 0x7e57))
	refused := map[string]int{}
	for range 4000 {
		c := validation(rng)
		refused[c.Refused]++
		b, err := json.Marshal(c)
		require.NoError(t, err)
		require.NotContains(t, string(b), "NaN")
	}
	assert.Positive(t, refused[""], "no valid policy")
	for _, k := range breaker.Knobs() {
		if k.Kind == breaker.Switch {
			continue // a boolean is never out of bounds
		}
		assert.Positive(t, refused[k.Key()], "no case refused by %s: %v", k.Key(), refused)
	}
}

// TestPolicyMilliseconds checks the policy's JSON form: every knob under
// its generated TypeScript field, spans in milliseconds, fractional only
// when the duration is.
func TestPolicyMilliseconds(t *testing.T) {
	t.Parallel()
	p := breaker.DefaultPolicy()
	p.LeaseTTL += 1500 * 1000 // 1.5 ms more
	got := toPolicy(p)
	assert.Len(t, got, len(breaker.Knobs()))
	assert.Equal(t, 30001.5, got["leaseTtlMs"])
	assert.Equal(t, 30000.0, got["fleetWindowMs"])
	assert.Equal(t, 2000.0, got["rateLimitDefaultMs"])
	assert.Equal(t, 0.2, got["retryBudget"])
	assert.Equal(t, int64(3), got["retryBudgetMin"])
	assert.Equal(t, false, got["shadow"])
}

// TestStateFields checks the state's JSON form: breaker.State's fields by
// the names knobs.gen.ts declares, empty slices as [], phases as numbers.
func TestStateFields(t *testing.T) {
	t.Parallel()
	var s breaker.State
	s.Reporters = []breaker.Reporter{{ID: "a", At: 7}}
	b, err := json.Marshal(toState(s))
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Len(t, got, reflect.TypeFor[breaker.State]().NumField())
	assert.Equal(t, 0.0, got["phase"])
	assert.Equal(t, []any{}, got["leases"])
	assert.Equal(t, []any{map[string]any{"id": "a", "at": 7.0}}, got["reporters"])
	assert.Equal(t, "", got["lastErrorCode"])
	assert.Contains(t, got["window"], "prevCalls")
}
