package client

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
)

var (
	// ErrUnavailable is wrapped by the errors returned while cooldownd is
	// unreachable and the client fails closed (see [FailClosed]).
	ErrUnavailable = errors.New("client: cooldownd unavailable")
	// ErrDenied matches every [*DeniedError] with [errors.Is].
	ErrDenied = errors.New("client: denied")
	// ErrNoResponse is the cause recorded when a guarded call returns
	// neither a response nor an error.
	ErrNoResponse = errors.New("client: call returned no response and no error")
)

// DeniedError is returned by the guards when no candidate may be called
// now and waiting is not an option: the denial's retry-after would take the
// wait past the max wait (see [WithMaxWait]) or the context's deadline,
// [WithNoWait] is set, the denial is not a wait for the connection (a retry
// over the fleet's retry budget, [ReasonRetryBudget], or a throttled call,
// [ReasonThrottled]), or cooldownd is unreachable and the client fails
// closed. It matches [ErrDenied] with [errors.Is].
type DeniedError struct {
	// Conn is the denied candidate (the one available soonest).
	Conn Conn
	// Reason is why it was denied.
	Reason DenyReason
	// RetryAfter is how long until a candidate may be available.
	RetryAfter time.Duration
	// Local reports that the in-process breaker denied the call.
	Local bool
	// Attempts is how many provider calls the guard made before the denial.
	Attempts int
	// Err is the cause, if any: an error wrapping [ErrUnavailable] when
	// failing closed, or the [*Error] of the previous attempt.
	Err error
}

// Error describes the denial.
func (e *DeniedError) Error() string {
	var b strings.Builder
	b.WriteString("client: denied (")
	b.WriteString(e.Reason.String())
	b.WriteString(") on ")
	b.WriteString(e.Conn.String())
	if e.RetryAfter > 0 {
		b.WriteString(", retry after ")
		b.WriteString(e.RetryAfter.String())
	}
	if e.Local {
		b.WriteString(" (local)")
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Is reports whether target is [ErrDenied].
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// Unwrap returns the cause.
func (e *DeniedError) Unwrap() error { return e.Err }

// Error is returned by the guards when the provider call failed for good:
// it was not retryable, the retries ran out, or the context ended. It
// describes the last attempt.
type Error struct {
	// Conn is the connection of the last attempt.
	Conn Conn
	// Attempts is how many provider calls were made.
	Attempts int
	// LastOutcome is the classified outcome of the last attempt.
	LastOutcome Outcome
	// ErrorCode is the last attempt's short machine code (see
	// [Classification.ErrorCode]).
	ErrorCode string
	// HTTPStatus is the last attempt's status, 0 when it got no response.
	HTTPStatus int
	// RetryAfter is the delay the provider asked for on the last attempt.
	RetryAfter time.Duration
	// TooLong reports that the provider asked for a delay above
	// [Rules.MaxServerDelay].
	TooLong bool
	// Response is the last attempt's response, nil when it got none. Its
	// Body holds the error body as read (at most [Rules.MaxBodyBytes]
	// bytes); the original body is closed.
	Response *http.Response
	// Err is the cause: the call's error and, when the context ended, the
	// context's error. Nil for a plain HTTP failure.
	Err error
}

// Error describes the failure.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("client: provider call failed after ")
	b.WriteString(strconv.Itoa(e.Attempts))
	if e.Attempts == 1 {
		b.WriteString(" attempt: ")
	} else {
		b.WriteString(" attempts: ")
	}
	b.WriteString(e.LastOutcome.String())
	if e.HTTPStatus != 0 {
		b.WriteString(" (http ")
		b.WriteString(strconv.Itoa(e.HTTPStatus))
		if e.ErrorCode != "" {
			b.WriteString(", ")
			b.WriteString(e.ErrorCode)
		}
		b.WriteString(")")
	} else if e.ErrorCode != "" {
		b.WriteString(" (")
		b.WriteString(e.ErrorCode)
		b.WriteString(")")
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// ErrRejected matches every [*RejectedError] with [errors.Is].
var ErrRejected = errors.New("client: cooldownd rejected the request")

// RejectedError is returned when cooldownd answered and refused the
// request: a configuration or caller error (a bad or missing token, a
// role without the right, an invalid argument, a lease that is no longer
// held, a method the server does not have). It is never taken for an
// outage: the call is not decided in-process, whatever the fail mode, and
// the guards return it as is. It matches [ErrRejected] with [errors.Is],
// and [connect.CodeOf] reads its code.
type RejectedError struct {
	// Op is the call that was refused: "admit", "report" or "extend lease".
	Op string
	// Code is cooldownd's answer.
	Code connect.Code
	// Err is the Connect error.
	Err error
}

// Error describes the refusal.
func (e *RejectedError) Error() string {
	return "client: " + e.Op + ": cooldownd rejected the request (" + e.Code.String() + "): " + e.Err.Error()
}

// Is reports whether target is [ErrRejected].
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

// Unwrap returns the Connect error.
func (e *RejectedError) Unwrap() error { return e.Err }
