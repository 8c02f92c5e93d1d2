package client

import (
	"iter"
	"net/http"
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

// A response header is read as the list of its elements (RFC 9110 §5.3,
// §5.6.1), however it arrived: as several lines (a gateway that appends its
// own copy) or as one comma-separated line. The lines are joined with ", ",
// as RFC 9110 combines them and as fetch's Headers.get returns them, so the
// TypeScript client, which only sees the joined string, reads the same
// elements; the value is split at each comma, every element trimmed of
// spaces and tabs, empty elements dropped. One comma is not a separator: the
// one right after a weekday name (Mon … Sun, Monday … Sunday), which belongs
// to an HTTP-date ("Wed, 21 Oct 2015 07:28:00 GMT").
//
// An element that does not parse is ignored, as a single invalid value is.
// When the valid elements disagree, the cautious reading wins: the longest
// delay (cooldowns merge by max; a server delay is never shortened), a
// remaining count of zero, the latest reset, and x-should-retry "false".
// See docs/decisions/0035-a-header-is-the-list-of-its-elements.md.

// fieldValue is the field name of h: its lines, each trimmed of spaces and
// tabs as a line off the wire is (and as fetch trims it), joined with ", ".
func fieldValue(h http.Header, name string) string {
	lines := h.Values(name)
	if len(lines) == 1 {
		return trimOWS(lines[0])
	}
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(trimOWS(l))
	}
	return b.String()
}

// elements yields the list elements of the field value v, trimmed of
// spaces and tabs, empty ones skipped; a comma right after a weekday name
// does not separate.
func elements(v string) iter.Seq[string] {
	return func(yield func(string) bool) {
		start := 0
		for i := 0; i <= len(v); i++ {
			if i < len(v) && v[i] != ',' {
				continue
			}
			e := trimOWS(v[start:i])
			if i < len(v) && isDayName(e) {
				continue // the comma of an HTTP-date
			}
			start = i + 1
			if e != "" && !yield(e) {
				return
			}
		}
	}
}

// trimOWS trims the optional whitespace of RFC 9110 (spaces and tabs) only.
func trimOWS(s string) string { return strings.Trim(s, " \t") }

// ParseRetryAfter parses a Retry-After field value (RFC 9110 §10.2.3)
// relative to now: the longest delay among its valid elements (see the
// list rule above), so "120, 120" is 120 s and "5, 120" is 120 s.
//
// Two forms of element are accepted:
//
//   - delay-seconds: ASCII digits, optionally followed by a '.' and more
//     digits ("120", "1.5"). Fractions are accepted because several providers
//     and SDKs send or parse them; they are rounded up to the next nanosecond,
//     never down. A sign, an exponent ("1e3"), a unit ("5s"), "NaN", "Inf",
//     a bare "." or trailing garbage are rejected.
//   - HTTP-date: IMF-fixdate, RFC 850 or asctime, exactly as RFC 9110
//     §5.6.7 writes them (see [parseHTTPDate]). A date in the past yields 0
//     with ok=true.
//
// Spaces and tabs around an element are ignored, so "  5" is 5s. No valid
// element yields ok=false. A valid delay above [MaxHint], however many
// digits, yields MaxHint with ok=true.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	var best time.Duration
	found := false
	for e := range elements(v) {
		if d, ok := parseRetryAfterElement(e, now); ok {
			best, found = max(best, d), true
		}
	}
	return best, found
}

// parseRetryAfterElement parses one element of a Retry-After value.
func parseRetryAfterElement(e string, now time.Time) (time.Duration, bool) {
	if isDigit(e[0]) {
		return parseDecimal(e, time.Second)
	}
	t, ok := parseHTTPDate(e)
	if !ok {
		return 0, false
	}
	return min(max(t.Sub(now), 0), maxHint), true
}

// ServerDelay returns the delay the response headers ask for, in the
// precedence of the providers' own SDKs (openai-python, anthropic-sdk,
// the Azure SDKs): the first of retry-after-ms, then x-ms-retry-after-ms
// (Azure; values ≤ 0 such as -1 are ignored), then Retry-After that holds
// a valid element; of a header's valid elements the longest. A precise
// millisecond hint wins over a coarse Retry-After, so "retry-after-ms: 2000"
// with "Retry-After: 120" is 2 s, however many times either is repeated.
// ok=false when no header holds a valid value.
func ServerDelay(h http.Header, now time.Time) (time.Duration, bool) {
	if d, ok := parseMillis(fieldValue(h, "Retry-After-Ms"), false); ok {
		return d, true
	}
	if d, ok := parseMillis(fieldValue(h, "X-Ms-Retry-After-Ms"), true); ok {
		return d, true
	}
	return ParseRetryAfter(fieldValue(h, "Retry-After"), now)
}

