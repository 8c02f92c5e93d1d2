package client

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxHint is the longest delay a header is read as (and a report sends):
// a valid value above it — a Retry-After of a billion seconds, a date years
// ahead — is a very long delay, capped to MaxHint, never garbage. It is
// also the longest retry_after cooldownd accepts.
const MaxHint = 24 * time.Hour

// maxHint is [MaxHint], for the parsers.
const maxHint = MaxHint

// ParseRetryAfter parses a Retry-After value (RFC 9110 §10.2.3) relative to now.
//
// Two forms are accepted:
//
//   - delay-seconds: ASCII digits, optionally followed by a '.' and more
//     digits ("120", "1.5"). Fractions are accepted because several providers
//     and SDKs send or parse them; they are rounded up to the next nanosecond,
//     never down. A sign, an exponent ("1e3"), a unit ("5s"), "NaN", "Inf",
//     a bare "." or trailing garbage are rejected.
//   - HTTP-date: IMF-fixdate, RFC 850 or asctime, as [http.ParseTime]
//     accepts them. A date in the past yields 0 with ok=true.
//
// Surrounding spaces and tabs are ignored (RFC 9110 field values exclude
// them), so "  5" is 5s. An empty value yields ok=false. A valid delay
// above [MaxHint], however many digits, yields MaxHint with ok=true.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return 0, false
	}
	if isDigit(v[0]) {
		return parseDecimal(v, time.Second)
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), maxHint), true
}

// ServerDelay returns the delay the response headers ask for, in the
// precedence of the providers' own SDKs (openai-python, anthropic-sdk,
// the Azure SDKs): the first valid one of retry-after-ms, then
// x-ms-retry-after-ms (Azure; values ≤ 0 such as -1 are ignored), then
// Retry-After. A precise millisecond hint wins over a coarse Retry-After,
// so "retry-after-ms: 2000" with "Retry-After: 120" is 2 s. ok=false when
// no header holds a valid value.
func ServerDelay(h http.Header, now time.Time) (time.Duration, bool) {
	if d, ok := parseMillis(h.Get("Retry-After-Ms"), false); ok {
		return d, true
	}
	if d, ok := parseMillis(h.Get("X-Ms-Retry-After-Ms"), true); ok {
		return d, true
	}
	return ParseRetryAfter(h.Get("Retry-After"), now)
}

// parseMillis parses a non-negative decimal number of milliseconds. With
// positive set, 0 is rejected too (Azure sends 0 and -1 for "no hint").
func parseMillis(v string, positive bool) (time.Duration, bool) {
	d, ok := parseDecimal(strings.Trim(v, " \t"), time.Millisecond)
	if !ok || (positive && d == 0) {
		return 0, false
	}
	return d, true
}

// ShouldRetryHeader reads the x-should-retry header sent by OpenAI and
// Anthropic: "true" or "false", case-insensitively, with surrounding spaces
// ignored. Any other value, or no header, yields ok=false.
func ShouldRetryHeader(h http.Header) (retry bool, ok bool) {
	v := strings.Trim(h.Get("X-Should-Retry"), " \t")
	switch {
	case strings.EqualFold(v, "true"):
		return true, true
	case strings.EqualFold(v, "false"):
		return false, true
	}
	return false, false
}

// anthropicLimits are the rate-limit families of anthropic-ratelimit-* headers.
var anthropicLimits = [...]string{"requests", "tokens", "input-tokens", "output-tokens"}

