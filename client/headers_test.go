package client

import (
	"net/http"
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
		{name: "comma list", value: "5, 6", wantOK: false},
		{name: "hex", value: "0x10", wantOK: false},
		{name: "IMF-fixdate future", value: future.Format(http.TimeFormat), want: 90 * time.Second, wantOK: true},
		{name: "RFC 850 future", value: future.Format(time.RFC850), want: 90 * time.Second, wantOK: true},
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

func TestShouldRetryHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		value     string
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if tt.value != "" {
				h.Set("x-should-retry", tt.value)
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