// parseMillis parses the longest valid element of a field value that is a
// non-negative decimal number of milliseconds. With positive set, 0 is
// rejected too (Azure sends 0 and -1 for "no hint").
func parseMillis(v string, positive bool) (time.Duration, bool) {
	var best time.Duration
	found := false
	for e := range elements(v) {
		d, ok := parseDecimal(e, time.Millisecond)
		if ok && (!positive || d > 0) {
			best, found = max(best, d), true
		}
	}
	return best, found
}

// ShouldRetryHeader reads the x-should-retry header sent by OpenAI and
// Anthropic: each element "true" or "false", ASCII case-insensitively;
// other elements are ignored. retry is false when any element says false
// (the cautious reading), true when the valid ones all say true. No valid
// element, or no header, yields ok=false.
func ShouldRetryHeader(h http.Header) (retry bool, ok bool) {
	for e := range elements(fieldValue(h, "X-Should-Retry")) {
		switch {
		case asciiEqualFold(e, "true"):
			retry, ok = true, true
		case asciiEqualFold(e, "false"):
			return false, true
		}
	}
	return retry, ok
}

// asciiEqualFold reports whether s equals the lower-case ASCII word lower,
// ignoring ASCII case only (strings.EqualFold would also fold 'ſ' to 's').
func asciiEqualFold(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
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
// time. Each header is read as a list (see [ParseRetryAfter]): a limit is
// exhausted when one of its remaining elements is 0, and its reset is the
// latest valid element. The result is the longest delay among exhausted
// limits, at most [MaxHint]. ok=false when no limit is exhausted with a
// valid reset that lies in the future, so ok implies d > 0.
func ProactiveDelay(h http.Header, now time.Time) (time.Duration, bool) {
	var best time.Duration
	for _, kind := range [...]string{"requests", "tokens"} {
		if !hasZeroCount(fieldValue(h, "X-Ratelimit-Remaining-"+kind)) {
			continue
		}
		for e := range elements(fieldValue(h, "X-Ratelimit-Reset-"+kind)) {
			if d, ok := parseResetDuration(e); ok {
				best = max(best, d)
			}
		}
	}
	for _, kind := range anthropicLimits {
		prefix := "Anthropic-Ratelimit-" + kind
		if !hasZeroCount(fieldValue(h, prefix+"-Remaining")) {
			continue
		}
		for e := range elements(fieldValue(h, prefix+"-Reset")) {
			if t, ok := parseRFC3339(e); ok {
				best = max(best, min(t.Sub(now), maxHint))
			}
		}
	}
	return best, best > 0
}

// hasZeroCount reports whether an element of the field value v is a
// remaining-count of exactly zero: one or more '0' digits.
func hasZeroCount(v string) bool {
	for e := range elements(v) {
		if strings.Trim(e, "0") == "" {
			return true
		}
	}
	return false
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
	s = trimOWS(s)
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

// The names of RFC 9110's HTTP-date, which is case-sensitive.
var (
	dayNames     = [...]string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}
	longDayNames = [...]string{"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}
	monthNames   = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
)

// isDayName reports whether s is a weekday name of an HTTP-date, short or long.
func isDayName(s string) bool {
	for i := range dayNames {
		if s == dayNames[i] || s == longDayNames[i] {
			return true
		}
	}
	return false
}

// parseHTTPDate parses an HTTP-date exactly as RFC 9110 §5.6.7 writes it:
//
//	IMF-fixdate  Sun, 06 Nov 1994 08:49:37 GMT
//	RFC 850      Sunday, 06-Nov-94 08:49:37 GMT   (a year below 69 is 20yy)
//	asctime      Sun Nov  6 08:49:37 1994         (day "06", " 6" or "16")
//
// Names are case-sensitive, every number has its exact digits, the zone is
// GMT, the date must exist; the weekday is checked for syntax only, as
// http.ParseTime does. Unlike http.ParseTime, it accepts no extra spaces,
// one-digit hours, fractions, lower-case names or other zones (whose offset
// would depend on the process's local zone): the TypeScript client parses
// the same grammar (clients/ts/src/headers.ts), so both read one date alike.
func parseHTTPDate(v string) (time.Time, bool) {
	if len(v) == len("Sun, 06 Nov 1994 08:49:37 GMT") && v[3:5] == ", " && isShortDay(v[:3]) &&
		v[7] == ' ' && v[11] == ' ' && v[16] == ' ' && v[25:] == " GMT" {
		if y, ok := digits(v[12:16]); ok {
			return civil(y, v[8:11], v[5:7], v[17:25])
		}
		return time.Time{}, false
	}
	if day, rest, ok := strings.Cut(v, ", "); ok && isLongDay(day) {
		// 06-Nov-94 08:49:37 GMT
		if len(rest) != len("06-Nov-94 08:49:37 GMT") || rest[2] != '-' || rest[6] != '-' || rest[9] != ' ' || rest[18:] != " GMT" {
			return time.Time{}, false
		}
		y, ok := digits(rest[7:9])
		if !ok {
			return time.Time{}, false
		}
		if y < 69 {
			y += 2000
		} else {
			y += 1900
		}
		return civil(y, rest[3:6], rest[:2], rest[10:18])
	}
	if len(v) == len("Sun Nov  6 08:49:37 1994") && isShortDay(v[:3]) && v[3] == ' ' && v[7] == ' ' && v[10] == ' ' && v[19] == ' ' {
		y, ok := digits(v[20:])
		if !ok {
			return time.Time{}, false
		}
		day := v[8:10]
		if day[0] == ' ' {
			day = "0" + day[1:]
		}
		return civil(y, v[4:7], day, v[11:19])
	}
	return time.Time{}, false
}

func isShortDay(s string) bool {
	for _, d := range dayNames {
		if s == d {
			return true
		}
	}
	return false
}

func isLongDay(s string) bool {
	for _, d := range longDayNames {
		if s == d {
			return true
		}
	}
	return false
}

// digits parses s, which must be all ASCII digits (at least one).
func digits(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}

// civil is the UTC instant of year y, month name mon, two-digit day and an
// "hh:mm:ss" time of day, when that date and time exist.
func civil(y int, mon, day, hms string) (time.Time, bool) {
	m := 0
	for i, name := range monthNames {
		if mon == name {
			m = i + 1
		}
	}
	d, okD := digits(day)
	if m == 0 || !okD || len(day) != 2 || len(hms) != 8 || hms[2] != ':' || hms[5] != ':' {
		return time.Time{}, false
	}
	hh, okH := digits(hms[:2])
	mm, okM := digits(hms[3:5])
	ss, okS := digits(hms[6:])
	if !okH || !okM || !okS || d < 1 || d > daysIn(m, y) || hh > 23 || mm > 59 || ss > 59 {
		return time.Time{}, false
	}
	return time.Date(y, time.Month(m), d, hh, mm, ss, 0, time.UTC), true
}

// daysIn is the number of days of month m (1 to 12) of the proleptic
// Gregorian year y.
func daysIn(m, y int) int {
	if m == 2 && y%4 == 0 && (y%100 != 0 || y%400 == 0) {
		return 29
	}
	return [...]int{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}[m-1]
}

// parseRFC3339 parses an RFC 3339 time as the providers send it:
// "2006-01-02T15:04:05" with an optional '.' and fraction digits (a
// remainder below a nanosecond rounded up), then "Z" or "±hh:mm". Unlike
// time.Parse it accepts nothing else (no ',' fraction, no offset hour 24):
// the TypeScript client parses the same grammar.
func parseRFC3339(v string) (time.Time, bool) {
	const base = "2006-01-02T15:04:05"
	if len(v) < len(base)+1 || v[4] != '-' || v[7] != '-' || v[10] != 'T' || v[13] != ':' || v[16] != ':' {
		return time.Time{}, false
	}
	y, okY := digits(v[:4])
	mo, okMo := digits(v[5:7])
	d, okD := digits(v[8:10])
	hh, okH := digits(v[11:13])
	mm, okM := digits(v[14:16])
	ss, okS := digits(v[17:19])
	if !okY || !okMo || !okD || !okH || !okM || !okS || mo < 1 || mo > 12 || d < 1 || d > daysIn(mo, y) ||
		hh > 23 || mm > 59 || ss > 59 {
		return time.Time{}, false
	}
	t := time.Date(y, time.Month(mo), d, hh, mm, ss, 0, time.UTC)
	rest := v[len(base):]
	if rest[0] == '.' {
		i := 1
		for i < len(rest) && isDigit(rest[i]) {
			i++
		}
		frac, ok := parseDecimal("0"+rest[:i], time.Second)
		if !ok {
			return time.Time{}, false
		}
		t, rest = t.Add(frac), rest[i:]
	}
	switch {
	case rest == "Z":
		return t, true
	case len(rest) == len("+07:00") && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, okOH := digits(rest[1:3])
		om, okOM := digits(rest[4:])
		if !okOH || !okOM || oh > 23 || om > 59 {
			return time.Time{}, false
		}
		off := time.Duration(oh)*time.Hour + time.Duration(om)*time.Minute
		if rest[0] == '+' {
			off = -off
		}
		return t.Add(off), true
	}
	return time.Time{}, false
}
