package client

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// testNow is the fixed clock of the header and classification tests.
var testNow = time.Date(2025, time.March, 14, 12, 0, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	future := testNow.Add(90 * time.Second)
	tests := []struct {
		name   string
		value  string
		want   time.Duration
		wantOK bool
	}{
		{name: "integer", value: "5", want: 5 * time.Second, wantOK: true},
		{name: "zero", value: "0", want: 0, wantOK: true},
		{name: "leading zeros", value: "007", want: 7 * time.Second, wantOK: true},
		{name: "surrounding spaces are field whitespace", value: "  5 ", want: 5 * time.Second, wantOK: true},
		{name: "tab", value: "\t5", want: 5 * time.Second, wantOK: true},
		{name: "decimal", value: "1.5", want: 1500 * time.Millisecond, wantOK: true},
		{name: "decimal below a nanosecond rounds up", value: "0.0000000001", want: 1, wantOK: true},
		{name: "decimal with zero tail stays exact", value: "2.0000000000", want: 2 * time.Second, wantOK: true},
		{name: "exactly the cap", value: "86400", want: MaxHint, wantOK: true},
		{name: "above the cap is capped", value: "86401", want: MaxHint, wantOK: true},
		{name: "above the cap by a fraction", value: "86400.5", want: MaxHint, wantOK: true},
		{name: "a year is capped", value: "31536001", want: MaxHint, wantOK: true},
		{name: "too many digits for any integer is the cap", value: "99999999999999999999999999", want: MaxHint, wantOK: true},
		{name: "huge with garbage", value: "99999999999999999999999999x", wantOK: false},
		{name: "empty", value: "", wantOK: false},
		{name: "only spaces", value: "   ", wantOK: false},
		{name: "unit suffix", value: "5s", wantOK: false},
		{name: "negative", value: "-1", wantOK: false},
		{name: "plus sign", value: "+5", wantOK: false},
		{name: "exponent", value: "1e3", wantOK: false},
		{name: "NaN", value: "NaN", wantOK: false},
		{name: "Inf", value: "Inf", wantOK: false},
		{name: "trailing dot", value: "5.", wantOK: false},
		{name: "leading dot", value: ".5", wantOK: false},
		{name: "two dots", value: "1.2.3", wantOK: false},
		{name: "inner space", value: "1 2", wantOK: false},
		{name: "trailing garbage", value: "5abc", wantOK: false},
		{name: "comma list is its longest element", value: "5, 6", want: 6 * time.Second, wantOK: true},
		{name: "repeated value", value: "120, 120", want: 120 * time.Second, wantOK: true},
		{name: "longest first", value: "20,2", want: 20 * time.Second, wantOK: true},
		{name: "invalid element ignored", value: "soon, 3", want: 3 * time.Second, wantOK: true},
		{name: "empty elements ignored", value: " , ,4,", want: 4 * time.Second, wantOK: true},
		{name: "only empty elements", value: " , ,", wantOK: false},
		{name: "only invalid elements", value: "5s, soon", wantOK: false},
		{name: "a date keeps its comma", value: future.Format(http.TimeFormat) + ", 2", want: 90 * time.Second, wantOK: true},
		{name: "two dates", value: "Fri, 14 Mar 2025 12:00:07 GMT, Fri, 14 Mar 2025 12:00:09 GMT", want: 9 * time.Second, wantOK: true},
		{name: "a weekday alone is no date", value: "Fri, 2", wantOK: false},
		{name: "past date and seconds: the seconds", value: "Wed, 21 Oct 2015 07:28:00 GMT, 3", want: 3 * time.Second, wantOK: true},
		{name: "hex", value: "0x10", wantOK: false},
		{name: "IMF-fixdate future", value: future.Format(http.TimeFormat), want: 90 * time.Second, wantOK: true},
		{name: "RFC 850 future", value: "Friday, 14-Mar-25 12:01:30 GMT", want: 90 * time.Second, wantOK: true},
		{name: "RFC 850 in UTC is not GMT", value: future.Format(time.RFC850), wantOK: false},
		{name: "asctime future", value: future.Format(time.ANSIC), want: 90 * time.Second, wantOK: true},
		{name: "date now", value: testNow.Format(http.TimeFormat), want: 0, wantOK: true},
		{name: "past date", value: "Wed, 21 Oct 2015 07:28:00 GMT", want: 0, wantOK: true},
		{name: "date years ahead is capped", value: testNow.AddDate(2, 0, 0).Format(http.TimeFormat), want: MaxHint, wantOK: true},
		{name: "date with trailing garbage", value: future.Format(http.TimeFormat) + "x", wantOK: false},
		{name: "date in another zone", value: "Fri, 14 Mar 2025 13:00:00 CET", wantOK: false},
		{name: "RFC 3339 is not an HTTP-date", value: future.Format(time.RFC3339), wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ParseRetryAfter(tt.value, testNow)
			assert.Equal(t, tt.wantOK, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestServerDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		headers map[string]string
		want    time.Duration
		wantOK  bool
	}{
		{name: "none", wantOK: false},
		{name: "retry-after only", headers: map[string]string{"Retry-After": "3"}, want: 3 * time.Second, wantOK: true},
		{name: "retry-after-ms only", headers: map[string]string{"retry-after-ms": "1500"}, want: 1500 * time.Millisecond, wantOK: true},
		{name: "retry-after-ms fractional", headers: map[string]string{"retry-after-ms": "12.5"}, want: 12500 * time.Microsecond, wantOK: true},
		{name: "retry-after-ms zero is a hint", headers: map[string]string{"retry-after-ms": "0"}, want: 0, wantOK: true},
		{name: "azure ms", headers: map[string]string{"x-ms-retry-after-ms": "2500"}, want: 2500 * time.Millisecond, wantOK: true},
		{name: "azure -1 ignored", headers: map[string]string{"x-ms-retry-after-ms": "-1"}, wantOK: false},
		{name: "azure 0 ignored", headers: map[string]string{"x-ms-retry-after-ms": "0"}, wantOK: false},
		{name: "azure negative ignored, retry-after used", headers: map[string]string{"x-ms-retry-after-ms": "-5", "Retry-After": "2"}, want: 2 * time.Second, wantOK: true},
		{name: "ms beats a shorter retry-after", headers: map[string]string{"retry-after-ms": "2500", "Retry-After": "2"}, want: 2500 * time.Millisecond, wantOK: true},
		{name: "ms wins over a shorter retry-after", headers: map[string]string{"retry-after-ms": "200", "Retry-After": "1"}, want: 200 * time.Millisecond, wantOK: true},
		{name: "ms wins over a longer retry-after", headers: map[string]string{"retry-after-ms": "2000", "Retry-After": "120"}, want: 2 * time.Second, wantOK: true},
		{name: "retry-after-ms first of three", headers: map[string]string{"retry-after-ms": "100", "x-ms-retry-after-ms": "4000", "Retry-After": "3"}, want: 100 * time.Millisecond, wantOK: true},
		{name: "azure ms before retry-after", headers: map[string]string{"x-ms-retry-after-ms": "4000", "Retry-After": "3"}, want: 4 * time.Second, wantOK: true},
		{name: "invalid ms falls through to retry-after", headers: map[string]string{"retry-after-ms": "soon", "Retry-After": "3"}, want: 3 * time.Second, wantOK: true},
		{name: "invalid ms falls back", headers: map[string]string{"retry-after-ms": "soon", "Retry-After": "7"}, want: 7 * time.Second, wantOK: true},
		{name: "all invalid", headers: map[string]string{"retry-after-ms": "x", "x-ms-retry-after-ms": "-1", "Retry-After": "5s"}, wantOK: false},
		{name: "ms above the cap is capped", headers: map[string]string{"retry-after-ms": "31536000001"}, want: MaxHint, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ServerDelay(header(tt.headers), testNow)
			assert.Equal(t, tt.wantOK, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestServerDelayRepeatedLines holds the rule of decision 0035: a field
// sent as several lines reads as the elements of all of them, the same as
// one line that joins them with ", " (what the TypeScript client sees).
func TestServerDelayRepeatedLines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		lines  map[string][]string
		want   time.Duration
		wantOK bool
	}{
		{name: "retry-after 120 twice is 120 s", lines: map[string][]string{"Retry-After": {"120", "120"}}, want: 120 * time.Second, wantOK: true},
		{name: "retry-after-ms twice beats retry-after", lines: map[string][]string{"Retry-After-Ms": {"2000", "2000"}, "Retry-After": {"120"}}, want: 2 * time.Second, wantOK: true},
		{name: "lines that disagree: the longest", lines: map[string][]string{"Retry-After": {"2", "20"}}, want: 20 * time.Second, wantOK: true},
		{name: "invalid first line", lines: map[string][]string{"Retry-After": {"soon", "3"}}, want: 3 * time.Second, wantOK: true},
		{name: "invalid ms lines fall through", lines: map[string][]string{"Retry-After-Ms": {"soon", "x"}, "Retry-After": {"3"}}, want: 3 * time.Second, wantOK: true},
		{name: "azure -1 then 2500", lines: map[string][]string{"X-Ms-Retry-After-Ms": {"-1", "2500"}}, want: 2500 * time.Millisecond, wantOK: true},
		{name: "azure 0 twice is no hint", lines: map[string][]string{"X-Ms-Retry-After-Ms": {"0", "0"}, "Retry-After": {"1"}}, want: time.Second, wantOK: true},
		{name: "a date split over two lines is joined back", lines: map[string][]string{"Retry-After": {"2, Fri", "14 Mar 2025 12:00:20 GMT"}}, want: 20 * time.Second, wantOK: true},
		{name: "empty lines", lines: map[string][]string{"Retry-After": {"", ""}}, wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header(tt.lines)
			got, ok := ServerDelay(h, testNow)
			assert.Equal(t, tt.wantOK, ok)
			assert.Equal(t, tt.want, got)
			joined := http.Header{}
			for k, v := range h {
				joined.Set(k, strings.Join(v, ", "))
			}
			gotJoined, okJoined := ServerDelay(joined, testNow)
			assert.Equal(t, ok, okJoined, "joined into one line")
			assert.Equal(t, got, gotJoined, "joined into one line")
		})
	}
}

func TestElements(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value string
		want  []string
	}{
		{name: "empty", value: "", want: nil},
		{name: "one", value: "5", want: []string{"5"}},
		{name: "trimmed of spaces and tabs", value: " \t5\t ", want: []string{"5"}},
		{name: "other spaces are kept", value: "\v5\u00a0", want: []string{"\v5\u00a0"}},
		{name: "two", value: "120, 120", want: []string{"120", "120"}},
		{name: "no space", value: "a,b", want: []string{"a", "b"}},
		{name: "empty elements dropped", value: ", ,a,,b ,", want: []string{"a", "b"}},
		{name: "IMF-fixdate keeps its comma", value: "Wed, 21 Oct 2015 07:28:00 GMT", want: []string{"Wed, 21 Oct 2015 07:28:00 GMT"}},
		{name: "RFC 850 keeps its comma", value: "Wednesday, 21-Oct-15 07:28:00 GMT, 5", want: []string{"Wednesday, 21-Oct-15 07:28:00 GMT", "5"}},
		{name: "weekday names are case-sensitive", value: "wed, 21", want: []string{"wed", "21"}},
		{name: "weekday with spaces before the comma", value: " Wed ,21", want: []string{"Wed ,21"}},
		{name: "two weekdays", value: "Mon, Tue, 5", want: []string{"Mon, Tue", "5"}},
		{name: "trailing weekday", value: "5, Fri,", want: []string{"5", "Fri,"}},
		{name: "not a weekday", value: "Mond, 5", want: []string{"Mond", "5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, slices.Collect(elements(tt.value)))
		})
	}
}

func TestParseHTTPDate(t *testing.T) {
	t.Parallel()
	date := func(y int, m time.Month, d, hh, mm, ss int) time.Time {
		return time.Date(y, m, d, hh, mm, ss, 0, time.UTC)
	}
	tests := []struct {
		name  string
		value string
		want  time.Time // zero: invalid
	}{
		{name: "IMF-fixdate", value: "Sun, 06 Nov 1994 08:49:37 GMT", want: date(1994, time.November, 6, 8, 49, 37)},
		{name: "RFC 850", value: "Sunday, 06-Nov-94 08:49:37 GMT", want: date(1994, time.November, 6, 8, 49, 37)},
		{name: "RFC 850 year below 69 is 20yy", value: "Friday, 14-Mar-25 12:00:07 GMT", want: date(2025, time.March, 14, 12, 0, 7)},
		{name: "RFC 850 year 69 is 1969", value: "Monday, 01-Dec-69 00:00:00 GMT", want: date(1969, time.December, 1, 0, 0, 0)},
		{name: "asctime", value: "Sun Nov  6 08:49:37 1994", want: date(1994, time.November, 6, 8, 49, 37)},
		{name: "asctime two-digit day", value: "Sun Nov 16 08:49:37 1994", want: date(1994, time.November, 16, 8, 49, 37)},
		{name: "asctime zero-padded day", value: "Sun Nov 06 08:49:37 1994", want: date(1994, time.November, 6, 8, 49, 37)},
		{name: "weekday not checked", value: "Mon, 06 Nov 1994 08:49:37 GMT", want: date(1994, time.November, 6, 8, 49, 37)},
		{name: "29 Feb of a leap year", value: "Thu, 29 Feb 2024 00:00:00 GMT", want: date(2024, time.February, 29, 0, 0, 0)},
		{name: "29 Feb of year 0 (a leap year)", value: "Tue, 29 Feb 0000 00:00:00 GMT", want: date(0, time.February, 29, 0, 0, 0)},
		{name: "year 0099 is not 1999", value: "Tue, 01 Jan 0099 00:00:00 GMT", want: date(99, time.January, 1, 0, 0, 0)},
		{name: "end of day", value: "Fri, 31 Dec 9999 23:59:59 GMT", want: date(9999, time.December, 31, 23, 59, 59)},
		{name: "29 Feb of 1900", value: "Thu, 29 Feb 1900 00:00:00 GMT"},
		{name: "30 Feb", value: "Fri, 30 Feb 2025 12:00:30 GMT"},
		{name: "day 0", value: "Fri, 00 Mar 2025 12:00:30 GMT"},
		{name: "hour 24", value: "Fri, 14 Mar 2025 24:00:00 GMT"},
		{name: "second 60", value: "Fri, 14 Mar 2025 12:00:60 GMT"},
		{name: "lower-case weekday", value: "fri, 14 Mar 2025 12:00:10 GMT"},
		{name: "lower-case month", value: "Fri, 14 mar 2025 12:00:10 GMT"},
		{name: "lower-case zone", value: "Fri, 14 Mar 2025 12:00:10 gmt"},
		{name: "another zone", value: "Fri, 14 Mar 2025 12:00:10 UTC"},
		{name: "RFC 850 another zone", value: "Friday, 14-Mar-25 12:00:07 EST"},
		{name: "RFC 850 short weekday", value: "Fri, 14-Mar-25 12:00:07 GMT"},
		{name: "IMF-fixdate long weekday", value: "Friday, 14 Mar 2025 12:00:07 GMT"},
		{name: "two spaces", value: "Fri,  14 Mar 2025 12:00:10 GMT"},
		{name: "one-digit day", value: "Fri, 4 Mar 2025 12:00:10 GMT"},
		{name: "one-digit hour", value: "Sat, 15 Mar 2025 1:00:10 GMT"},
		{name: "space-padded hour", value: "Sat, 15 Mar 2025  1:00:10 GMT"},
		{name: "fraction", value: "Fri, 14 Mar 2025 12:00:10.5 GMT"},
		{name: "sign in a number", value: "Fri, +4 Mar 2025 12:00:10 GMT"},
		{name: "asctime one space and one digit", value: "Sun Nov 6 08:49:37 1994"},
		{name: "asctime space-padded hour", value: "Sat Mar 15  1:00:00 2025"},
		{name: "trailing space", value: "Sun, 06 Nov 1994 08:49:37 GMT "},
		{name: "RFC 3339", value: "2025-03-14T12:00:00Z"},
		{name: "empty", value: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := parseHTTPDate(tt.value)
			assert.Equal(t, !tt.want.IsZero(), ok)
			assert.True(t, tt.want.Equal(got), "got %v", got)
		})
	}
}

func TestParseRFC3339(t *testing.T) {
	t.Parallel()
	base := time.Date(2025, time.March, 14, 12, 0, 20, 0, time.UTC)
	tests := []struct {
		name   string
		value  string
		want   time.Time
		wantOK bool
	}{
		{name: "Z", value: "2025-03-14T12:00:20Z", want: base, wantOK: true},
		{name: "fraction", value: "2025-03-14T12:00:20.25Z", want: base.Add(250 * time.Millisecond), wantOK: true},
		{name: "fraction below a nanosecond rounds up", value: "2025-03-14T12:00:20.0000000001Z", want: base.Add(1), wantOK: true},
		{name: "offset", value: "2025-03-14T13:00:20+01:00", want: base, wantOK: true},
		{name: "negative offset", value: "2025-03-14T11:30:20-00:30", want: base, wantOK: true},
		{name: "year 0", value: "0000-02-29T00:00:00Z", want: time.Date(0, time.February, 29, 0, 0, 0, 0, time.UTC), wantOK: true},
		{name: "comma fraction", value: "2025-03-14T12:00:20,5Z"},
		{name: "bare dot", value: "2025-03-14T12:00:20.Z"},
		{name: "lower-case z", value: "2025-03-14T12:00:20z"},
		{name: "lower-case t", value: "2025-03-14t12:00:20Z"},
		{name: "space for T", value: "2025-03-14 12:00:20Z"},
		{name: "offset hour 24", value: "2025-03-14T12:00:20+24:00"},
		{name: "offset minute 60", value: "2025-03-14T12:00:20+00:60"},
		{name: "offset without colon", value: "2025-03-14T12:00:20+0100"},
		{name: "no zone", value: "2025-03-14T12:00:20"},
		{name: "30 Feb", value: "2025-02-30T12:00:20Z"},
		{name: "month 13", value: "2025-13-01T12:00:20Z"},
		{name: "signed number", value: "2025-+3-14T12:00:20Z"},
		{name: "seconds 60", value: "2025-03-14T12:00:60Z"},
		{name: "trailing garbage", value: "2025-03-14T12:00:20Zx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := parseRFC3339(tt.value)
			assert.Equal(t, tt.wantOK, ok)
			assert.True(t, tt.want.Equal(got), "got %v", got)
		})
	}
}

func TestShouldRetryHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		value     string
		lines     []string
		wantRetry bool
		wantOK    bool
	}{
		{name: "true", value: "true", wantRetry: true, wantOK: true},
		{name: "false", value: "false", wantRetry: false, wantOK: true},
		{name: "upper case", value: "TRUE", wantRetry: true, wantOK: true},
		{name: "mixed case false", value: "False", wantRetry: false, wantOK: true},
		{name: "spaces", value: " true ", wantRetry: true, wantOK: true},
		{name: "absent", value: "", wantOK: false},
		{name: "one", value: "1", wantOK: false},
		{name: "yes", value: "yes", wantOK: false},
		{name: "prefix", value: "truex", wantOK: false},
		{name: "long s is not ASCII", value: "fal\u017fe", wantOK: false},
		{name: "kelvin sign is not ASCII", value: "\u212aeep", wantOK: false},
		{name: "two lines true", lines: []string{"true", "TRUE"}, wantRetry: true, wantOK: true},
		{name: "one line true, true", value: "true, true", wantRetry: true, wantOK: true},
		{name: "two lines false", lines: []string{"false", "false"}, wantRetry: false, wantOK: true},
		{name: "true and false is false", lines: []string{"true", "false"}, wantRetry: false, wantOK: true},
		{name: "false and true is false", value: "false,true", wantRetry: false, wantOK: true},
		{name: "invalid element ignored", value: "maybe, true", wantRetry: true, wantOK: true},
		{name: "only invalid elements", lines: []string{"maybe", "1"}, wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if tt.value != "" {
				h.Set("x-should-retry", tt.value)
			}
			for _, l := range tt.lines {
				h.Add("x-should-retry", l)
			}
			retry, ok := ShouldRetryHeader(h)
			assert.Equal(t, tt.wantOK, ok)
			assert.Equal(t, tt.wantRetry, retry)
		})
	}
}