// ProactiveDelay reads provider rate-limit headers on a successful response
// and reports how long until an exhausted limit resets, so that every process
// can cool down before the first 429.
//
// OpenAI: x-ratelimit-remaining-{requests,tokens} equal to 0 with
// x-ratelimit-reset-{requests,tokens} as a Go-like duration ("6m0s", "1.5s",
// "20ms"). Anthropic: anthropic-ratelimit-{requests,tokens,input-tokens,
// output-tokens}-remaining equal to 0 with the matching -reset as an RFC 3339
// time. The result is the longest delay among exhausted limits, at most
// [MaxHint]. ok=false when no limit is exhausted with a valid reset that
// lies in the future, so ok implies d > 0.
func ProactiveDelay(h http.Header, now time.Time) (time.Duration, bool) {
	var best time.Duration
	for _, kind := range [...]string{"requests", "tokens"} {
		if !isZeroCount(h.Get("X-Ratelimit-Remaining-" + kind)) {
			continue
		}
		if d, ok := parseResetDuration(h.Get("X-Ratelimit-Reset-" + kind)); ok {
			best = max(best, d)
		}
	}
	for _, kind := range anthropicLimits {
		prefix := "Anthropic-Ratelimit-" + kind
		if !isZeroCount(h.Get(prefix + "-Remaining")) {
			continue
		}
		t, err := time.Parse(time.RFC3339, strings.TrimSpace(h.Get(prefix+"-Reset")))
		if err != nil {
			continue
		}
		best = max(best, min(t.Sub(now), maxHint))
	}
	return best, best > 0
}

// isZeroCount reports whether v is a remaining-count of exactly zero.
func isZeroCount(v string) bool {
	n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	return err == nil && n == 0
}

// resetUnits are the units of an OpenAI reset duration, longest first.
var resetUnits = [...]struct {
	name string
	unit time.Duration
}{{"h", time.Hour}, {"ms", time.Millisecond}, {"m", time.Minute}, {"s", time.Second}}

// parseResetDuration parses an OpenAI x-ratelimit-reset-* value: a sequence
// of decimal numbers each followed by a unit (h, m, s, ms), units strictly
// decreasing ("1h2m3.5s", "6m0s", "20ms"), or a bare "0". Signs, other units,
// repeated or out-of-order units are rejected; a value above [MaxHint] is
// MaxHint. Fractions are rounded up to the next nanosecond.
func parseResetDuration(s string) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if s == "0" {
		return 0, true
	}
	var total time.Duration
	last := time.Duration(1<<63 - 1)
	for s != "" {
		i := 0
		for i < len(s) && (isDigit(s[i]) || s[i] == '.') {
			i++
		}
		num, rest := s[:i], s[i:]
		matched := false
		for _, u := range resetUnits {
			if !strings.HasPrefix(rest, u.name) || u.unit >= last {
				continue
			}
			d, ok := parseDecimal(num, u.unit)
			if !ok {
				return 0, false
			}
			total, last, s, matched = min(total+d, maxHint), u.unit, rest[len(u.name):], true
			break
		}
		if !matched {
			return 0, false
		}
	}
	return total, last != time.Duration(1<<63-1)
}

// parseDecimal parses digits with an optional '.' and fraction digits, times
// unit, rounding any sub-nanosecond remainder up. A value above [maxHint]
// (any number of digits) is maxHint; it never overflows.
func parseDecimal(s string, unit time.Duration) (time.Duration, bool) {
	intPart, frac, hasDot := strings.Cut(s, ".")
	if intPart == "" || (hasDot && frac == "") {
		return 0, false
	}
	var n time.Duration
	huge := false
	for i := 0; i < len(intPart); i++ {
		if !isDigit(intPart[i]) {
			return 0, false
		}
		if !huge {
			n = n*10 + time.Duration(intPart[i]-'0')
			huge = n > maxHint/unit
		}
	}
	for i := 0; i < len(frac); i++ {
		if !isDigit(frac[i]) {
			return 0, false
		}
	}
	if huge {
		return maxHint, true
	}
	d := n * unit
	scale, roundUp := unit, false
	for i := 0; i < len(frac); i++ {
		if !isDigit(frac[i]) {
			return 0, false
		}
		digit := time.Duration(frac[i] - '0')
		if scale >= 10 {
			scale /= 10
			d += digit * scale
		} else if digit != 0 {
			roundUp = true
		}
	}
	if roundUp {
		d++
	}
	return min(d, maxHint), true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
