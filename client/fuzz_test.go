package client

import (
	"net/http"
	"regexp"
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
		"insufficient_quota", "<html>oops</html>", `{"error":{"code":"` + strings.Repeat("Z", 70) + `"}}`, `{"error":`} {
		f.Add(uint8(i), []byte(s))
	}
	statuses := [...]int{429, 403, 503, 529}
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) {
		status := statuses[int(sel)%len(statuses)]
		c := Classify(DefaultRules(), &http.Response{StatusCode: status, Header: http.Header{}}, body, nil, nil)
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
