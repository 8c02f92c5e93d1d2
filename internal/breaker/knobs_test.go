package breaker

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKnobFields: every field of Policy is exactly one knob's, and each
// knob reads and writes its own field only.
func TestKnobFields(t *testing.T) {
	t.Parallel()
	fields := reflect.TypeFor[Policy]().NumField()
	require.Len(t, knobs, fields, "one knob per Policy field")
	owner := map[int]string{}
	for _, k := range knobs {
		before := DefaultPolicy()
		after := before
		v := k.Min + 1 // differs from zero and from every default below
		if k.Kind == Span {
			v = float64(3 * time.Millisecond)
		}
		if k.Kind == Ratio {
			v = 0.375
		}
		k.Set(&after, v)
		assert.Equal(t, v, k.Get(after), "%s reads what it wrote", k.Name)
		var changed []int
		bv, av := reflect.ValueOf(before), reflect.ValueOf(after)
		for i := range fields {
			if !reflect.DeepEqual(bv.Field(i).Interface(), av.Field(i).Interface()) {
				changed = append(changed, i)
			}
		}
		require.Len(t, changed, 1, "%s sets one field", k.Name)
		if prev, dup := owner[changed[0]]; dup {
			t.Errorf("%s and %s set the same field", prev, k.Name)
		}
		owner[changed[0]] = k.Name
	}
}

func TestKnobNames(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, k := range Knobs() {
		assert.Regexp(t, `^[a-z]+(-[a-z]+)*$`, k.Name)
		assert.False(t, seen[k.Name], "%s twice", k.Name)
		seen[k.Name] = true
		assert.Equal(t, "--"+k.Name, k.Flag())
		assert.Equal(t, strings.ReplaceAll(k.Name, "-", "_"), k.Key())
		got, ok := KnobByKey(k.Key())
		assert.True(t, ok)
		assert.Same(t, k, got)
		assert.NotEmpty(t, k.Doc)
		assert.NotEmpty(t, k.Script)
		assert.Contains(t, []Kind{Count, Ratio, Span, Switch}, k.Kind)
		assert.LessOrEqual(t, k.Min, k.Max)
	}
	_, ok := KnobByKey("rate_limit_default")
	assert.False(t, ok, "the Go field's old name is no key")
	_, ok = KnobByKey("rate-limit-cooldown")
	assert.False(t, ok, "keys have underscores")
	k, _ := KnobByKey("rate_limit_cooldown")
	assert.Equal(t, "rate-limit-cooldown", k.Name)
	assert.Equal(t, len(knobs), len(Knobs()))
	Knobs()[0] = nil
	assert.NotNil(t, knobs[0], "Knobs returns a copy")
}

// TestDefaultsWithinBounds: every default is inside its knob's own bounds
// and survives String and Parse unchanged (the flags' --help shows it so).
func TestDefaultsWithinBounds(t *testing.T) {
	t.Parallel()
	p := DefaultPolicy()
	for _, k := range knobs {
		v := k.Get(p)
		assert.Nil(t, k.check(p), k.Name)
		back, err := k.Parse(k.String(v))
		require.NoError(t, err, k.Name)
		assert.Equal(t, v, back, k.Name)
	}
}

