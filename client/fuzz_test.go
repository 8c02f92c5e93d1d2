package client

import (
	"bytes"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// More seeds live in testdata/fuzz/<FuzzName>/.

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"5", "  5", "1.5", "0", "-1", "5s", "1e3", "NaN", "", "31536001",
		"Wed, 21 Oct 2015 07:28:00 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParseRetryAfter(v, testNow)
		if !ok {
			assert.Zero(t, d)
			return
		}
		assert.GreaterOrEqual(t, d, time.Duration(0))
		assert.LessOrEqual(t, d, maxHint)
		// Integer delta-seconds agree with strconv, capped at MaxHint;
		// digits too many for a uint64 are a valid, very long delay.
		digits := strings.Trim(v, " \t")
		if n, err := strconv.ParseUint(digits, 10, 64); err == nil {
			want := MaxHint
			if n <= uint64(MaxHint/time.Second) {
				want = time.Duration(n) * time.Second
			}
			assert.Equal(t, want, d)
		} else if digits != "" && strings.Trim(digits, "0123456789") == "" {
			assert.Equal(t, MaxHint, d, "a huge integer is the longest delay, not garbage")
		}
	})
}

func FuzzOpenAIResetDuration(f *testing.F) {
	for _, s := range []string{"6m0s", "1.5s", "20ms", "1m30.5s", "1h2m3s", "0", "", "1s1m", "-1s", "9000h", "1.s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := parseResetDuration(s)
		if !ok {
			assert.Zero(t, d)
			return
		}
		assert.GreaterOrEqual(t, d, time.Duration(0))
		assert.LessOrEqual(t, d, maxHint)
		// What we accept is a subset of Go durations and means the same,
		// up to Go's float rounding of fractions (we round up, never down).
		// Above MaxHint (or past Go's range) the value is capped.
		want, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || want > MaxHint {
			assert.Equal(t, MaxHint, d, "value of %q", s)
			return
		}
		assert.InDelta(t, want, d, float64(time.Microsecond), "value of %q", s)
	})
}

// codePattern is what every ErrorCode must match.
var codePattern = regexp.MustCompile(`^[a-z0-9_.-]{0,64}$`)

func FuzzClassifyBody(f *testing.F) {
	for i, s := range []string{quotaOpenAI, rateOpenAI, overloadedAnth, geminiExhaust, "[" + geminiExhaust + "]",
		"insufficient_quota", "<html>oops</html>", `{"error":{"code":"` + strings.Repeat("Z", 70) + `"}}`, `{"error":`,
		"\uFEFF" + overloadedAnth, "\uFEFF\uFEFF" + overloadedAnth, " \uFEFF" + quotaOpenAI, "\f" + overloadedAnth,
		`{"error":{"code":1e2,"\u017ftatus":"UNAVAILABLE"}}`, `{"error":{"type":"overloaded_error","message":"` + "\xff" + `"}}`} {
		f.Add(uint8(i), []byte(s))
	}
	statuses := [...]int{429, 403, 503, 529}
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) {
		status := statuses[int(sel)%len(statuses)]
		c := Classify(DefaultRules(), &http.Response{StatusCode: status, Header: http.Header{}}, body, nil, nil)
		if !bytes.HasPrefix(body, utf8BOM) {
			// One leading byte-order mark changes nothing (RFC 8259 §8.1).
			withBOM := Classify(DefaultRules(), &http.Response{StatusCode: status, Header: http.Header{}}, append(slices.Clip(utf8BOM), body...), nil, nil)
			assert.Equal(t, c, withBOM, "with a byte-order mark")
		}
		assert.Regexp(t, codePattern, c.ErrorCode)
		assert.Equal(t, status, c.HTTPStatus)
		switch c.Outcome {
		case OutcomeQuotaExhausted:
			assert.False(t, c.Retryable)
			assert.Contains(t, []int{429, 403}, status)
		case OutcomeRateLimited, OutcomeOverloaded, OutcomeTransientFailure:
			assert.True(t, c.Retryable)
		case OutcomeAuthFailure:
			assert.Equal(t, 403, status)
		default:
			t.Errorf("unexpected outcome %v for status %d", c.Outcome, status)
		}
	})
}

