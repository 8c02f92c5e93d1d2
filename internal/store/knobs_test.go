package store

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// preludeFields reads the policy table of bind in prelude.lua: each field
// of P and the 1-based position of policyArg's number it is read from.
func preludeFields(t *testing.T) map[string]int {
	t.Helper()
	src, err := os.ReadFile("lua/prelude.lua")
	require.NoError(t, err)
	table := regexp.MustCompile(`(?s)\n  P = \{(.*?)\n  \}`).FindSubmatch(src)
	require.NotNil(t, table, "prelude.lua binds P = {...} in bind")
	fields := map[string]int{}
	for _, m := range regexp.MustCompile(`(\w+) = v\[(\d+)\]`).FindAllSubmatch(table[1], -1) {
		n, err := strconv.Atoi(string(m[2]))
		require.NoError(t, err)
		fields[string(m[1])] = n
	}
	require.NotEmpty(t, fields)
	return fields
}

// TestEveryKnobIsPacked: every knob of breaker.Knobs is packed by policyArg
// at the position from which prelude.lua's P reads the knob's Script
// field, and P reads nothing else. A knob added to the table but not to
// policyArg, to P, or to both at different positions fails here.
func TestEveryKnobIsPacked(t *testing.T) {
	t.Parallel()
	fields := preludeFields(t)
	s := &Store{idle: 3 * time.Hour, history: 7}
	base := breaker.DefaultPolicy()
	baseArg := strings.Split(s.policyArg(base), ",")
	assert.Len(t, baseArg, len(breaker.Knobs())+2, "every knob, the idle TTL and the history cap")
	assert.Equal(t, strconv.FormatInt((3*time.Hour).Milliseconds(), 10), baseArg[0], "IDLE is v[1]")
	assert.Equal(t, "7", baseArg[len(baseArg)-1], "HCAP is the last")

	read := map[string]bool{}
	for _, k := range breaker.Knobs() {
		t.Run(k.Name, func(t *testing.T) {
			pos, ok := fields[k.Script]
			require.True(t, ok, "prelude.lua's P has no %s for --%s", k.Script, k.Name)
			read[k.Script] = true
			v := map[breaker.Kind]float64{breaker.Count: k.Min + 1, breaker.Ratio: 0.375, breaker.Span: float64(11 * time.Second), breaker.Switch: 1}[k.Kind]
			p := base
			k.Set(&p, v)
			require.NotEqual(t, base, p)
			arg := strings.Split(s.policyArg(p), ",")
			require.Len(t, arg, len(baseArg))
			for i := range arg {
				if i == pos-1 {
					assert.NotEqual(t, baseArg[i], arg[i], "--%s is packed at v[%d], where P.%s is read", k.Name, pos, k.Script)
				} else {
					assert.Equal(t, baseArg[i], arg[i], "--%s changes v[%d] only, not v[%d]", k.Name, pos, i+1)
				}
			}
			switch k.Kind {
			case breaker.Count:
				assert.Equal(t, k.String(v), arg[pos-1], "a count as it is")
			case breaker.Span:
				assert.Equal(t, strconv.FormatInt(time.Duration(v).Milliseconds(), 10), arg[pos-1], "a duration in ms")
			case breaker.Switch:
				assert.Equal(t, "1", arg[pos-1], "a switch as 1 or 0")
			}
		})
	}
	for name := range fields {
		assert.True(t, read[name], "P.%s is read from the argument but is no knob's Script field", name)
	}
}