func TestKnobParse(t *testing.T) {
	t.Parallel()
	count, _ := KnobByKey("max_probes")
	ratio, _ := KnobByKey("jitter")
	span, _ := KnobByKey("lease_ttl")
	tests := []struct {
		k    *Knob
		in   string
		want float64
		err  string
	}{
		{count, "3", 3, ""},
		{count, "-2", -2, ""},
		{count, "2.5", 0, `"2.5" is not an integer`},
		{count, "many", 0, `"many" is not an integer`},
		{ratio, "0.25", 0.25, ""},
		{ratio, "1", 1, ""},
		{ratio, "lots", 0, `"lots" is not a number such as 0.5`},
		{span, "1m30s", float64(90 * time.Second), ""},
		{span, "0", 0, ""},
		{span, "-1s", float64(-time.Second), ""},
		{span, "soon", 0, `"soon" is not a duration such as 250ms`},
		{span, "10", 0, `"10" is not a duration`},
	}
	for _, tt := range tests {
		t.Run(tt.k.Name+"/"+tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := tt.k.Parse(tt.in)
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestKnobBounds(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		"consecutive_failures": "[0, 100000]", "failure_rate": "[0, 1]", "min_calls": "[0, 100000]",
		"window": "[0s, 168h0m0s]", "jitter": "[0, 1)", "max_probes": "[1, 16]", "lease_ttl": "[1ms, 168h0m0s]",
	}
	for key, b := range want {
		k, ok := KnobByKey(key)
		require.True(t, ok, key)
		assert.Equal(t, b, k.Bounds(), key)
	}
}

// TestPolicyErrorNames: an error names every knob it mentions the way the
// caller asks, and by its file key by default; never by a Go field name.
func TestPolicyErrorNames(t *testing.T) {
	t.Parallel()
	flag := func(k *Knob) string { return k.Flag() }
	tests := []struct {
		name      string
		edit      func(p *Policy)
		knob      string
		key, flag string
	}{
		{"own bound", func(p *Policy) { p.Jitter = 1 }, "jitter",
			"jitter must be in [0, 1), got 1", "--jitter must be in [0, 1), got 1"},
		{"NaN", func(p *Policy) { p.FailureRate = math.NaN() }, "failure_rate",
			"failure_rate must be in [0, 1], got NaN", "--failure-rate must be in [0, 1], got NaN"},
		{"negative span", func(p *Policy) { p.RateLimitCooldown = -time.Second }, "rate_limit_cooldown",
			"rate_limit_cooldown must not be negative, got -1s", "--rate-limit-cooldown must not be negative, got -1s"},
		{"sub-millisecond", func(p *Policy) { p.LeaseTTL = 1500 * time.Microsecond }, "lease_ttl",
			"lease_ttl must be whole milliseconds, got 1.5ms", "--lease-ttl must be whole milliseconds, got 1.5ms"},
		{"two knobs", func(p *Policy) { p.OpenBase, p.OpenMax = time.Minute, time.Second }, "open_max",
			"open_max (1s) must be at least open_base (1m0s)", "--open-max (1s) must be at least --open-base (1m0s)"},
		{"while on", func(p *Policy) { p.MinCalls = 0 }, "min_calls",
			"min_calls must be in [1, 100000] while failure_rate is on, got 0", "--min-calls must be in [1, 100000] while --failure-rate is on, got 0"},
		{"window while on", func(p *Policy) { p.Window = 11 * time.Minute }, "window",
			"window must be in [1ms, 10m0s] while failure_rate is on, got 11m0s", "--window must be in [1ms, 10m0s] while --failure-rate is on, got 11m0s"},
		{"basis point", func(p *Policy) { p.FailureRate = 0.00001 }, "failure_rate",
			"failure_rate must be at least 0.0001 (one basis point) or 0 to disable, got 1e-05", "--failure-rate must be at least 0.0001"},
		{"open base zero", func(p *Policy) { p.OpenBase = 0 }, "open_base",
			"open_base must be positive, got 0s", "--open-base must be positive, got 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := DefaultPolicy()
			tt.edit(&p)
			err := p.Validate()
			require.ErrorIs(t, err, ErrInvalidPolicy)
			var pe *PolicyError
			require.True(t, errors.As(err, &pe))
			assert.Equal(t, tt.knob, pe.Knob.Key())
			assert.Equal(t, "breaker: invalid policy: "+tt.key, err.Error())
			assert.True(t, strings.HasPrefix(pe.Message(flag), tt.flag), "%q", pe.Message(flag))
			assert.Equal(t, tt.key, pe.Message((*Knob).Key))
		})
	}
}
