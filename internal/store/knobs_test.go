package store

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/store/schema"
)

// TestEveryKnobIsPacked: every knob of breaker.Knobs is one value of the
// policy argument, at the position schema.Policy gives it (policy_table in
// lua/schema.lua names it P.<Script> there), in its unit; the idle TTL is
// the first and the history cap the last. A knob added to the table but
// packed elsewhere, or not at all, fails here.
func TestEveryKnobIsPacked(t *testing.T) {
	t.Parallel()
	s := &Store{idle: 3 * time.Hour, history: 7}
	base := breaker.DefaultPolicy()
	baseArg := strings.Split(s.policyArg(base), ",")
	fields := schema.Policy()
	require.Len(t, baseArg, len(breaker.Knobs())+2, "every knob, the idle TTL and the history cap")
	require.Len(t, fields, len(baseArg))
	assert.Equal(t, strconv.FormatInt((3*time.Hour).Milliseconds(), 10), baseArg[0], "P.idle is v[1]")
	assert.Equal(t, "idle", fields[0].Name)
	assert.Equal(t, "7", baseArg[len(baseArg)-1], "P.history is the last")
	assert.Equal(t, "history", fields[len(fields)-1].Name)
	pos := map[string]int{}
	for i, f := range fields {
		pos[f.Name] = i + 1
		assert.Equal(t, strconv.Itoa(i+1), luaConstants["POLICY."+f.Name])
	}
	for _, k := range breaker.Knobs() {
		t.Run(k.Name, func(t *testing.T) {
			at, ok := pos[k.Script]
			require.True(t, ok, "schema.Policy has no %s for --%s", k.Script, k.Name)
			v := map[breaker.Kind]float64{breaker.Count: k.Min + 1, breaker.Ratio: 0.375, breaker.Span: float64(11 * time.Second), breaker.Switch: 1}[k.Kind]
			p := base
			k.Set(&p, v)
			require.NotEqual(t, base, p)
			arg := strings.Split(s.policyArg(p), ",")
			require.Len(t, arg, len(baseArg))
			for i := range arg {
				if i == at-1 {
					assert.NotEqual(t, baseArg[i], arg[i], "--%s is packed at v[%d], where P.%s is read", k.Name, at, k.Script)
				} else {
					assert.Equal(t, baseArg[i], arg[i], "--%s changes v[%d] only, not v[%d]", k.Name, at, i+1)
				}
			}
			switch fields[at-1].Unit {
			case schema.Integer:
				assert.Equal(t, k.String(v), arg[at-1], "a count as it is")
			case schema.Millis:
				assert.Equal(t, strconv.FormatInt(time.Duration(v).Milliseconds(), 10), arg[at-1], "a duration in ms")
			case schema.Flag:
				assert.Equal(t, "1", arg[at-1], "a switch as 1 or 0")
			case schema.BasisPoints:
				assert.Equal(t, strconv.FormatInt(int64(math.Round(v*10000)), 10), arg[at-1], "basis points")
			case schema.Float:
				assert.Equal(t, strconv.FormatFloat(v, 'g', -1, 64), arg[at-1], "a float")
			}
		})
	}
	// The two in basis points are the model's.
	assert.Equal(t, strconv.FormatInt(base.RateBasisPoints(), 10), baseArg[pos["rate_bp"]-1])
	assert.Equal(t, strconv.FormatInt(base.RetryBudgetBasisPoints(), 10), baseArg[pos["budget_bp"]-1])
}
