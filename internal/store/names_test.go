package store

import (
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/store/schema"
)

// TestLuaConstantsMatchTheModel holds the scripts' folded constants
// (lua/schema.lua, generated from internal/store/schema) to
// internal/breaker's enums, name by name.
func TestLuaConstantsMatchTheModel(t *testing.T) {
	t.Parallel()
	upper := func(s string) string { return strings.ToUpper(s) }
	want := map[string]int{}
	for _, d := range []breaker.Decision{breaker.Allow, breaker.AllowProbe, breaker.Deny} {
		want["DECISION."+upper(d.String())] = int(d)
	}
	for r := breaker.ReasonNone; r <= breaker.ReasonThrottled; r++ {
		want["REASON."+upper(r.String())] = int(r)
	}
	for _, p := range []breaker.Phase{breaker.Closed, breaker.Open, breaker.HalfOpen} {
		want["PHASE."+upper(p.String())] = int(p)
	}
	for c := breaker.CauseNone; c <= breaker.CauseOverrideCleared; c++ {
		want["CAUSE."+upper(c.String())] = int(c)
	}
	for o := breaker.OutcomeSuccess; o <= breaker.OutcomeCanceled; o++ {
		want["OUTCOME."+upper(o.String())] = int(o)
	}
	for _, o := range []breaker.Override{breaker.NoOverride, breaker.ForcedOpen, breaker.ForcedClosed} {
		want["OVERRIDE."+upper(o.String())] = int(o)
	}
	want["LIMIT.MAX_COUNT"], want["LIMIT.MAX_REOPENS"] = breaker.MaxCount, breaker.MaxReopens
	want["LIMIT.THROTTLE_RETRY_AFTER"] = breaker.ThrottleRetryAfter
	for name, code := range want {
		assert.Equal(t, strconv.Itoa(code), luaConstants[name], name)
	}
	for name := range luaConstants {
		group, _, _ := strings.Cut(name, ".")
		switch group {
		case "DECISION", "REASON", "PHASE", "CAUSE", "OUTCOME", "OVERRIDE", "LIMIT":
			assert.Contains(t, want, name, "a code the model does not have")
		}
	}
	// force.lua's operations are the overrides and RESET.
	assert.Equal(t, int(breaker.NoOverride), forceClear)
	assert.Equal(t, int(breaker.ForcedOpen), forceOpen)
	assert.Equal(t, int(breaker.ForcedClosed), forceClosed)
}

// scriptFiles are the scripts' parts but the generated schema.lua.
func scriptFiles(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, fs.WalkDir(luaFiles, "lua", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path == "lua/schema.lua" {
			return err
		}
		b, err := luaFiles.ReadFile(path)
		out[path] = string(b)
		return err
	}))
	require.Contains(t, out, "lua/admit.lua")
	return out
}

// codeLines are src's lines without their comments, numbered from 1.
func codeLines(src string) []string {
	lines := strings.Split(src, "\n")
	for i, l := range lines {
		lines[i], _ = splitComment(l)
	}
	return lines
}

// TestOnlyTheSchemaSpellsTheBoundary: no script but the generated
// lua/schema.lua spells a state hash field's short name, and none indexes
// a policy, state or reply value by a bare number (v[3], f[1], out[n + 2]):
// each goes through schema.lua's names (FIELD, POLICY_HEAD, *_AT,
// policy_table).
func TestOnlyTheSchemaSpellsTheBoundary(t *testing.T) {
	t.Parallel()
	short := map[string]bool{}
	for _, f := range append(schema.State(), schema.HashExtras()...) {
		short[f.Hash] = true
	}
	quoted := regexp.MustCompile(`'([a-z]+)'`)
	// (w, an HSET's arguments, is no value; reply.lua writes the events'
	// from, to, cause, the one layout that is not a named reply.)
	bare := regexp.MustCompile(`\b(v|f|out)\[\d+\]|\bout\[n \+ \d+\]`)
	for path, src := range scriptFiles(t) {
		for i, l := range codeLines(src) {
			for _, m := range quoted.FindAllStringSubmatch(l, -1) {
				assert.False(t, short[m[1]], "%s:%d spells the hash field %q: use FIELD", path, i+1, m[1])
			}
			if path != "lua/prelude/reply.lua" {
				assert.NotRegexp(t, bare, l, "%s:%d indexes a value by a bare number", path, i+1)
			}
		}
	}
}

// TestPolicyHeadIsNamedInOrder: each fast path's string.match of
// POLICY_HEAD names the values it captures as schema.Policy does, in order
// ('_' for one it skips).
func TestPolicyHeadIsNamedInOrder(t *testing.T) {
	t.Parallel()
	head := schema.FastHead()
	for i, f := range schema.Policy()[:len(head)] {
		require.Equal(t, head[i], f.Name)
	}
	match := regexp.MustCompile(`local ([a-z_, ]+) = string\.match\([^,]+, POLICY_HEAD\)`)
	found := 0
	for path, src := range scriptFiles(t) {
		for _, m := range match.FindAllStringSubmatch(src, -1) {
			found++
			names := strings.Split(m[1], ", ")
			require.LessOrEqual(t, len(names), len(head), path)
			for i, n := range names {
				if n != "_" {
					assert.Equal(t, head[i], n, "%s: value %d of POLICY_HEAD", path, i+1)
				}
			}
		}
	}
	assert.Equal(t, 2, found, "admit_fast.lua and report_fast.lua")
}

// TestEveryNameIsFolded: every script loads (loadScript panics on a name
// the schema lacks) and, once folded, names no constant group.
func TestEveryNameIsFolded(t *testing.T) {
	t.Parallel()
	for _, sc := range []*luaScript{scriptAdmit, scriptReport, scriptForce, scriptExtend} {
		for _, l := range codeLines(sc.src) {
			assert.NotRegexp(t, `\b(FIELD|DECISION|REASON|PHASE|CAUSE|STATUS|[A-Z]+_AT)\.`, l)
		}
	}
	_, err := foldConstants("lua/x.lua", "local a = 1\nif PHASE.CLOSD then end")
	require.EqualError(t, err, "store: lua/x.lua:2: PHASE.CLOSD is not in lua/schema.lua")
	got, err := foldConstants("lua/x.lua", "x = FIELD.phase .. s.PHASE.CLOSED -- PHASE.CLOSD\ny = 'PHASE.OPEN'")
	require.NoError(t, err)
	assert.Equal(t, "x = 'ph' .. s.PHASE.CLOSED -- PHASE.CLOSD\ny = 'PHASE.OPEN'", got)
}
