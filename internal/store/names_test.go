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
	for r := breaker.ReasonNone; r <= breaker.ReasonThrottled; r++ {
		want[upper(r.String())] = int(r)
	}
	assert.Equal(t, want, luaTable(t, src, "REASON"))

	want = map[string]int{}
	for _, p := range []breaker.Phase{breaker.Closed, breaker.Open, breaker.HalfOpen} {
		want[upper(p.String())] = int(p)
	}
	assert.Equal(t, want, luaTable(t, src, "PHASE"))

	want = map[string]int{}
	for c := breaker.CauseNone; c <= breaker.CauseOverrideCleared; c++ {
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

// TestFastPathsUseThePreludesNames holds the fast paths, which run before
// the prelude and so repeat some of its names, to it: every field they
// read or write is one of HASH_FIELDS (or EXPIRES_AT), and their numbers
// are the model's.
func TestFastPathsUseThePreludesNames(t *testing.T) {
	t.Parallel()
	read := func(name string) string {
		b, err := os.ReadFile("lua/" + name)
		require.NoError(t, err)
		return string(b)
	}
	prelude := read("prelude.lua")
	m := regexp.MustCompile(`(?s)local HASH_FIELDS = \{(.*?)\}`).FindStringSubmatch(prelude)
	require.NotNil(t, m)
	fields := map[string]bool{}
	for _, f := range regexp.MustCompile(`'([a-z]+)'`).FindAllStringSubmatch(m[1], -1) {
		fields[f[1]] = true
	}
	require.Contains(t, prelude, "local EXPIRES_AT = 'xp'")
	fields["xp"] = true
	writes := 0
	for _, name := range []string{"admit_fast.lua", "report_fast.lua"} {
		src := read(name)
		calls := regexp.MustCompile(`redis\.call\('(HMGET|HGET)', [A-Za-z0-9_\[\] *+-]+, ([^)]*)\)`).FindAllStringSubmatch(src, -1)
		require.NotEmpty(t, calls, name)
		for _, c := range calls {
			for _, f := range regexp.MustCompile(`'([a-z]+)'`).FindAllStringSubmatch(c[2], -1) {
				assert.True(t, fields[f[1]], "%s reads %q, not a field of the prelude", name, f[1])
			}
		}
		for _, f := range regexp.MustCompile(`w\[n - 1\], w\[n\] = '([a-z]+)'`).FindAllStringSubmatch(src, -1) {
			assert.True(t, fields[f[1]], "%s writes %q, not a field of the prelude", name, f[1])
			writes++
		}
	}
	assert.Equal(t, 11, writes, "report_fast.lua's writes: sc cf ls lo le lb wcc fcf fcq fca xp")
	// The fleet window's rotation, written as one (its fields the
	// prelude's).
	for _, f := range []string{"fs", "fpf", "fpr", "fpq", "fpa", "fcr", "fcq", "fca", "fcf"} {
		assert.True(t, fields[f], f)
		assert.Contains(t, read("report_fast.lua"), "'"+f+"'")
	}
	fast := read("report_fast.lua")
	// The window's rotation and the time of the update, written as one.
	assert.Contains(t, fast, "'ws', string.format('%d', start), 'wpc', pc, 'wpf', pf, 'wcf', '0'")
	assert.Contains(t, fast, "local w, n = {'uat', string.format('%d', now)}, 2")
	for _, f := range []string{"ws", "wpc", "wpf", "wcf", "uat"} {
		assert.True(t, fields[f], f)
	}
	assert.Contains(t, fast, "local CLOSED, NO_OVERRIDE, SUCCESS, APPLIED, MAX_COUNT = '"+
		strconv.Itoa(int(breaker.Closed))+"', '"+strconv.Itoa(int(breaker.NoOverride))+"', '"+
		strconv.Itoa(int(breaker.OutcomeSuccess))+"', 1, "+strconv.Itoa(breaker.MaxCount))
	admit := read("admit_fast.lua")
	assert.Contains(t, admit, "local CLOSED, OPEN, NO_OVERRIDE = "+strconv.Itoa(int(breaker.Closed))+", "+
		strconv.Itoa(int(breaker.Open))+", "+strconv.Itoa(int(breaker.NoOverride)))
	assert.Contains(t, admit, "local ALLOW, DENY = "+strconv.Itoa(int(breaker.Allow))+", "+strconv.Itoa(int(breaker.Deny)))
}
