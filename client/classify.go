package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// Outcome is what one provider call amounted to. It mirrors the outcome
// enum of the server's Report call; values and names are the breaker's
// (internal/breaker), as for [Decision].
type Outcome int

// The outcomes of a provider call; see the Decisions table of the design.
const (
	OutcomeUnspecified      = Outcome(0)                               // no verdict (no response and no error)
	OutcomeSuccess          = Outcome(breaker.OutcomeSuccess)          // 2xx
	OutcomeTransientFailure = Outcome(breaker.OutcomeTransientFailure) // 408, 409, 5xx but 501/505, dropped connections, timeouts
	OutcomeRateLimited      = Outcome(breaker.OutcomeRateLimited)      // 429
	OutcomeOverloaded       = Outcome(breaker.OutcomeOverloaded)       // 529, overloaded_error, 503 overloaded
	OutcomeQuotaExhausted   = Outcome(breaker.OutcomeQuotaExhausted)   // 402; 400/403/429 with insufficient_quota or a billing code
	OutcomeAuthFailure      = Outcome(breaker.OutcomeAuthFailure)      // 401, 403
	OutcomeClientError      = Outcome(breaker.OutcomeClientError)      // other 4xx, 501, 505, TLS certificate, DNS not found
	OutcomeCanceled         = Outcome(breaker.OutcomeCanceled)         // the caller canceled or its deadline passed
)

// String returns the snake_case name of o, or "outcome(N)" for an unknown value.
func (o Outcome) String() string { return breakerName[breaker.Outcome](int(o), "outcome") }

// Classification is the verdict on one provider call.
type Classification struct {
	// Outcome is what the call amounted to.
	Outcome Outcome
	// Retryable reports whether the guard may retry this call.
	Retryable bool
	// RetryAfter is the delay the server asked for (0 = none given), read
	// in the SDKs' precedence (see [ServerDelay]), at most [MaxHint].
	RetryAfter time.Duration
	// HTTPStatus is the response status, 0 when there was no response.
	HTTPStatus int
	// ErrorCode is a short machine code: the provider's error code or type
	// from the body (e.g. "insufficient_quota", "overloaded_error",
	// "rate_limit_exceeded") or a network class ("conn_reset",
	// "conn_refused", "conn_error", "timeout", "dns_temporary", "dns_error",
	// "dns_not_found", "tls_certificate", "canceled", "deadline_exceeded",
	// "eof"). It is never free text: at most 64 characters of [a-z0-9_.-].
	ErrorCode string
	// Proactive, when > 0, is set on a success whose rate-limit headers say
	// zero remaining until this delay: report it so that every process cools
	// down before the first 429.
	Proactive time.Duration
	// TooLong reports that the server asked for a delay above
	// [Rules.MaxServerDelay]: do not wait, end now (use a fallback).
	// Retryable is then false; Outcome and RetryAfter are kept.
	TooLong bool
}

// Rules are the classification knobs. Start from [DefaultRules]: a field
// left ≤ 0 (or nil) takes its default.
type Rules struct {
	// MaxServerDelay is the longest server-requested delay worth waiting for
	// (default 30s). A longer one sets [Classification.TooLong].
	MaxServerDelay time.Duration
	// MaxBodyBytes bounds the error body read and inspected (default 64 KiB).
	MaxBodyBytes int64
	// Now is the clock used for HTTP-date and RFC 3339 headers (nil: time.Now).
	Now func() time.Time
}

// DefaultRules returns the default [Rules]: MaxServerDelay 30s, MaxBodyBytes 64 KiB.
func DefaultRules() Rules {
	return Rules{MaxServerDelay: 30 * time.Second, MaxBodyBytes: 64 << 10, Now: time.Now}
}

func (r Rules) withDefaults() Rules {
	def := DefaultRules()
	if r.MaxServerDelay <= 0 {
		r.MaxServerDelay = def.MaxServerDelay
	}
	if r.MaxBodyBytes <= 0 {
		r.MaxBodyBytes = def.MaxBodyBytes
	}
	if r.Now == nil {
		r.Now = def.Now
	}
	return r
}

// Classify classifies the result of one provider call. resp may be nil when
// err != nil; when resp is non-nil the provider answered, so its status,
// headers and body decide and err is ignored. body is the already-read,
// bounded error body of a non-2xx response (nil for 2xx; see
// [ReadErrorBody]). ctxErr is the caller's context error: when non-nil the
// call is never retryable, and a call without a response is
// [OutcomeCanceled].
//
// Order of precedence for a response: the status sets Outcome and
// Retryable; a quota or billing body (on 402, 403 or 429) makes it
// QuotaExhausted and not retryable; on a 5xx or 429, an overloaded body
// makes it Overloaded and retryable (a 400's body changes nothing: a
// malformed request never succeeds on retry, whatever its body says); then
// x-should-retry, the server's own word, overrides Retryable for every
// status, a 400 included, as the providers' SDKs obey it (not for quota);
// then a server delay above MaxServerDelay makes it not retryable and
// TooLong. Headers are read as lists of elements (see [ParseRetryAfter]).
func Classify(r Rules, resp *http.Response, body []byte, err error, ctxErr error) Classification {
	r = r.withDefaults()
	var c Classification
	switch {
	case resp != nil:
		c = classifyResponse(r, resp, body)
	case ctxErr != nil:
		c = canceled(ctxErr)
	case err != nil:
		c = classifyError(err)
	}
	if ctxErr != nil {
		c.Retryable = false
	}
	return c
}

