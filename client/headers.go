package client

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxHint is the longest delay any header may ask for. Longer values are
// treated as garbage rather than obeyed.
const maxHint = 365 * 24 * time.Hour

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
// them), so "  5" is 5s. An empty value, or a delay above one year, yields
// ok=false.
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
	d := t.Sub(now)
	switch {
	case d < 0:
		return 0, true
	case d > maxHint:
		return 0, false
	}
	return d, true
}

// ServerDelay returns the delay the response headers ask for. It reads
// retry-after-ms, then x-ms-retry-after-ms (Azure; values ≤ 0 such as -1 are
// ignored), then Retry-After. Because a server delay is never shortened, the
// result is the longest of the valid values: a coarse Retry-After (whole
// seconds) never cuts a longer millisecond hint short, and vice versa.
// ok=false when no header holds a valid value.
func ServerDelay(h http.Header, now time.Time) (time.Duration, bool) {
	var best time.Duration
	found := false
	take := func(d time.Duration, ok bool) {
		if ok {
			best, found = max(best, d), true
		}
	}
	take(parseMillis(h.Get("Retry-After-Ms"), false))
	take(parseMillis(h.Get("X-Ms-Retry-After-Ms"), true))
	take(ParseRetryAfter(h.Get("Retry-After"), now))
	return best, found
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
// time. The result is the longest delay among exhausted limits. ok=false when
// no limit is exhausted with a valid reset that lies in the future (and at
// most one year ahead), so ok implies d > 0.
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
		if d := t.Sub(now); d <= maxHint {
			best = max(best, d)
		}
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
// repeated or out-of-order units and values above one year are rejected.
// Fractions are rounded up to the next nanosecond.
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
			if !ok || d > maxHint-total {
				return 0, false
			}
			total, last, s, matched = total+d, u.unit, rest[len(u.name):], true
			break
		}
		if !matched {
			return 0, false
		}
	}
	return total, last != time.Duration(1<<63-1)
}

// parseDecimal parses digits with an optional '.' and fraction digits, times
// unit, rounding any sub-nanosecond remainder up. It rejects values above
// [maxHint] without overflowing.
func parseDecimal(s string, unit time.Duration) (time.Duration, bool) {
	intPart, frac, hasDot := strings.Cut(s, ".")
	if intPart == "" || (hasDot && frac == "") {
		return 0, false
	}
	var n time.Duration
	for i := 0; i < len(intPart); i++ {
		if !isDigit(intPart[i]) {
			return 0, false
		}
		n = n*10 + time.Duration(intPart[i]-'0')
		if n > maxHint/unit {
			return 0, false
		}
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
	if d > maxHint {
		return 0, false
	}
	return d, true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
