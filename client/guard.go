package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"
)

// overloadFloor is the least delay before retrying an overloaded provider.
const overloadFloor = 5 * time.Second

// minDenyWait is the least wait after a denial, so that a denial that is
// about to end does not turn into a burst of Admits.
const minDenyWait = 10 * time.Millisecond

// attemptFunc makes attempt n (from 1) of a guarded call on conn.
type attemptFunc func(ctx context.Context, conn Conn, n int) (*http.Response, error)

// Do guards one provider call on conn:
//
//  1. Admit. On a denial it waits for the connection (with jitter, at most
//     the max wait in total and never past ctx's deadline), or returns a
//     [*DeniedError] at once when the wait would be longer, or with
//     [WithNoWait].
//  2. call(ctx). A 2xx response is returned with its body unread: success is
//     reported when the headers arrive, and a stream is never replayed. Any
//     other response's body is read (at most [Rules.MaxBodyBytes]),
//     classified by [Classify], and kept in [Error.Response].
//  3. Report the outcome to cooldownd, with the admission's revision and
//     lease token.
//  4. Retry a retryable failure up to the max retries (see
//     [WithMaxRetries]) after an exponential backoff with jitter (see
//     [WithBackoff]; at least the provider's Retry-After, at least 5 s when
//     overloaded), unless the wait would pass ctx's deadline. A provider
//     delay above [Rules.MaxServerDelay] is not waited for.
//
// The caller's cancellation is never retried, also not during a wait. A
// failure ends with an [*Error] describing the last attempt. call must
// build a fresh request on every attempt; it must not retry by itself (set
// SDK retries to 0).
func (c *Client) Do(ctx context.Context, conn Conn, call func(ctx context.Context) (*http.Response, error)) (*http.Response, error) {
	return c.guard(ctx, []Conn{conn}, c.cfg.maxRetries, func(ctx context.Context, _ Conn, _ int) (*http.Response, error) {
		return call(ctx)
	})
}

// guard runs admit → call → classify → report → retry or move on over the
// candidates, in order of preference.
func (c *Client) guard(ctx context.Context, cands []Conn, maxRetries int, call attemptFunc) (*http.Response, error) {
	if err := validConns(cands); err != nil {
		return nil, err
	}
	live := slices.Clone(cands)
	var (
		attempts, retries int
		waited            time.Duration
		last              *Error
	)
	for {
		if ctx.Err() != nil {
			return nil, ended(ctx, last, live[0])
		}
		adm, err := c.Admit(ctx, live...)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, ended(ctx, last, live[0])
		case errors.Is(err, ErrUnavailable):
			return nil, &DeniedError{Conn: live[0], Reason: ReasonUnavailable, Local: true, Attempts: attempts, Err: err}
		case err != nil:
			return nil, err
		case adm.Decision == DecisionDeny:
			d, ok := c.denyWait(ctx, adm, waited)
			if !ok {
				return nil, denied(adm, attempts, last)
			}
			c.log.Debug("waiting for a denied connection", slog.Any("admission", adm), slog.Duration("wait", d))
			if c.sleep(ctx, d) != nil {
				return nil, ended(ctx, last, adm.Conn)
			}
			waited += d
			continue
		}

		attempts++
		resp, cl, callErr := c.attempt(ctx, adm, attempts, call)
		open, err := c.report(ctx, adm, cl)
		if err != nil {
			c.log.Debug("report failed", slog.Any("conn", adm.Conn), slog.String("error", err.Error()))
		}
		if cl.Outcome == OutcomeSuccess {
			return resp, nil
		}
		last = &Error{
			Conn: adm.Conn, Attempts: attempts, LastOutcome: cl.Outcome, ErrorCode: cl.ErrorCode,
			HTTPStatus: cl.HTTPStatus, RetryAfter: cl.RetryAfter, TooLong: cl.TooLong, Response: resp, Err: callErr,
		}
		switch {
		case ctx.Err() != nil:
			return nil, ended(ctx, last, adm.Conn)
		case cl.Retryable && retries < maxRetries:
			retries++
			if open && len(live) > 1 {
				continue // the next Admit picks another candidate at once
			}
			delay := c.retryDelay(retries, cl)
			if deadline, ok := ctx.Deadline(); ok && !c.now().Add(delay).Before(deadline) {
				return nil, last
			}
			c.log.Debug("retrying provider call", slog.Any("conn", adm.Conn), slog.Int("attempt", attempts),
				slog.String("outcome", cl.Outcome.String()), slog.Int("http_status", cl.HTTPStatus),
				slog.String("error_code", cl.ErrorCode), slog.Duration("delay", delay))
			if c.sleep(ctx, delay) != nil {
				return nil, ended(ctx, last, adm.Conn)
			}
		case providerFault(cl.Outcome) && len(live) > 1:
			c.log.Debug("moving on to the next candidate", slog.Any("conn", adm.Conn),
				slog.String("outcome", cl.Outcome.String()), slog.String("error_code", cl.ErrorCode))
			live = slices.DeleteFunc(live, func(x Conn) bool { return x.id == adm.Conn.id })
		default:
			return nil, last
		}
	}
}

