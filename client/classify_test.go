package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
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

// TestClassify holds the cases only Go can build: error values of Go's
// own types (x509, net.OpError, wrapped deadlines). Every response case —
// statuses, headers, bodies — lives in the one fixture both clients run,
// testdata/classification.json at the repository root: the Go client runs
// it in clients/ts/conformance (TestClassificationFixture), the TypeScript
// client in clients/ts/test, so the two cannot drift.
func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		status  int // 0: no response
		headers map[string]string
		body    string
		err     error
		ctxErr  error
		want    Classification
	}{
		{name: "i/o deadline", err: wrapURL(&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "timeout"}},
		{name: "per-attempt deadline", err: wrapURL(context.DeadlineExceeded), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "timeout"}},
		{name: "timeout behind fmt wrap", err: wrapURL(fmt.Errorf("dial: %w", os.ErrDeadlineExceeded)), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "timeout"}},
		{name: "unexpected eof", err: wrapURL(io.ErrUnexpectedEOF), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "eof"}},
		{name: "other op error", err: wrapURL(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "conn_error"}},
		{name: "dns timeout", err: wrapURL(&net.DNSError{Err: "i/o timeout", Name: "api.example.com", IsTimeout: true}), want: Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: "dns_temporary"}},
		{name: "tls unknown authority", err: wrapURL(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), want: Classification{Outcome: OutcomeClientError, ErrorCode: "tls_certificate"}},
		{name: "x509 unknown authority bare", err: wrapURL(x509.UnknownAuthorityError{}), want: Classification{Outcome: OutcomeClientError, ErrorCode: "tls_certificate"}},
		{name: "x509 expired", err: wrapURL(x509.CertificateInvalidError{Reason: x509.Expired}), want: Classification{Outcome: OutcomeClientError, ErrorCode: "tls_certificate"}},
		{name: "x509 hostname", err: wrapURL(x509.HostnameError{Certificate: &x509.Certificate{}, Host: "api.example.com"}), want: Classification{Outcome: OutcomeClientError, ErrorCode: "tls_certificate"}},
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
