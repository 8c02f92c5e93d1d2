package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Provider error bodies, as the providers document them, for the table below.
const (
	quotaOpenAI    = `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`
	rateOpenAI     = `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	overloadedAnth = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
	geminiExhaust  = `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED"}}`
)

func wrapURL(err error) error {
	return &url.Error{Op: "Post", URL: "https://api.example.com/v1", Err: err}
}

func opErr(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(op, errno)}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	long := DefaultRules().MaxServerDelay
	tests := []struct {
		name    string
		status  int // 0: no response
		headers map[string]string
		body    string
		err     error
		ctxErr  error
		want    Classification
	}{
		// Success and proactive cool-down.
		{name: "200", status: 200, want: Classification{Outcome: OutcomeSuccess, HTTPStatus: 200}},
		{name: "201", status: 201, want: Classification{Outcome: OutcomeSuccess, HTTPStatus: 201}},
		{name: "204", status: 204, want: Classification{Outcome: OutcomeSuccess, HTTPStatus: 204}},
		{name: "200 openai requests exhausted", status: 200, headers: map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m30.5s"},
			want: Classification{Outcome: OutcomeSuccess, HTTPStatus: 200, Proactive: 90500 * time.Millisecond}},
		{name: "200 anthropic tokens exhausted", status: 200, headers: map[string]string{"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-tokens-reset": testNow.Add(20 * time.Second).Format(time.RFC3339)},
			want: Classification{Outcome: OutcomeSuccess, HTTPStatus: 200, Proactive: 20 * time.Second}},
		{name: "200 limits left", status: 200, headers: map[string]string{"x-ratelimit-remaining-requests": "12", "x-ratelimit-reset-requests": "1s"},
			want: Classification{Outcome: OutcomeSuccess, HTTPStatus: 200}},
		{name: "200 retry-after ignored", status: 200, headers: map[string]string{"Retry-After": "60"}, want: Classification{Outcome: OutcomeSuccess, HTTPStatus: 200}},
		{name: "200 after caller canceled", status: 200, ctxErr: context.Canceled, want: Classification{Outcome: OutcomeSuccess, HTTPStatus: 200}},

		// Transient statuses.
		{name: "408", status: 408, want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, HTTPStatus: 408}},
		{name: "409", status: 409, want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, HTTPStatus: 409}},
		{name: "500", status: 500, body: `{"error":{"type":"server_error","code":null}}`, want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, HTTPStatus: 500, ErrorCode: "server_error"}},
		{name: "502 html", status: 502, body: "<html><body>Bad Gateway</body></html>", want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, HTTPStatus: 502}},
		{name: "503 plain", status: 503, want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, HTTPStatus: 503}},
		{name: "504", status: 504, want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, HTTPStatus: 504}},
		{name: "520 cloudflare", status: 520, want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, HTTPStatus: 520}},
		{name: "501 not retried", status: 501, want: Classification{Outcome: OutcomeClientError, HTTPStatus: 501}},
		{name: "505 not retried", status: 505, want: Classification{Outcome: OutcomeClientError, HTTPStatus: 505}},
		{name: "503 gemini unavailable", status: 503, body: `{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}`,
			want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, HTTPStatus: 503, ErrorCode: "unavailable"}},

		// Rate limits and server delays.
		{name: "429 bare", status: 429, want: Classification{Outcome: OutcomeRateLimited, Retryable: true, HTTPStatus: 429}},
		{name: "429 openai rate limit", status: 429, body: rateOpenAI, headers: map[string]string{"Retry-After": "3"},
			want: Classification{Outcome: OutcomeRateLimited, Retryable: true, HTTPStatus: 429, ErrorCode: "rate_limit_exceeded", RetryAfter: 3 * time.Second}},
		{name: "429 retry-after-ms", status: 429, headers: map[string]string{"retry-after-ms": "1500"},
			want: Classification{Outcome: OutcomeRateLimited, Retryable: true, HTTPStatus: 429, RetryAfter: 1500 * time.Millisecond}},
		{name: "429 retry-after-ms before retry-after", status: 429, headers: map[string]string{"retry-after-ms": "300", "Retry-After": "1"},
			want: Classification{Outcome: OutcomeRateLimited, Retryable: true, HTTPStatus: 429, RetryAfter: 300 * time.Millisecond}},
		{name: "429 azure ms", status: 429, headers: map[string]string{"x-ms-retry-after-ms": "2500"},
			want: Classification{Outcome: OutcomeRateLimited, Retryable: true, HTTPStatus: 429, RetryAfter: 2500 * time.Millisecond}},
		{name: "429 azure -1 ignored", status: 429, headers: map[string]string{"x-ms-retry-after-ms": "-1"},
			want: Classification{Outcome: OutcomeRateLimited, Retryable: true, HTTPStatus: 429}},
		{name: "429 azure code", status: 429, body: `{"error":{"code":"RateLimitReached","message":"Requests have exceeded the limit"}}`,
			want: Classification{Outcome: OutcomeRateLimited, Retryable: true, HTTPStatus: 429, ErrorCode: "ratelimitreached"}},
		{name: "429 http-date", status: 429, headers: map[string]string{"Retry-After": testNow.Add(10 * time.Second).Format(http.TimeFormat)},
			want: Classification{Outcome: OutcomeRateLimited, Retryable: true, HTTPStatus: 429, RetryAfter: 10 * time.Second}},
		{name: "429 past http-date", status: 429, headers: map[string]string{"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"},
			want: Classification{Outcome: OutcomeRateLimited, Retryable: true, HTTPStatus: 429}},
		{name: "429 invalid retry-after", status: 429, headers: map[string]string{"Retry-After": "5s"},
			want: Classification{Outcome: OutcomeRateLimited, Retryable: true, HTTPStatus: 429}},
		{name: "429 delay at the limit waits", status: 429, headers: map[string]string{"Retry-After": "30"},
			want: Classification{Outcome: OutcomeRateLimited, Retryable: true, HTTPStatus: 429, RetryAfter: long}},
		{name: "429 delay just above the limit", status: 429, headers: map[string]string{"retry-after-ms": "30001"},
			want: Classification{Outcome: OutcomeRateLimited, HTTPStatus: 429, RetryAfter: long + time.Millisecond, TooLong: true}},
		{name: "429 delay far above the limit", status: 429, headers: map[string]string{"Retry-After": "3600"},
			want: Classification{Outcome: OutcomeRateLimited, HTTPStatus: 429, RetryAfter: time.Hour, TooLong: true}},
		{name: "429 gemini resource exhausted stays rate limited", status: 429, body: geminiExhaust,
			want: Classification{Outcome: OutcomeRateLimited, Retryable: true, HTTPStatus: 429, ErrorCode: "resource_exhausted"}},
		{name: "429 gemini list shape", status: 429, body: "[" + geminiExhaust + "]",
			want: Classification{Outcome: OutcomeRateLimited, Retryable: true, HTTPStatus: 429, ErrorCode: "resource_exhausted"}},

		// Quota.
		{name: "429 openai insufficient quota", status: 429, body: quotaOpenAI,
			want: Classification{Outcome: OutcomeQuotaExhausted, HTTPStatus: 429, ErrorCode: "insufficient_quota"}},
		{name: "429 quota in code only", status: 429, body: `{"error":{"type":"requests","code":"insufficient_quota"}}`,
			want: Classification{Outcome: OutcomeQuotaExhausted, HTTPStatus: 429, ErrorCode: "insufficient_quota"}},
		{name: "429 quota in type only", status: 429, body: `{"error":{"type":"insufficient_quota"}}`,
			want: Classification{Outcome: OutcomeQuotaExhausted, HTTPStatus: 429, ErrorCode: "insufficient_quota"}},
		{name: "429 billing hard limit", status: 429, body: `{"error":{"code":"billing_hard_limit_reached"}}`,
			want: Classification{Outcome: OutcomeQuotaExhausted, HTTPStatus: 429, ErrorCode: "billing_hard_limit_reached"}},
		{name: "403 billing not active", status: 403, body: `{"error":{"type":"billing_not_active"}}`,
			want: Classification{Outcome: OutcomeQuotaExhausted, HTTPStatus: 403, ErrorCode: "billing_not_active"}},
		{name: "429 quota plain text", status: 429, body: "error: insufficient_quota (see billing)",
			want: Classification{Outcome: OutcomeQuotaExhausted, HTTPStatus: 429, ErrorCode: "insufficient_quota"}},
		{name: "429 plain text partial token is not quota", status: 429, body: "not_insufficient_quota_here",
			want: Classification{Outcome: OutcomeRateLimited, Retryable: true, HTTPStatus: 429}},
		{name: "429 quota only in json message is not quota", status: 429, body: `{"error":{"message":"insufficient_quota"}}`,
			want: Classification{Outcome: OutcomeRateLimited, Retryable: true, HTTPStatus: 429}},
		{name: "429 quota beats x-should-retry true", status: 429, body: quotaOpenAI, headers: map[string]string{"x-should-retry": "true"},
			want: Classification{Outcome: OutcomeQuotaExhausted, HTTPStatus: 429, ErrorCode: "insufficient_quota"}},
		{name: "400 quota body stays client error", status: 400, body: quotaOpenAI,
			want: Classification{Outcome: OutcomeClientError, HTTPStatus: 400, ErrorCode: "insufficient_quota"}},

		// Overload.
		{name: "529", status: 529, want: Classification{Outcome: OutcomeOverloaded, Retryable: true, HTTPStatus: 529}},
		{name: "529 anthropic body", status: 529, body: overloadedAnth,
			want: Classification{Outcome: OutcomeOverloaded, Retryable: true, HTTPStatus: 529, ErrorCode: "overloaded_error"}},
		{name: "500 overloaded_error body", status: 500, body: overloadedAnth,
			want: Classification{Outcome: OutcomeOverloaded, Retryable: true, HTTPStatus: 500, ErrorCode: "overloaded_error"}},
		{name: "503 overloaded code", status: 503, body: `{"error":{"type":"server_error","code":"engine_overloaded"}}`,
			want: Classification{Outcome: OutcomeOverloaded, Retryable: true, HTTPStatus: 503, ErrorCode: "engine_overloaded"}},
		{name: "502 overloaded code is transient", status: 502, body: `{"error":{"code":"engine_overloaded"}}`,
			want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, HTTPStatus: 502, ErrorCode: "engine_overloaded"}},
		{name: "529 with retry-after", status: 529, headers: map[string]string{"Retry-After": "8"},
			want: Classification{Outcome: OutcomeOverloaded, Retryable: true, HTTPStatus: 529, RetryAfter: 8 * time.Second}},

		// Auth and client errors.
		{name: "401", status: 401, body: `{"error":{"type":"invalid_request_error","code":"invalid_api_key"}}`,
			want: Classification{Outcome: OutcomeAuthFailure, HTTPStatus: 401, ErrorCode: "invalid_api_key"}},
		{name: "401 anthropic", status: 401, body: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`,
			want: Classification{Outcome: OutcomeAuthFailure, HTTPStatus: 401, ErrorCode: "authentication_error"}},
		{name: "403 permission", status: 403, body: `{"type":"error","error":{"type":"permission_error"}}`,
			want: Classification{Outcome: OutcomeAuthFailure, HTTPStatus: 403, ErrorCode: "permission_error"}},
		{name: "400", status: 400, body: `{"error":{"type":"invalid_request_error","code":"context_length_exceeded"}}`,
			want: Classification{Outcome: OutcomeClientError, HTTPStatus: 400, ErrorCode: "context_length_exceeded"}},
		{name: "404", status: 404, want: Classification{Outcome: OutcomeClientError, HTTPStatus: 404}},
		{name: "413", status: 413, want: Classification{Outcome: OutcomeClientError, HTTPStatus: 413}},
		{name: "422", status: 422, want: Classification{Outcome: OutcomeClientError, HTTPStatus: 422}},
		{name: "402", status: 402, want: Classification{Outcome: OutcomeQuotaExhausted, HTTPStatus: 402}},
		{name: "402 anthropic billing_error", status: 402, body: `{"type":"error","error":{"type":"billing_error"}}`,
			want: Classification{Outcome: OutcomeQuotaExhausted, HTTPStatus: 402, ErrorCode: "billing_error"}},
		{name: "402 deepseek insufficient balance", status: 402, body: `{"error":{"type":"insufficient_balance"}}`,
			want: Classification{Outcome: OutcomeQuotaExhausted, HTTPStatus: 402, ErrorCode: "insufficient_balance"}},
		{name: "429 credit_balance_exhausted is quota, not a rate limit", status: 429, body: `{"error":{"code":"credit_balance_exhausted"}}`,
			want: Classification{Outcome: OutcomeQuotaExhausted, HTTPStatus: 429, ErrorCode: "credit_balance_exhausted"}},
		{name: "403 insufficient_credits is quota", status: 403, body: `{"error":{"code":"insufficient_credits"}}`,
			want: Classification{Outcome: OutcomeQuotaExhausted, HTTPStatus: 403, ErrorCode: "insufficient_credits"}},
		{name: "400 overloaded_error body is never retried", status: 400, body: overloadedAnth,
			want: Classification{Outcome: OutcomeClientError, HTTPStatus: 400, ErrorCode: "overloaded_error"}},
		{name: "429 overloaded_error body is overloaded", status: 429, body: overloadedAnth,
			want: Classification{Outcome: OutcomeOverloaded, Retryable: true, HTTPStatus: 429, ErrorCode: "overloaded_error"}},
		{name: "retry-after too large to represent is the longest delay", status: 429, headers: map[string]string{"Retry-After": "99999999999999999999999"},
			want: Classification{Outcome: OutcomeRateLimited, HTTPStatus: 429, RetryAfter: MaxHint, TooLong: true}},
		{name: "retry-after-ms 2000 with retry-after 120 retries after 2s", status: 503, headers: map[string]string{"retry-after-ms": "2000", "Retry-After": "120"},
			want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, HTTPStatus: 503, RetryAfter: 2 * time.Second}},
		{name: "302 not followed", status: 302, want: Classification{Outcome: OutcomeClientError, HTTPStatus: 302}},
		{name: "free-text type dropped", status: 400, body: `{"error":{"type":"Something went wrong, key sk-abc"}}`,
			want: Classification{Outcome: OutcomeClientError, HTTPStatus: 400}},
		{name: "numeric code ignored", status: 400, body: `{"error":{"code":400}}`, want: Classification{Outcome: OutcomeClientError, HTTPStatus: 400}},
		{name: "code too long dropped", status: 400, body: `{"error":{"code":"` + strings.Repeat("a", 65) + `"}}`,
			want: Classification{Outcome: OutcomeClientError, HTTPStatus: 400}},

		// x-should-retry.
		{name: "500 x-should-retry false", status: 500, headers: map[string]string{"x-should-retry": "false"},
			want: Classification{Outcome: OutcomeTransientFailure, HTTPStatus: 500}},
		{name: "400 x-should-retry true is still never retried", status: 400, headers: map[string]string{"x-should-retry": "TRUE"},
			want: Classification{Outcome: OutcomeClientError, HTTPStatus: 400}},
		{name: "404 x-should-retry true", status: 404, headers: map[string]string{"x-should-retry": "TRUE"},
			want: Classification{Outcome: OutcomeClientError, Retryable: true, HTTPStatus: 404}},
		{name: "429 x-should-retry invalid ignored", status: 429, headers: map[string]string{"x-should-retry": "maybe"},
			want: Classification{Outcome: OutcomeRateLimited, Retryable: true, HTTPStatus: 429}},
		{name: "x-should-retry true loses to a too long delay", status: 503, headers: map[string]string{"x-should-retry": "true", "Retry-After": "120"},
			want: Classification{Outcome: OutcomeTransientFailure, HTTPStatus: 503, RetryAfter: 2 * time.Minute, TooLong: true}},
		{name: "429 after caller deadline keeps outcome", status: 429, headers: map[string]string{"Retry-After": "2"}, ctxErr: context.DeadlineExceeded,
			want: Classification{Outcome: OutcomeRateLimited, HTTPStatus: 429, RetryAfter: 2 * time.Second}},

		// Network errors (no response).
		{name: "conn reset", err: wrapURL(opErr("read", syscall.ECONNRESET)), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "conn_reset"}},
		{name: "conn aborted", err: opErr("read", syscall.ECONNABORTED), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "conn_reset"}},
		{name: "broken pipe", err: wrapURL(opErr("write", syscall.EPIPE)), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "conn_reset"}},
		{name: "conn refused", err: wrapURL(opErr("dial", syscall.ECONNREFUSED)), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "conn_refused"}},
		{name: "etimedout", err: wrapURL(opErr("read", syscall.ETIMEDOUT)), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "timeout"}},
		{name: "i/o deadline", err: wrapURL(&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "timeout"}},
		{name: "per-attempt deadline", err: wrapURL(context.DeadlineExceeded), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "timeout"}},
		{name: "timeout behind fmt wrap", err: wrapURL(fmt.Errorf("dial: %w", os.ErrDeadlineExceeded)), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "timeout"}},
		{name: "unexpected eof", err: wrapURL(io.ErrUnexpectedEOF), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "eof"}},
		{name: "eof", err: wrapURL(io.EOF), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "eof"}},
		{name: "other op error", err: wrapURL(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "conn_error"}},
		{name: "dns not found", err: wrapURL(&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "api.example.com", IsNotFound: true}}), want: Classification{Outcome: OutcomeClientError, ErrorCode: "dns_not_found"}},
		{name: "dns temporary", err: wrapURL(&net.DNSError{Err: "server misbehaving", Name: "api.example.com", IsTemporary: true}), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "dns_temporary"}},
		{name: "dns timeout", err: wrapURL(&net.DNSError{Err: "i/o timeout", Name: "api.example.com", IsTimeout: true}), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "dns_temporary"}},
		{name: "dns other", err: wrapURL(&net.DNSError{Err: "bad reply", Name: "api.example.com"}), want: Classification{Outcome: OutcomeTransientFailure, ErrorCode: "dns_error"}},
		{name: "tls unknown authority", err: wrapURL(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), want: Classification{Outcome: OutcomeClientError, ErrorCode: "tls_certificate"}},
		{name: "x509 unknown authority bare", err: wrapURL(x509.UnknownAuthorityError{}), want: Classification{Outcome: OutcomeClientError, ErrorCode: "tls_certificate"}},
		{name: "x509 expired", err: wrapURL(x509.CertificateInvalidError{Reason: x509.Expired}), want: Classification{Outcome: OutcomeClientError, ErrorCode: "tls_certificate"}},
		{name: "x509 hostname", err: wrapURL(x509.HostnameError{Certificate: &x509.Certificate{}, Host: "api.example.com"}), want: Classification{Outcome: OutcomeClientError, ErrorCode: "tls_certificate"}},
		{name: "unknown error not retried", err: errors.New("boom"), want: Classification{Outcome: OutcomeTransientFailure}},
		{name: "message text is never matched", err: errors.New("read: connection reset by peer"), want: Classification{Outcome: OutcomeTransientFailure}},
		{name: "no response no error", want: Classification{}},

		// Cancellation.
		{name: "err canceled", err: wrapURL(context.Canceled), want: Classification{Outcome: OutcomeCanceled, ErrorCode: "canceled"}},
		{name: "caller canceled", err: wrapURL(opErr("read", syscall.ECONNRESET)), ctxErr: context.Canceled, want: Classification{Outcome: OutcomeCanceled, ErrorCode: "canceled"}},
		{name: "caller deadline", err: wrapURL(context.DeadlineExceeded), ctxErr: context.DeadlineExceeded, want: Classification{Outcome: OutcomeCanceled, ErrorCode: "deadline_exceeded"}},
		{name: "caller deadline wrapped", err: wrapURL(context.DeadlineExceeded), ctxErr: fmt.Errorf("attempt: %w", context.DeadlineExceeded), want: Classification{Outcome: OutcomeCanceled, ErrorCode: "deadline_exceeded"}},
	}
	rules := DefaultRules()
	rules.Now = func() time.Time { return testNow }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var resp *http.Response
			if tt.status != 0 {
				resp = &http.Response{StatusCode: tt.status, Header: header(tt.headers)}
			}
			var body []byte
			if tt.body != "" {
				body = []byte(tt.body)
			}
			got := Classify(rules, resp, body, tt.err, tt.ctxErr)
			assert.Equal(t, tt.want, got)
			assert.Regexp(t, `^[a-z0-9_.-]{0,64}$`, got.ErrorCode)
		})
	}
}

func TestClassifyRules(t *testing.T) {
	t.Parallel()
	resp := &http.Response{StatusCode: 429, Header: header(map[string]string{"Retry-After": "10"})}
	t.Run("smaller MaxServerDelay makes it too long", func(t *testing.T) {
		t.Parallel()
		got := Classify(Rules{MaxServerDelay: 5 * time.Second, MaxBodyBytes: 1 << 10}, resp, nil, nil, nil)
		assert.True(t, got.TooLong)
		assert.False(t, got.Retryable)
		assert.Equal(t, 10*time.Second, got.RetryAfter)
	})
	t.Run("zero rules take defaults", func(t *testing.T) {
		t.Parallel()
		got := Classify(Rules{}, resp, nil, nil, nil)
		assert.False(t, got.TooLong)
		assert.True(t, got.Retryable)
	})
	t.Run("body beyond MaxBodyBytes is not read", func(t *testing.T) {
		t.Parallel()
		got := Classify(Rules{MaxBodyBytes: 10}, &http.Response{StatusCode: 429}, []byte(quotaOpenAI), nil, nil)
		assert.Equal(t, OutcomeRateLimited, got.Outcome)
	})
}

func TestOutcomeString(t *testing.T) {
	t.Parallel()
	want := map[Outcome]string{
		OutcomeUnspecified: "unspecified", OutcomeSuccess: "success", OutcomeTransientFailure: "transient_failure",
		OutcomeRateLimited: "rate_limited", OutcomeOverloaded: "overloaded", OutcomeQuotaExhausted: "quota_exhausted",
		OutcomeAuthFailure: "auth_failure", OutcomeClientError: "client_error", OutcomeCanceled: "canceled",
	}
	for o := OutcomeUnspecified; o <= OutcomeCanceled; o++ {
		assert.Equal(t, want[o], o.String(), "outcome %d", int(o))
	}
	assert.Equal(t, "outcome(42)", Outcome(42).String())
	assert.Equal(t, "outcome(-1)", Outcome(-1).String())
}

func ExampleClassify() {
	resp := &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"3"}}}
	body := []byte(`{"error":{"type":"requests","code":"rate_limit_exceeded"}}`)
	c := Classify(DefaultRules(), resp, body, nil, nil)
	fmt.Println(c.Outcome, c.Retryable, c.RetryAfter, c.ErrorCode)
	// Output: rate_limited true 3s rate_limit_exceeded
}
