package store_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// luaTable reads `local NAME = {A = 1, B = 2, ...}` out of a script.
func luaTable(t *testing.T, src, name string) map[string]int {
	t.Helper()
	m := regexp.MustCompile(`(?s)local ` + name + ` = \{(.*?)\}`).FindStringSubmatch(src)
	require.NotNil(t, m, "table %s", name)
	out := map[string]int{}
	for _, kv := range regexp.MustCompile(`([A-Z_]+) = (\d+)`).FindAllStringSubmatch(m[1], -1) {
		n, err := strconv.Atoi(kv[2])
		require.NoError(t, err)
		out[kv[1]] = n
	}
	return out
}

// TestLuaConstantsMatchTheModel holds the scripts' named constants to
// internal/breaker's enums, name by name.
func TestLuaConstantsMatchTheModel(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("lua/prelude.lua")
	require.NoError(t, err)
	src := string(b)
	upper := func(s string) string { return strings.ToUpper(s) }

	want := map[string]int{}
	for _, d := range []breaker.Decision{breaker.Allow, breaker.AllowProbe, breaker.Deny} {
		want[upper(d.String())] = int(d)
	}
	assert.Equal(t, want, luaTable(t, src, "DECISION"))

	want = map[string]int{}
	for r := breaker.ReasonNone; r <= breaker.ReasonOverloaded; r++ {
		want[upper(r.String())] = int(r)
	}
	assert.Equal(t, want, luaTable(t, src, "REASON"))

	want = map[string]int{}
	for _, p := range []breaker.Phase{breaker.Closed, breaker.Open, breaker.HalfOpen} {
		want[upper(p.String())] = int(p)
	}
	assert.Equal(t, want, luaTable(t, src, "PHASE"))

	want = map[string]int{}
	for c := breaker.CauseNone; c <= breaker.CauseForceExpired; c++ {
		want[upper(c.String())] = int(c)
	}
	assert.Equal(t, want, luaTable(t, src, "CAUSE"))

	assert.Equal(t, map[string]int{
		"SUCCESS": int(breaker.OutcomeSuccess), "TRANSIENT_FAILURE": int(breaker.OutcomeTransientFailure),
		"RATE_LIMITED": int(breaker.OutcomeRateLimited), "OVERLOADED": int(breaker.OutcomeOverloaded),
		"QUOTA_EXHAUSTED": int(breaker.OutcomeQuotaExhausted), "AUTH_FAILURE": int(breaker.OutcomeAuthFailure),
		"CLIENT_ERROR": int(breaker.OutcomeClientError), "CANCELED": int(breaker.OutcomeCanceled),
	}, luaTable(t, src, "OUTCOME"))
	assert.Equal(t, map[string]int{
		"NONE": int(breaker.NoOverride), "FORCED_OPEN": int(breaker.ForcedOpen), "FORCED_CLOSED": int(breaker.ForcedClosed),
	}, luaTable(t, src, "OVERRIDE"))
	assert.Contains(t, src, "MAX_COUNT, MAX_REOPENS = "+strconv.Itoa(breaker.MaxCount)+", "+strconv.Itoa(breaker.MaxReopens))
}