// attempt makes one call and classifies it. A non-2xx response's body is
// read (bounded) and put back, so that the caller can still read it.
func (c *Client) attempt(ctx context.Context, adm Admission, n int, call attemptFunc) (*http.Response, Classification, error) {
	resp, err := call(context.WithValue(ctx, admissionKey{}, adm), adm.Conn, n)
	if resp == nil && err == nil {
		err = ErrNoResponse
	}
	var body []byte
	if resp != nil && (resp.StatusCode < 200 || resp.StatusCode > 299) {
		body, _ = ReadErrorBody(ctx, resp, c.cfg.rules.MaxBodyBytes) // a short read still classifies by status
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
	}
	return resp, Classify(c.cfg.rules, resp, body, err, ctx.Err()), err
}

// admissionKey is the context key of the admission a guarded attempt runs
// under.
type admissionKey struct{}

// AdmissionFrom returns the admission under which a guarded call runs:
// [Client.Do] and [Client.DoFallback] put it in the context they pass to
// each attempt of call. With it a call can tell a recovery probe
// ([DecisionAllowProbe]) from an ordinary call, for example to keep a long
// probe's lease with [Client.ExtendLease] or to tag the request. ok is
// false for a context that does not come from a guard.
func AdmissionFrom(ctx context.Context) (a Admission, ok bool) {
	a, ok = ctx.Value(admissionKey{}).(Admission)
	return a, ok
}

// providerFault reports whether an outcome is the provider's (or the
// credential's) failure, after which another candidate may do better.
func providerFault(o Outcome) bool {
	switch o {
	case OutcomeTransientFailure, OutcomeRateLimited, OutcomeOverloaded, OutcomeQuotaExhausted, OutcomeAuthFailure:
		return true
	}
	return false
}

// denyWait returns how long to wait after a denial, and false when the
// guard must not wait: no-wait, past the max wait, or past ctx's deadline.
// The wait is the denial's retry-after plus a little jitter, never less; a
// caller denied because a probe is in flight asks again sooner.
func (c *Client) denyWait(ctx context.Context, a Admission, waited time.Duration) (time.Duration, bool) {
	if c.cfg.noWait {
		return 0, false
	}
	left := c.cfg.maxWait - waited
	d := max(a.RetryAfter, minDenyWait)
	if a.Reason == ReasonProbeInFlight {
		d = min(d, c.cfg.probePoll)
	}
	if d > left {
		return 0, false
	}
	d = min(d+rand.N(d/10+10*time.Millisecond), left)
	if deadline, ok := ctx.Deadline(); ok && c.now().Add(d).After(deadline) {
		return 0, false
	}
	return d, true
}

// retryDelay is the wait before retry n (from 1): exponential backoff with
// equal jitter, capped; at least the overload floor when overloaded; never
// shorter than the provider's Retry-After.
func (c *Client) retryDelay(n int, cl Classification) time.Duration {
	d := c.cfg.backoffBase
	for i := 1; i < n && d < c.cfg.backoffCap; i++ {
		d *= 2
	}
	d = min(d, c.cfg.backoffCap)
	d = equalJitter(d)
	if cl.Outcome == OutcomeOverloaded {
		d = max(d, overloadFloor)
	}
	return max(d, cl.RetryAfter)
}

// equalJitter returns a random duration between half of d and d: the
// jitter of every backoff of the client (retries, the report queue, the
// mirror's reconnects).
func equalJitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

// sleep waits d or until ctx ends, whichever is first; it returns ctx's
// error in the second case.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ended is the error of a guard whose context ended: the last attempt's
// error with the context's error joined in, or a canceled-only error when
// no call was made.
func ended(ctx context.Context, last *Error, conn Conn) error {
	cerr := ctx.Err()
	if last == nil {
		cl := canceled(cerr)
		return &Error{Conn: conn, LastOutcome: cl.Outcome, ErrorCode: cl.ErrorCode, Err: cerr}
	}
	if !errors.Is(last.Err, cerr) {
		last.Err = errors.Join(last.Err, cerr)
	}
	return last
}

// denied is the error of a denial the guard does not wait for.
func denied(a Admission, attempts int, last *Error) error {
	e := &DeniedError{Conn: a.Conn, Reason: a.Reason, RetryAfter: a.RetryAfter, Local: a.Local, Attempts: attempts}
	if last != nil {
		e.Err = last
	}
	return e
}
