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
	"strconv"
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
//  1. Admit, as a retry on a connection this call was already sent to
//     (see [Client.AdmitAttempt]). On a denial it waits for the connection
//     (with jitter, at most the max wait in total and never past ctx's
//     deadline), or returns a [*DeniedError] at once when the wait would be
//     longer, or with [WithNoWait]. A retry over the fleet's retry budget
//     ([ReasonRetryBudget]) and a throttled call ([ReasonThrottled]) are
//     never waited for: the [*DeniedError] comes at once, wrapping the last
//     attempt's [*Error] if any.
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
	return c.guard(ctx, "do", []Conn{conn}, c.cfg.maxRetries, func(ctx context.Context, _ Conn, _ int) (*http.Response, error) {
		return call(ctx)
	})
}

// guard runs admit → call → classify → report → the next step over the
// candidates, in order of preference, in a span of its own when tracing
// (kind: do, fallback or round_tripper; see otel.go).
func (c *Client) guard(ctx context.Context, kind string, cands []Conn, maxRetries int, call attemptFunc) (*http.Response, error) {
	ctx, span := c.startGuard(ctx, kind, cands)
	if span == nil {
		return c.guardLoop(ctx, cands, maxRetries, call)
	}
	resp, err := c.guardLoop(ctx, cands, maxRetries, call)
	endGuard(span, err)
	return resp, err
}

// guardLoop is [Client.guard]'s loop. It does the I/O and the bookkeeping;
// what to do after a denial or a failed call is decided by [guardPolicy.next].
func (c *Client) guardLoop(ctx context.Context, cands []Conn, maxRetries int, call attemptFunc) (*http.Response, error) {
	if err := validConns(cands); err != nil {
		return nil, err
	}
	p := c.guardPolicy(maxRetries)
	live := slices.Clone(cands)
	var (
		attempts int
		b        budget
		last     *Error
		sent     []Conn // the candidates this call went to: on them it is a retry
	)
	for {
		if ctx.Err() != nil {
			return nil, ended(ctx, last, live[0])
		}
		adm, err := c.AdmitAttempt(ctx, Attempt{Candidates: live, Sent: sent})
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, ended(ctx, last, live[0])
		case errors.Is(err, ErrUnavailable):
			return nil, &DeniedError{Conn: live[0], Reason: ReasonUnavailable, Local: true, Attempts: attempts, Err: err}
		case err != nil:
			return nil, err
		case adm.Decision == DecisionDeny:
			st := p.next(c.budgetAt(ctx, b, live), round{denied: true, reason: adm.Reason, retryAfter: adm.RetryAfter})
			switch st.kind {
			case stepStop:
				return nil, denied(adm, attempts, last)
			case stepNext:
				live = slices.DeleteFunc(live, func(x Conn) bool { return x.id == adm.Conn.id })
				continue
			}
			c.log.Debug("waiting for a denied connection", slog.Any("admission", adm), slog.Duration("wait", st.delay))
			traceWait(ctx, st.delay, "denied:"+adm.Reason.String())
			if c.sleep(ctx, st.delay) != nil {
				return nil, ended(ctx, last, adm.Conn)
			}
			b.waited += st.delay
			continue
		}

		attempts++
		if !adm.Retry {
			sent = append(sent, adm.Conn)
		}
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
		if ctx.Err() != nil {
			return nil, ended(ctx, last, adm.Conn)
		}
		st := p.next(c.budgetAt(ctx, b, live), round{cl: cl, opened: open})
		switch st.kind {
		case stepRetry:
			b.retries++
			c.log.Debug("retrying provider call", slog.Any("conn", adm.Conn), slog.Int("attempt", attempts),
				slog.String("outcome", cl.Outcome.String()), slog.Int("http_status", cl.HTTPStatus),
				slog.String("error_code", cl.ErrorCode), slog.Duration("delay", st.delay))
			traceWait(ctx, st.delay, "retry:"+cl.Outcome.String())
			if c.sleep(ctx, st.delay) != nil {
				return nil, ended(ctx, last, adm.Conn)
			}
		case stepSwitch:
			b.retries++ // the next Admit picks another candidate at once
		case stepNext:
			c.log.Debug("moving on to the next candidate", slog.Any("conn", adm.Conn),
				slog.String("outcome", cl.Outcome.String()), slog.String("error_code", cl.ErrorCode))
			live = slices.DeleteFunc(live, func(x Conn) bool { return x.id == adm.Conn.id })
		default:
			return nil, last
		}
	}
}

// guardPolicy returns the guard's knobs from the client's configuration.
func (c *Client) guardPolicy(maxRetries int) guardPolicy {
	return guardPolicy{
		maxRetries: maxRetries, maxWait: c.cfg.maxWait, noWait: c.cfg.noWait, probePoll: c.cfg.probePoll,
		backoffBase: c.cfg.backoffBase, backoffCap: c.cfg.backoffCap, jitter: rand.N[time.Duration],
	}
}

// budgetAt returns b with the candidates left, the time now and ctx's
// deadline filled in.
func (c *Client) budgetAt(ctx context.Context, b budget, live []Conn) budget {
	b.candidates = len(live)
	b.now = c.now()
	b.deadline, _ = ctx.Deadline()
	return b
}

// attempt makes one call and classifies it. A non-2xx response's body is
// read (bounded) and put back, so that the caller can still read it.
func (c *Client) attempt(ctx context.Context, adm Admission, n int, call attemptFunc) (*http.Response, Classification, error) {
	ctx, span := c.startAttempt(ctx, adm, n)
	resp, cl, err := c.attemptCall(ctx, adm, n, call)
	endAttempt(span, cl)
	return resp, cl, err
}

