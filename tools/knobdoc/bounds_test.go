package main

import (
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// decimals are decimal strings as --set passes them: edges, then random.
func decimals() []string {
	out := []string{"0", "00", ".0", "0.0", "1", "01", "1.0", "1.00001", "0.99999", "9", "9.99", "10", "10.0", "10.01", "011",
		"100", "99", "101", "0.00005", "0.000049999", "0.00004", "0.0001", ".00005", "1.5", "1.49", "12.25", "12.24", "12.3", "13", "0.1", "0.09"}
	rng := rand.New(rand.NewPCG(24, 0x7e57))
	digits := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteByte(byte('0' + rng.IntN(10)))
		}
		return b.String()
	}
	for range 800 {
		whole, frac := digits(rng.IntN(4)), digits(rng.IntN(8))
		switch {
		case frac != "":
			out = append(out, whole+"."+frac)
		case whole != "":
			out = append(out, whole)
		}
	}
	return out
}

func rat(t *testing.T, s string) *big.Rat {
	t.Helper()
	r, ok := new(big.Rat).SetString(s)
	require.True(t, ok, s)
	return r
}

// TestDecimalPatterns: the patterns a ratio's decimal string is held to
// say what the numbers say, on edges and 800 random decimals.
func TestDecimalPatterns(t *testing.T) {
	t.Parallel()
	base := regexp.MustCompile(decimalPattern)
	in := decimals()
	nums := make([]*big.Rat, len(in))
	for i, s := range in {
		require.True(t, base.MatchString(s), s)
		nums[i] = rat(t, s)
	}
	for _, m := range []int64{1, 10, 37, 100, 1000} {
		for _, exclusive := range []bool{false, true} {
			re := regexp.MustCompile(decimalAtMost(m, exclusive))
			limit := big.NewRat(m, 1)
			for i, s := range in {
				c := nums[i].Cmp(limit)
				if want := c < 0 || (c == 0 && !exclusive); re.MatchString(s) != want {
					t.Errorf("%s at most %d (exclusive %t): want %t from %s", s, m, exclusive, want, re)
				}
			}
		}
	}
	for _, f := range []string{"0.00005", "1", "1.5", "0.1", "12.25", "0.01", "10"} {
		re := regexp.MustCompile(decimalOffOrAtLeast(f))
		floor := rat(t, f)
		for i, s := range in {
			if want := nums[i].Sign() == 0 || nums[i].Cmp(floor) >= 0; re.MatchString(s) != want {
				t.Errorf("%s 0 or at least %s: want %t from %s", s, f, want, re)
			}
		}
	}
}

// singleKnob says whether a Validate error is about its knob alone: its
// message names no other knob (the rules between knobs are the templates').
func singleKnob(err error) (*breaker.Knob, bool) {
	var pe *breaker.PolicyError
	if !errors.As(err, &pe) {
		return nil, false
	}
	names := 0
	pe.Message(func(k *breaker.Knob) string {
		if k != pe.Knob {
			names++
		}
		return k.Key()
	})
	return pe.Knob, names == 0
}

// TestSingleKnobRules holds offOrAtLeast and positiveSpans to
// Policy.Validate: within each knob's own bounds, Validate refuses a value
// of one knob for that knob alone exactly when the schema's extra rules
// do, so a rule Validate gains on one value fails here until the schema
// carries it.
func TestSingleKnobRules(t *testing.T) {
	t.Parallel()
	for name := range offOrAtLeast {
		_, ok := breaker.KnobByKey(strings.ReplaceAll(name, "-", "_"))
		assert.True(t, ok, "offOrAtLeast names %s, which is no knob", name)
	}
	for name := range positiveSpans {
		k, ok := breaker.KnobByKey(strings.ReplaceAll(name, "-", "_"))
		if assert.True(t, ok, "positiveSpans names %s, which is no knob", name) {
			assert.Equal(t, breaker.Span, k.Kind)
		}
	}
	for _, k := range breaker.Knobs() {
		if k.Kind == breaker.Switch {
			continue
		}
		probes := []float64{k.Min, k.Max, 0}
		step := map[breaker.Kind]float64{breaker.Count: 1, breaker.Ratio: 0.000001, breaker.Span: float64(time.Millisecond)}[k.Kind]
		probes = append(probes, k.Min+step, k.Max-step, (k.Min+k.Max)/2)
		if k.Kind == breaker.Ratio {
			probes = append(probes, 0.00004, 0.00005, 0.0001, 0.5, 0.999, 1, 1.001)
		}
		_, f, hasFloor := floor(k)
		if hasFloor {
			probes = append(probes, f, f*0.98, f*1.02)
		}
		for _, v := range probes {
			if k.Kind == breaker.Span {
				v = float64(time.Duration(v).Truncate(time.Millisecond)) // whole ms: the template's
			}
			if v < k.Min || v > k.Max || (k.MaxExclusive && v == k.Max) {
				continue // the knob's own bounds: the table's
			}
			p := breaker.DefaultPolicy()
			k.Set(&p, v)
			refused, alone := singleKnob(p.Validate())
			validateRefuses := refused == k && alone
			schemaRefuses := (hasFloor && v != 0 && v < f) || (positive(k) && v <= 0)
			assert.Equal(t, validateRefuses, schemaRefuses, "%s = %s: Validate says %v", k.Name, k.String(v), p.Validate())
		}
	}
}

func TestHelpers(t *testing.T) {
	t.Parallel()
	doc := "a\n" + helpersBegin + "stale\n" + helpersEnd + "b\n"
	out, err := Helpers([]byte(doc))
	require.NoError(t, err)
	s := string(out)
	assert.True(t, strings.HasPrefix(s, "a\n"+helpersBegin) && strings.HasSuffix(s, helpersEnd+"b\n"), s)
	assert.NotContains(t, s, "stale")
	for _, k := range breaker.Knobs() {
		row := fmt.Sprintf("\n%s: {value: %s, kind: %s", k.Key(), ValueName(k), tsKind(k))
		if k.Kind == breaker.Span {
			row += fmt.Sprintf(", maxMs: %d, max: %s", time.Duration(k.Max).Milliseconds(), short(k.String(k.Max)))
		}
		assert.Contains(t, s, row+"}\n")
	}
	assert.Contains(t, s, "\nquota_block: {value: quotaBlock, kind: span, maxMs: 604800000, max: 168h}\n")
	assert.Contains(t, s, "{{- define \"cooldownd.maxWindow\" -}}\n10m\n")
	again, err := Helpers(out)
	require.NoError(t, err)
	assert.Equal(t, s, string(again))
	for name, bad := range map[string]string{"none": "a\n", "twice": doc + doc, "reversed": helpersEnd + helpersBegin} {
		_, err := Helpers([]byte(bad))
		assert.Error(t, err, name)
	}
}