func classifyResponse(r Rules, resp *http.Response, body []byte) Classification {
	s := resp.StatusCode
	c := Classification{HTTPStatus: s}
	if s >= 200 && s <= 299 {
		c.Outcome = OutcomeSuccess
		c.Proactive, _ = ProactiveDelay(resp.Header, r.Now())
		return c
	}
	c.Outcome, c.Retryable = statusOutcome(s)
	info := parseErrorBody(body[:min(int64(len(body)), r.MaxBodyBytes)])
	c.ErrorCode = info.errorCode()
	switch {
	case info.quota != "" && quotaStatus(s):
		c.Outcome, c.Retryable = OutcomeQuotaExhausted, false
	case s == http.StatusBadRequest:
		// The caller's request is wrong: its body never makes it retried
		// (only x-should-retry, below, can).
	case (s >= 500 || s == http.StatusTooManyRequests) && info.says("overloaded_error"),
		s == http.StatusServiceUnavailable && info.says("overload"):
		c.Outcome, c.Retryable = OutcomeOverloaded, true
	}
	if retry, ok := ShouldRetryHeader(resp.Header); ok && c.Outcome != OutcomeQuotaExhausted {
		c.Retryable = retry
	}
	if d, ok := ServerDelay(resp.Header, r.Now()); ok {
		c.RetryAfter = d
		if d > r.MaxServerDelay {
			c.Retryable, c.TooLong = false, true
		}
	}
	return c
}

// statusOutcome maps a non-2xx status to its outcome and retryability.
func statusOutcome(s int) (Outcome, bool) {
	switch {
	case s == http.StatusRequestTimeout, s == http.StatusConflict:
		return OutcomeTransientFailure, true
	case s == http.StatusTooManyRequests:
		return OutcomeRateLimited, true
	case s == 529:
		return OutcomeOverloaded, true
	case s == http.StatusUnauthorized, s == http.StatusForbidden:
		return OutcomeAuthFailure, false
	case s == http.StatusPaymentRequired:
		return OutcomeQuotaExhausted, false
	case s == http.StatusNotImplemented, s == http.StatusHTTPVersionNotSupported:
		return OutcomeClientError, false
	case s >= 500 && s <= 599:
		return OutcomeTransientFailure, true
	}
	return OutcomeClientError, false
}

// quotaStatus reports whether a status may carry a quota or billing body:
// 429 and 403 (OpenAI), 402 (Anthropic, DeepSeek, OpenRouter). A 400 is
// the request's fault whatever its body says.
func quotaStatus(s int) bool {
	switch s {
	case http.StatusPaymentRequired, http.StatusForbidden, http.StatusTooManyRequests:
		return true
	}
	return false
}

// canceled is the verdict for a call the caller abandoned.
func canceled(err error) Classification {
	if errors.Is(err, context.DeadlineExceeded) {
		return Classification{Outcome: OutcomeCanceled, ErrorCode: "deadline_exceeded"}
	}
	return Classification{Outcome: OutcomeCanceled, ErrorCode: "canceled"}
}

// classifyError classifies a call that got no response, from the types in
// the error chain only (never from message text). An error it does not
// recognise is a TransientFailure that is not retried.
func classifyError(err error) Classification {
	transient := func(code string) Classification {
		return Classification{Outcome: OutcomeTransientFailure, Retryable: true, ErrorCode: code}
	}
	var (
		unknownAuthority x509.UnknownAuthorityError
		invalidCert      x509.CertificateInvalidError
		hostname         x509.HostnameError
		verification     *tls.CertificateVerificationError
		dnsErr           *net.DNSError
		opErr            *net.OpError
	)
	switch {
	case errors.Is(err, context.Canceled):
		return canceled(err)
	case errors.As(err, &unknownAuthority), errors.As(err, &invalidCert),
		errors.As(err, &hostname), errors.As(err, &verification):
		return Classification{Outcome: OutcomeClientError, ErrorCode: "tls_certificate"}
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return Classification{Outcome: OutcomeClientError, ErrorCode: "dns_not_found"}
	case errors.As(err, &dnsErr) && (dnsErr.IsTemporary || dnsErr.IsTimeout):
		return transient("dns_temporary")
	case errors.As(err, &dnsErr):
		return Classification{Outcome: OutcomeTransientFailure, ErrorCode: "dns_error"}
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE):
		return transient("conn_reset")
	case errors.Is(err, syscall.ECONNREFUSED):
		return transient("conn_refused")
	case errors.Is(err, syscall.ETIMEDOUT), isTimeout(err):
		return transient("timeout")
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return transient("eof")
	case errors.As(err, &opErr):
		return transient("conn_error")
	}
	return Classification{Outcome: OutcomeTransientFailure}
}

// isTimeout reports whether any error in err's chain is a timeout (a
// net.Error, context.DeadlineExceeded, os.ErrDeadlineExceeded). It walks the
// whole chain because a wrapper such as *url.Error only asks its direct cause.
func isTimeout(err error) bool {
	for err != nil {
		if t, ok := err.(interface{ Timeout() bool }); ok && t.Timeout() {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if isTimeout(e) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}