// attemptCall is [Client.attempt] in the attempt's span.
func (c *Client) attemptCall(ctx context.Context, adm Admission, n int, call attemptFunc) (*http.Response, Classification, error) {
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

// guardPolicy holds the knobs of the guard's next step.
type guardPolicy struct {
	maxRetries              int           // retries of retryable failures, over all candidates
	maxWait                 time.Duration // total wait for denied connections
	noWait                  bool          // never wait for a denied connection
	probePoll               time.Duration // longest wait after PROBE_IN_FLIGHT
	backoffBase, backoffCap time.Duration
	// jitter returns a random duration in [0, n); n > 0.
	jitter func(n time.Duration) time.Duration
}

// budget is what a guard has used so far, and when it is.
type budget struct {
	retries    int           // retries made
	waited     time.Duration // time waited for denied connections
	candidates int           // candidates left
	now        time.Time
	deadline   time.Time // ctx's deadline; zero: none
}

// round is what one round of the guard came to: every candidate denied, or
// a call that did not succeed.
type round struct {
	denied     bool          // Admit denied every candidate (reason, retryAfter)
	reason     DenyReason    // the denial's reason
	retryAfter time.Duration // the denial's retry-after
	cl         Classification
	opened     bool // the failure's report left its connection open
}

// stepKind is what the guard does next.
type stepKind int

const (
	// stepStop ends the guard: with a [*DeniedError] after a denial, with
	// the last call's [*Error] after a failure.
	stepStop stepKind = iota
	// stepWait waits delay for a denied connection, then admits again.
	stepWait
	// stepRetry waits delay, then admits and calls again (one retry).
	stepRetry
	// stepSwitch retries at once: the failed candidate is open now, so the
	// next Admit picks another (one retry).
	stepSwitch
	// stepNext drops the failed (or budget-denied, throttled) candidate
	// and admits the rest at once.
	stepNext
)

var stepNames = [...]string{"stop", "wait", "retry", "switch", "next"}

func (k stepKind) String() string {
	if k >= 0 && int(k) < len(stepNames) {
		return stepNames[k]
	}
	return "step(" + strconv.Itoa(int(k)) + ")"
}

// step is the guard's next step.
type step struct {
	kind  stepKind
	delay time.Duration // of stepWait and stepRetry
}

// next decides the guard's step after round r, given the budget b. It does
// no I/O and reads no clock; its only randomness is p.jitter.
//
// After a denial it waits the denial's retry-after plus a little jitter
// (never less, at least [minDenyWait], at most the probe poll when a probe
// is in flight), unless the guard must not wait, the wait would take the
// total past the max wait, or it would end past the deadline. A denial
// that is not a wait for the connection — a retry over the fleet's retry
// budget, a call the adaptive throttle rejected — is never waited for: the
// guard drops that candidate for the next when there is one, else stops.
//
// After a failure: a retryable one with retries left is retried, at once on
// another candidate when its report opened the connection, else after the
// backoff, unless that would reach the deadline; any other failure of the
// provider or the credential moves on to the next candidate when there is
// one; everything else stops.
func (p guardPolicy) next(b budget, r round) step {
	if r.denied {
		return p.afterDenial(b, r)
	}
	return p.afterFailure(b, r)
}

func (p guardPolicy) afterDenial(b budget, r round) step {
	if r.reason == ReasonRetryBudget || r.reason == ReasonThrottled {
		if b.candidates > 1 {
			return step{kind: stepNext}
		}
		return step{kind: stepStop}
	}
	if p.noWait {
		return step{kind: stepStop}
	}
	left := p.maxWait - b.waited
	d := max(r.retryAfter, minDenyWait)
	if r.reason == ReasonProbeInFlight {
		d = min(d, p.probePoll)
	}
	if d > left {
		return step{kind: stepStop}
	}
	d = min(d+p.jitter(d/10+10*time.Millisecond), left)
	if !b.deadline.IsZero() && b.now.Add(d).After(b.deadline) {
		return step{kind: stepStop}
	}
	return step{kind: stepWait, delay: d}
}

func (p guardPolicy) afterFailure(b budget, r round) step {
	cl := r.cl
	switch {
	case cl.Retryable && b.retries < p.maxRetries:
		if r.opened && b.candidates > 1 {
			return step{kind: stepSwitch}
		}
		d := p.retryDelay(b.retries+1, cl)
		if !b.deadline.IsZero() && !b.now.Add(d).Before(b.deadline) {
			return step{kind: stepStop}
		}
		return step{kind: stepRetry, delay: d}
	case providerFault(cl.Outcome) && b.candidates > 1:
		return step{kind: stepNext}
	}
	return step{kind: stepStop}
}

// retryDelay is the wait before retry n (from 1): exponential backoff with
// equal jitter, capped; at least the overload floor when overloaded; never
// shorter than the provider's Retry-After.
func (p guardPolicy) retryDelay(n int, cl Classification) time.Duration {
	d := p.backoffBase
	for i := 1; i < n && d < p.backoffCap; i++ {
		d *= 2
	}
	d = min(d, p.backoffCap)
	d = jitterEqual(d, p.jitter)
	if cl.Outcome == OutcomeOverloaded {
		d = max(d, overloadFloor)
	}
	return max(d, cl.RetryAfter)
}

// equalJitter returns a random duration between half of d and d: the
// jitter of every backoff of the client (retries, the report queue, the
// mirror's reconnects).
func equalJitter(d time.Duration) time.Duration { return jitterEqual(d, rand.N[time.Duration]) }

// jitterEqual is [equalJitter] with the random source jitter, which returns
// a duration in [0, n).
func jitterEqual(d time.Duration, jitter func(n time.Duration) time.Duration) time.Duration {
	return d/2 + jitter(d/2+1)
}

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