func TestProactiveDelay(t *testing.T) {
	t.Parallel()
	reset := func(d time.Duration) string { return testNow.Add(d).Format(time.RFC3339) }
	tests := []struct {
		name    string
		headers map[string]string
		want    time.Duration
		wantOK  bool
	}{
		{name: "no headers", wantOK: false},
		{name: "openai requests exhausted", headers: map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s"}, want: 6 * time.Minute, wantOK: true},
		{name: "openai tokens exhausted", headers: map[string]string{"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1.5s"}, want: 1500 * time.Millisecond, wantOK: true},
		{name: "openai milliseconds", headers: map[string]string{"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "20ms"}, want: 20 * time.Millisecond, wantOK: true},
		{name: "openai minutes and fractional seconds", headers: map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m30.5s"}, want: 90500 * time.Millisecond, wantOK: true},
		{name: "openai remaining not zero", headers: map[string]string{"x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "6m0s"}, wantOK: false},
		{name: "openai zero with bad reset", headers: map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "soon"}, wantOK: false},
		{name: "openai zero without reset", headers: map[string]string{"x-ratelimit-remaining-requests": "0"}, wantOK: false},
		{name: "openai remaining negative is not zero", headers: map[string]string{"x-ratelimit-remaining-requests": "-0", "x-ratelimit-reset-requests": "1s"}, wantOK: false},
		{name: "openai longest of two", headers: map[string]string{
			"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2s",
			"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "7s",
		}, want: 7 * time.Second, wantOK: true},
		{name: "openai only exhausted limit counts", headers: map[string]string{
			"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2s",
			"x-ratelimit-remaining-tokens": "10", "x-ratelimit-reset-tokens": "7s",
		}, want: 2 * time.Second, wantOK: true},
		{name: "openai reset zero", headers: map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "0s"}, wantOK: false},
		{name: "anthropic requests", headers: map[string]string{"anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": reset(12 * time.Second)}, want: 12 * time.Second, wantOK: true},
		{name: "anthropic tokens", headers: map[string]string{"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-tokens-reset": reset(time.Minute)}, want: time.Minute, wantOK: true},
		{name: "anthropic input tokens", headers: map[string]string{"anthropic-ratelimit-input-tokens-remaining": "0", "anthropic-ratelimit-input-tokens-reset": reset(3 * time.Second)}, want: 3 * time.Second, wantOK: true},
		{name: "anthropic output tokens fractional reset", headers: map[string]string{"anthropic-ratelimit-output-tokens-remaining": "0", "anthropic-ratelimit-output-tokens-reset": testNow.Add(2500 * time.Millisecond).Format(time.RFC3339Nano)}, want: 2500 * time.Millisecond, wantOK: true},
		{name: "anthropic past reset", headers: map[string]string{"anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": reset(-time.Second)}, wantOK: false},
		{name: "anthropic remaining left", headers: map[string]string{"anthropic-ratelimit-requests-remaining": "5", "anthropic-ratelimit-requests-reset": reset(time.Second)}, wantOK: false},
		{name: "anthropic reset not RFC 3339", headers: map[string]string{"anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": "12"}, wantOK: false},
		{name: "anthropic reset beyond the cap is capped", headers: map[string]string{"anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": reset(2 * maxHint)}, want: MaxHint, wantOK: true},
		{name: "openai remaining of many zeros", headers: map[string]string{"x-ratelimit-remaining-requests": "000000000000000000000000", "x-ratelimit-reset-requests": "1s"}, want: time.Second, wantOK: true},
		{name: "openai remaining with spaces", headers: map[string]string{"x-ratelimit-remaining-requests": " 0\t", "x-ratelimit-reset-requests": "1s"}, want: time.Second, wantOK: true},
		{name: "openai remaining with a no-break space is not zero", headers: map[string]string{"x-ratelimit-remaining-requests": "0\u00a0", "x-ratelimit-reset-requests": "1s"}, wantOK: false},
		{name: "openai remaining list with a zero", headers: map[string]string{"x-ratelimit-remaining-tokens": "5, 0", "x-ratelimit-reset-tokens": "1s, 3s"}, want: 3 * time.Second, wantOK: true},
		{name: "anthropic reset list: the latest", headers: map[string]string{"anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": reset(2*time.Second) + ", " + reset(4*time.Second)}, want: 4 * time.Second, wantOK: true},
		{name: "anthropic reset with a comma fraction is not RFC 3339", headers: map[string]string{"anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": "2025-03-14T12:00:20,5Z"}, wantOK: false},
		{name: "openai and anthropic longest", headers: map[string]string{
			"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "4s",
			"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-tokens-reset": reset(9 * time.Second),
		}, want: 9 * time.Second, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ProactiveDelay(header(tt.headers), testNow)
			assert.Equal(t, tt.wantOK, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseResetDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		value  string
		want   time.Duration
		wantOK bool
	}{
		{name: "minutes and zero seconds", value: "6m0s", want: 6 * time.Minute, wantOK: true},
		{name: "fractional seconds", value: "1.5s", want: 1500 * time.Millisecond, wantOK: true},
		{name: "milliseconds", value: "20ms", want: 20 * time.Millisecond, wantOK: true},
		{name: "minutes and fractional seconds", value: "1m30.5s", want: 90500 * time.Millisecond, wantOK: true},
		{name: "hours", value: "1h2m3s", want: time.Hour + 2*time.Minute + 3*time.Second, wantOK: true},
		{name: "seconds then milliseconds", value: "1s250ms", want: 1250 * time.Millisecond, wantOK: true},
		{name: "bare zero", value: "0", want: 0, wantOK: true},
		{name: "minutes alone", value: "5m", want: 5 * time.Minute, wantOK: true},
		{name: "empty", value: "", wantOK: false},
		{name: "number without unit", value: "12", wantOK: false},
		{name: "negative", value: "-1s", wantOK: false},
		{name: "plus sign", value: "+1s", wantOK: false},
		{name: "units out of order", value: "1s1m", wantOK: false},
		{name: "repeated unit", value: "1s1s", wantOK: false},
		{name: "unknown unit", value: "1d", wantOK: false},
		{name: "microseconds unsupported", value: "5us", wantOK: false},
		{name: "trailing garbage", value: "1sx", wantOK: false},
		{name: "unit without number", value: "s", wantOK: false},
		{name: "above the cap is capped", value: "9000h", want: MaxHint, wantOK: true},
		{name: "overflowing number is capped", value: "99999999999999999999h", want: MaxHint, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := parseResetDuration(tt.value)
			assert.Equal(t, tt.wantOK, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}

// header builds an http.Header from a map, canonicalising the names.
func header(m map[string]string) http.Header {
	h := http.Header{}
	for k, v := range m {
		h.Set(k, v)
	}
	return h
}
