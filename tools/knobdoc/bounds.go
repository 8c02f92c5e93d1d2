package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// Policy.Validate's rules on one knob beyond the knob's own bounds
// (internal/breaker/policy.go), which the chart's schema carries with the
// table's bounds: every rule on a single value is the schema's, so that the
// chart's templates keep only what a JSON schema cannot say (decision
// 0046). TestSingleKnobRules holds these to Validate.
var (
	// offOrAtLeast: 0 turns the knob's rule off, else it is at least this
	// (a rate or budget of at least one basis point once rounded; the
	// throttle's K of at least 1).
	offOrAtLeast = map[string]string{"failure-rate": "0.00005", "retry-budget": "0.00005", "throttle-k": "1"}
	// positiveSpans must be above 0 (a span whose own Min is above 0 is
	// positive too).
	positiveSpans = map[string]bool{"open-base": true}
)

// decimalPattern is what --set passes for a decimal: digits with at most
// one point inside them.
const decimalPattern = `^[0-9]*\.?[0-9]+$`

// positive says whether a span must be above 0.
func positive(k *breaker.Knob) bool {
	return k.Kind == breaker.Span && (k.Min > 0 || positiveSpans[k.Name])
}

// floor is the knob's offOrAtLeast, if any, as a number.
func floor(k *breaker.Knob) (string, float64, bool) {
	s, ok := offOrAtLeast[k.Name]
	if !ok {
		return "", 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		panic(fmt.Sprintf("knobdoc: offOrAtLeast[%s] = %q is no number", k.Name, s))
	}
	return s, f, true
}

// digitsAbove is the character class of the digits above d, "" when none.
func digitsAbove(d byte) string {
	switch {
	case d == '9':
		return ""
	case d == '8':
		return "9"
	}
	return "[" + string(d+1) + "-9]"
}

// digitsBelow is the character class of the digits below d, "" when none.
func digitsBelow(d byte, from byte) string {
	switch {
	case d <= from:
		return ""
	case d == from+1:
		return string(from)
	}
	return "[" + string(from) + "-" + string(d-1) + "]"
}

// rest is n more digits.
func rest(n int) string {
	switch n {
	case 0:
		return ""
	case 1:
		return "[0-9]"
	}
	return "[0-9]{" + strconv.Itoa(n) + "}"
}

// intsUpTo is the alternatives of the integers 1 to m written without
// leading zeros (m ≥ 1, a string of digits without leading zeros).
func intsUpTo(m string) []string {
	var alts []string
	for l := 1; l < len(m); l++ {
		alts = append(alts, "[1-9]"+rest(l-1))
	}
	for i := range len(m) {
		from := byte('0')
		if i == 0 {
			from = '1'
		}
		if c := digitsBelow(m[i], from); c != "" {
			alts = append(alts, m[:i]+c+rest(len(m)-i-1))
		}
	}
	return append(alts, m)
}

// intsAbove is the alternatives of the integers above n written without
// leading zeros (n a string of digits without leading zeros, "0" for 0).
func intsAbove(n string) []string {
	if n == "0" {
		return []string{"[1-9][0-9]*"}
	}
	alts := []string{"[1-9][0-9]{" + strconv.Itoa(len(n)) + ",}"}
	for i := range len(n) {
		if c := digitsAbove(n[i]); c != "" {
			alts = append(alts, n[:i]+c+rest(len(n)-i-1))
		}
	}
	return alts
}

func group(alts []string) string { return "(" + strings.Join(alts, "|") + ")" }

// decimalAtMost is a pattern of the decimals (decimalPattern) at most the
// whole number m (below it when exclusive).
func decimalAtMost(m int64, exclusive bool) string {
	var alts []string
	if m > 1 {
		alts = append(alts, `^0*`+group(intsUpTo(strconv.FormatInt(m-1, 10)))+`?(\.[0-9]+)?$`)
	} else {
		alts = append(alts, `^0*(\.[0-9]+)?$`)
	}
	if !exclusive {
		alts = append(alts, `^0*`+strconv.FormatInt(m, 10)+`(\.0+)?$`)
	}
	return strings.Join(alts, "|")
}

// decimalOffOrAtLeast is a pattern of the decimals (decimalPattern) that
// are 0 or at least f (a positive decimal such as 0.00005 or 1).
func decimalOffOrAtLeast(f string) string {
	whole, frac, _ := strings.Cut(f, ".")
	whole = strings.TrimLeft(whole, "0")
	frac = strings.TrimRight(frac, "0")
	alts := []string{`^0*(\.0+)?$`} // off
	if whole == "" {
		whole = "0"
	}
	alts = append(alts, `^0*`+group(intsAbove(whole))+`(\.[0-9]+)?$`)
	if frac == "" {
		if whole != "0" {
			alts = append(alts, `^0*`+whole+`(\.[0-9]+)?$`)
		}
		return strings.Join(alts, "|")
	}
	var fr []string
	for i := range len(frac) {
		if c := digitsAbove(frac[i]); c != "" {
			fr = append(fr, frac[:i]+c)
		}
	}
	fr = append(fr, frac)
	intPart := `0*`
	if whole != "0" {
		intPart = `0*` + whole
	}
	return strings.Join(append(alts, `^`+intPart+`\.`+group(fr)+`[0-9]*$`), "|")
}