// FuzzHeaderLines holds the list rule (decision 0035): a field sent as two
// lines reads as the one line that joins them with ", " (all the
// TypeScript client sees); elements are trimmed, non-empty and split the
// same way again; a Retry-After is the longest of its elements.
func FuzzHeaderLines(f *testing.F) {
	for _, s := range [][2]string{{"120", "120"}, {"2000", "2000"}, {"2, Fri", "14 Mar 2025 12:00:20 GMT"}, {"true", "false"},
		{"Fri, 14 Mar 2025 12:00:07 GMT", "5"}, {" , ,", "soon, 3"}, {"0, 5", "1s, 2025-03-14T12:00:20Z"}, {"Friday, 14-Mar-25 12:00:07 GMT", ""},
		{"TRUE", "fal\u017fe"}, {"\t0 ", "6m0s"}} {
		f.Add(s[0], s[1])
	}
	names := [...]string{"Retry-After", "Retry-After-Ms", "X-Ms-Retry-After-Ms", "X-Should-Retry",
		"X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset"}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, n := range [...][]string{names[:1], names[1:3], names[3:4], names[4:6], names[6:8]} {
			two, one := http.Header{}, http.Header{}
			for _, name := range n {
				two[name] = []string{a, b}
				one[name] = []string{trimOWS(a) + ", " + trimOWS(b)}
			}
			d2, ok2 := ServerDelay(two, testNow)
			d1, ok1 := ServerDelay(one, testNow)
			assert.Equal(t, [2]any{d1, ok1}, [2]any{d2, ok2}, "server delay of %q", n)
			r2, rok2 := ShouldRetryHeader(two)
			r1, rok1 := ShouldRetryHeader(one)
			assert.Equal(t, [2]bool{r1, rok1}, [2]bool{r2, rok2}, "x-should-retry of %q", n)
			p2, pok2 := ProactiveDelay(two, testNow)
			p1, pok1 := ProactiveDelay(one, testNow)
			assert.Equal(t, [2]any{p1, pok1}, [2]any{p2, pok2}, "proactive delay of %q", n)
		}
		v := a + ", " + b
		es := slices.Collect(elements(v))
		for _, e := range es {
			assert.NotEmpty(t, e)
			assert.Equal(t, trimOWS(e), e)
		}
		assert.Equal(t, es, slices.Collect(elements(strings.Join(es, ", "))), "elements of %q split again", v)
		var best time.Duration
		found := false
		for _, e := range es {
			if d, ok := ParseRetryAfter(e, testNow); ok {
				best, found = max(best, d), true
			}
		}
		d, ok := ParseRetryAfter(v, testNow)
		assert.Equal(t, [2]any{best, found}, [2]any{d, ok}, "Retry-After %q is its longest element", v)
	})
}

// FuzzParseHTTPDate: what the strict grammar accepts, http.ParseTime
// accepts too and reads as the same instant.
func FuzzParseHTTPDate(f *testing.F) {
	for _, s := range []string{"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
		"Sun Nov 16 08:49:37 1994", "Tue, 29 Feb 0000 00:00:00 GMT", "Fri, 30 Feb 2025 12:00:30 GMT", "fri, 14 Mar 2025 12:00:10 GMT",
		"Friday, 14-Mar-25 12:00:07 EST", "Sat, 15 Mar 2025 1:00:10 GMT", "Monday, 01-Dec-69 00:00:00 GMT"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, ok := parseHTTPDate(v)
		if !ok {
			assert.True(t, got.IsZero())
			return
		}
		want, err := http.ParseTime(v)
		if assert.NoError(t, err, "http.ParseTime(%q)", v) {
			assert.True(t, want.Equal(got), "%q: %v, http.ParseTime %v", v, got, want)
		}
	})
}

// FuzzParseRFC3339: what the strict grammar accepts, time.Parse accepts too
// and reads as the same instant, up to the nanosecond we round up.
func FuzzParseRFC3339(f *testing.F) {
	for _, s := range []string{"2025-03-14T12:00:20Z", "2025-03-14T12:00:20.25Z", "2025-03-14T13:00:20+01:00", "2025-03-14T12:00:20,5Z",
		"2025-03-14T12:00:20.0000000001Z", "0000-02-29T00:00:00Z", "2025-03-14T12:00:20+24:00", "2025-03-14T12:00:20"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, ok := parseRFC3339(v)
		if !ok {
			assert.True(t, got.IsZero())
			return
		}
		want, err := time.Parse(time.RFC3339Nano, v)
		if assert.NoError(t, err, "time.Parse(%q)", v) {
			diff := got.Sub(want)
			assert.True(t, diff == 0 || diff == 1, "%q: %v, time.Parse %v", v, got, want)
		}
	})
}
