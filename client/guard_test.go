package client

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

const quotaBody = `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`

func TestDoSuccess(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	prov := newProvider(t, reply{status: http.StatusOK, body: "hello"})
	c := newClient(t, cd.URL)
	cn := conn(t, c, prov.URL, "key-1", "gpt-4o")

	resp, err := c.Do(t.Context(), cn, prov.get())
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, "hello", string(body), "a 2xx body reaches the caller unread")
	assert.Equal(t, int64(1), prov.hits.Load())
	assert.False(t, c.Degraded())
	require.NoError(t, c.Flush(t.Context())) // with the mirror (the default) a success may wait for its batch
	st := cd.get(t, cn).GetConnection()
	assert.Equal(t, cooldownv1.State_STATE_CLOSED, st.GetState())
	assert.Equal(t, cooldownv1.Outcome_OUTCOME_SUCCESS, st.GetLastOutcome(), "the success was reported")
}

func TestDoRetriesTripAndRecover(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy()) // trips after 2 failures, opens 100 ms, then 200 ms
	fail := reply{status: http.StatusInternalServerError, body: `{"error":{"type":"server_error"}}`}
	prov := newProvider(t, fail, fail, fail, reply{status: http.StatusOK, body: "ok"})
	c := newClient(t, cd.URL, WithMaxRetries(5))
	cn := conn(t, c, prov.URL, "key-1", "")

	resp, err := c.Do(t.Context(), cn, prov.get())
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, int64(4), prov.hits.Load())

	got := cd.get(t, cn)
	assert.Equal(t, cooldownv1.State_STATE_CLOSED, got.GetConnection().GetState())
	var causes []cooldownv1.Cause
	for _, tr := range got.GetHistory() { // newest first
		causes = append([]cooldownv1.Cause{tr.GetCause()}, causes...)
	}
	assert.Equal(t, []cooldownv1.Cause{
		cooldownv1.Cause_CAUSE_BREAKER, cooldownv1.Cause_CAUSE_OPEN_EXPIRED, // tripped, then probed
		cooldownv1.Cause_CAUSE_BREAKER, cooldownv1.Cause_CAUSE_OPEN_EXPIRED, // the probe failed, re-opened
		cooldownv1.Cause_CAUSE_PROBE_SUCCESS,
	}, causes)
}

func TestDoFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		reply    reply
		retries  int
		hits     int64
		outcome  Outcome
		code     string
		tooLong  bool
		bodyKept string
	}{
		{name: "500 retries run out", reply: reply{status: 500, body: "boom"}, retries: 2, hits: 3,
			outcome: OutcomeTransientFailure, bodyKept: "boom"},
		{name: "400 not retried", reply: reply{status: 400, body: `{"error":{"type":"invalid_request_error"}}`}, retries: 2, hits: 1,
			outcome: OutcomeClientError, code: "invalid_request_error"},
		{name: "quota not retried", reply: reply{status: 429, body: quotaBody}, retries: 2, hits: 1,
			outcome: OutcomeQuotaExhausted, code: "insufficient_quota", bodyKept: quotaBody},
		{name: "retry-after too long", reply: reply{status: 429, headers: map[string]string{"Retry-After": "120"}}, retries: 2, hits: 1,
			outcome: OutcomeRateLimited, tooLong: true},
		{name: "should-retry false", reply: reply{status: 500, headers: map[string]string{"X-Should-Retry": "false"}}, retries: 2, hits: 1,
			outcome: OutcomeTransientFailure},
	}
	cd := startCooldownd(t, fastPolicy())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			prov := newProvider(t, tt.reply)
			c := newClient(t, cd.URL, WithMaxRetries(tt.retries))
			cn := conn(t, c, prov.URL, "key-"+tt.name, "")
			resp, err := c.Do(t.Context(), cn, prov.get())
			assert.Nil(t, resp)
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, tt.hits, prov.hits.Load())
			assert.Equal(t, int(tt.hits), e.Attempts)
			assert.Equal(t, tt.outcome, e.LastOutcome)
			assert.Equal(t, tt.code, e.ErrorCode)
			assert.Equal(t, tt.reply.status, e.HTTPStatus)
			assert.Equal(t, tt.tooLong, e.TooLong)
			require.NotNil(t, e.Response)
			b, _ := io.ReadAll(e.Response.Body)
			if tt.bodyKept != "" {
				assert.Equal(t, tt.bodyKept, string(b), "the error body is restored for the caller")
			}
		})
	}
}

func TestRateLimitIsShared(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts []Option
		ctx  func(context.Context) (context.Context, context.CancelFunc)
	}{
		{name: "no wait", opts: []Option{WithNoWait()}},
		{name: "max wait shorter", opts: []Option{WithMaxWait(time.Second)}},
		{name: "deadline sooner", ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, time.Second)
		}},
	}
	cd := startCooldownd(t, fastPolicy())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			prov := newProvider(t, reply{status: 429, headers: map[string]string{"Retry-After": "20"},
				body: `{"error":{"type":"requests","code":"rate_limit_exceeded"}}`})
			a := newClient(t, cd.URL, WithMaxRetries(0))
			b := newClient(t, cd.URL, tt.opts...)
			key := "key-" + tt.name

			_, err := a.Do(t.Context(), conn(t, a, prov.URL, key, ""), prov.get())
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, OutcomeRateLimited, e.LastOutcome)
			assert.Equal(t, 20*time.Second, e.RetryAfter)

			ctx := t.Context()
			if tt.ctx != nil {
				var cancel context.CancelFunc
				ctx, cancel = tt.ctx(ctx)
				defer cancel()
			}
			start := time.Now()
			_, err = b.Do(ctx, conn(t, b, prov.URL, key, ""), prov.get())
			var d *DeniedError
			require.ErrorAs(t, err, &d)
			assert.ErrorIs(t, err, ErrDenied)
			assert.Equal(t, ReasonCooldown, d.Reason)
			assert.InDelta(t, 20*time.Second, d.RetryAfter, float64(2*time.Second))
			assert.Less(t, time.Since(start), 500*time.Millisecond, "denied at once, not after a wait")
			assert.Equal(t, int64(1), prov.hits.Load(), "the second client never called the provider")
		})
	}
}

func TestDoFallback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		primary  reply
		opts     []Option
		again    int64 // primary hits after a second DoFallback
		againFbk int64
	}{
		{name: "quota", primary: reply{status: 429, body: quotaBody}, again: 1, againFbk: 2},
		{name: "auth", primary: reply{status: 401, body: `{"error":{"type":"invalid_api_key"}}`}, again: 1, againFbk: 2},
		{name: "retry-after too long", primary: reply{status: 503, headers: map[string]string{"Retry-After": "600"}}, again: 1, againFbk: 2},
		// A short 429 is retryable, but it cools the primary down for
		// everyone: the guard moves on without its 10 s backoff.
		{name: "rate limited", primary: reply{status: 429, headers: map[string]string{"Retry-After": "5"}},
			opts: []Option{WithBackoff(10*time.Second, 10*time.Second)}, again: 1, againFbk: 2},
	}
	cd := startCooldownd(t, fastPolicy())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			primary := newProvider(t, tt.primary)
			fallback := newProvider(t, reply{status: 200, body: "from fallback"})
			c := newClient(t, cd.URL, tt.opts...)
			conns := []Conn{conn(t, c, primary.URL, "key-p-"+tt.name, "gpt-4o"), conn(t, c, fallback.URL, "key-f-"+tt.name, "gpt-4o-mini")}
			call := func(ctx context.Context, cn Conn) (*http.Response, error) {
				p := primary
				if cn == conns[1] {
					p = fallback
				}
				return p.get()(ctx)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()

			resp, err := c.DoFallback(ctx, conns, call)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			assert.Equal(t, "from fallback", string(b))
			assert.Equal(t, int64(1), primary.hits.Load())
			assert.Equal(t, int64(1), fallback.hits.Load())

			resp, err = c.DoFallback(ctx, conns, call)
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, tt.again, primary.hits.Load(), "cooldownd skips the blocked primary")
			assert.Equal(t, tt.againFbk, fallback.hits.Load())
		})
	}
}

func TestDoFallbackClientErrorEnds(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	primary := newProvider(t, reply{status: 400})
	fallback := newProvider(t)
	c := newClient(t, cd.URL)
	conns := []Conn{conn(t, c, primary.URL, "key-p", ""), conn(t, c, fallback.URL, "key-f", "")}
	_, err := c.DoFallback(t.Context(), conns, func(ctx context.Context, cn Conn) (*http.Response, error) {
		if cn == conns[0] {
			return primary.get()(ctx)
		}
		return fallback.get()(ctx)
	})
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, OutcomeClientError, e.LastOutcome)
	assert.Equal(t, int64(0), fallback.hits.Load(), "a caller error is not the provider's: no fallback")
}

func TestDoCancelDuringCall(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	started := make(chan struct{})
	var hits atomic.Int64
	prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			close(started)
		}
		<-r.Context().Done()
	}))
	t.Cleanup(prov.Close)
	c := newClient(t, cd.URL)
	cn := conn(t, c, prov.URL, "key-1", "")
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-started; cancel() }()
	_, err := c.Do(ctx, cn, func(ctx context.Context) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, prov.URL, nil)
		return prov.Client().Do(req)
	})
	require.ErrorIs(t, err, context.Canceled)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, OutcomeCanceled, e.LastOutcome)
	assert.Equal(t, int64(1), hits.Load(), "a cancellation is never retried")
	assert.Equal(t, cooldownv1.Outcome_OUTCOME_CANCELED, cd.get(t, cn).GetConnection().GetLastOutcome())
}

func TestDoInvalid(t *testing.T) {
	t.Parallel()
	c := newClient(t, "http://127.0.0.1:1")
	_, err := c.Do(t.Context(), Conn{}, func(context.Context) (*http.Response, error) { return nil, errors.New("unreached") })
	require.ErrorIs(t, err, ErrInvalidConn)
	_, err = c.DoFallback(t.Context(), nil, nil)
	require.ErrorIs(t, err, ErrInvalidConn)
}

func TestGuardNext(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	noJitter := func(time.Duration) time.Duration { return 0 }
	fullJitter := func(n time.Duration) time.Duration { return n - 1 }
	policy := func(edit ...func(*guardPolicy)) guardPolicy {
		p := guardPolicy{maxRetries: 2, maxWait: time.Second, probePoll: 100 * time.Millisecond,
			backoffBase: 100 * time.Millisecond, backoffCap: 400 * time.Millisecond, jitter: noJitter}
		for _, e := range edit {
			e(&p)
		}
		return p
	}
	full := func(p *guardPolicy) { p.jitter = fullJitter }
	deny := func(reason DenyReason, ra time.Duration) round {
		return round{denied: true, reason: reason, retryAfter: ra}
	}
	fail := func(o Outcome, retryable bool) round {
		return round{cl: Classification{Outcome: o, Retryable: retryable}}
	}
	one := budget{candidates: 1, now: now}
	two := budget{candidates: 2, now: now}
	with := func(b budget, edit func(*budget)) budget { edit(&b); return b }
	tests := []struct {
		name   string
		policy guardPolicy
		budget budget
		round  round
		want   step
	}{
		// After a denial.
		{"denial waits its retry-after", policy(), one, deny(ReasonCooldown, 300*time.Millisecond),
			step{kind: stepWait, delay: 300 * time.Millisecond}},
		{"denial wait has jitter of a tenth plus 10ms", policy(full), one, deny(ReasonCooldown, 300*time.Millisecond),
			step{kind: stepWait, delay: 340*time.Millisecond - 1}},
		{"denial ending now waits the least wait", policy(), one, deny(ReasonOpen, 0),
			step{kind: stepWait, delay: minDenyWait}},
		{"probe in flight polls", policy(), one, deny(ReasonProbeInFlight, 800*time.Millisecond),
			step{kind: stepWait, delay: 100 * time.Millisecond}},
		{"probe in flight ending sooner waits less", policy(), one, deny(ReasonProbeInFlight, 40*time.Millisecond),
			step{kind: stepWait, delay: 40 * time.Millisecond}},
		{"no-wait stops", policy(func(p *guardPolicy) { p.noWait = true }), one, deny(ReasonCooldown, time.Millisecond),
			step{kind: stepStop}},
		{"denial longer than the max wait stops", policy(), one, deny(ReasonCooldown, 1001*time.Millisecond),
			step{kind: stepStop}},
		{"denial longer than the wait left stops", policy(), with(one, func(b *budget) { b.waited = 800 * time.Millisecond }),
			deny(ReasonCooldown, 201*time.Millisecond), step{kind: stepStop}},
		{"jitter never takes the wait past the max wait", policy(full), with(one, func(b *budget) { b.waited = 800 * time.Millisecond }),
			deny(ReasonCooldown, 195*time.Millisecond), step{kind: stepWait, delay: 200 * time.Millisecond}},
		{"denial ending past the deadline stops", policy(), with(one, func(b *budget) { b.deadline = now.Add(299 * time.Millisecond) }),
			deny(ReasonCooldown, 300*time.Millisecond), step{kind: stepStop}},
		{"denial ending at the deadline waits", policy(), with(one, func(b *budget) { b.deadline = now.Add(300 * time.Millisecond) }),
			deny(ReasonCooldown, 300*time.Millisecond), step{kind: stepWait, delay: 300 * time.Millisecond}},

		// Denials that are not a wait for the connection: never waited
		// for, whatever the wait allowed.
		{"retry budget with another candidate moves on", policy(), two, deny(ReasonRetryBudget, 20*time.Second),
			step{kind: stepNext}},
		{"retry budget as the only candidate stops", policy(), one, deny(ReasonRetryBudget, 20*time.Second),
			step{kind: stepStop}},
		{"retry budget ending at once is not waited for", policy(), one, deny(ReasonRetryBudget, time.Millisecond),
			step{kind: stepStop}},
		{"throttled with another candidate moves on", policy(), two, deny(ReasonThrottled, time.Second),
			step{kind: stepNext}},
		{"throttled as the only candidate stops", policy(), one, deny(ReasonThrottled, time.Second),
			step{kind: stepStop}},
		{"throttled moves on also with no-wait", policy(func(p *guardPolicy) { p.noWait = true }), two,
			deny(ReasonThrottled, time.Second), step{kind: stepNext}},
		{"retry budget moves on past the max wait", policy(), with(two, func(b *budget) { b.waited = time.Second }),
			deny(ReasonRetryBudget, time.Minute), step{kind: stepNext}},
		{"cooldown with another candidate still waits", policy(), two, deny(ReasonCooldown, 300*time.Millisecond),
			step{kind: stepWait, delay: 300 * time.Millisecond}},

		// After a failure.
		{"first retry waits half the base at least", policy(), one, fail(OutcomeTransientFailure, true),
			step{kind: stepRetry, delay: 50 * time.Millisecond}},
		{"first retry waits the base at most", policy(full), one, fail(OutcomeTransientFailure, true),
			step{kind: stepRetry, delay: 100 * time.Millisecond}},
		{"second retry doubles", policy(full), with(one, func(b *budget) { b.retries = 1 }), fail(OutcomeTransientFailure, true),
			step{kind: stepRetry, delay: 200 * time.Millisecond}},
		{"backoff is capped", policy(full, func(p *guardPolicy) { p.maxRetries = 9 }), with(one, func(b *budget) { b.retries = 8 }),
			fail(OutcomeTransientFailure, true), step{kind: stepRetry, delay: 400 * time.Millisecond}},
		{"overloaded waits the floor", policy(), one, fail(OutcomeOverloaded, true),
			step{kind: stepRetry, delay: overloadFloor}},
		{"retry-after is never shortened", policy(), one,
			round{cl: Classification{Outcome: OutcomeRateLimited, Retryable: true, RetryAfter: 3 * time.Second}},
			step{kind: stepRetry, delay: 3 * time.Second}},
		{"opened with another candidate switches at once", policy(), two,
			round{cl: Classification{Outcome: OutcomeRateLimited, Retryable: true, RetryAfter: 3 * time.Second}, opened: true},
			step{kind: stepSwitch}},
		{"opened as the only candidate backs off", policy(), one,
			round{cl: Classification{Outcome: OutcomeTransientFailure, Retryable: true}, opened: true},
			step{kind: stepRetry, delay: 50 * time.Millisecond}},
		{"not opened with another candidate backs off", policy(), two, fail(OutcomeTransientFailure, true),
			step{kind: stepRetry, delay: 50 * time.Millisecond}},
		{"retry reaching the deadline stops", policy(), with(one, func(b *budget) { b.deadline = now.Add(50 * time.Millisecond) }),
			fail(OutcomeTransientFailure, true), step{kind: stepStop}},
		{"retry before the deadline goes", policy(), with(one, func(b *budget) { b.deadline = now.Add(51 * time.Millisecond) }),
			fail(OutcomeTransientFailure, true), step{kind: stepRetry, delay: 50 * time.Millisecond}},
		{"switch ignores the deadline", policy(), with(two, func(b *budget) { b.deadline = now }),
			round{cl: Classification{Outcome: OutcomeTransientFailure, Retryable: true}, opened: true}, step{kind: stepSwitch}},
		{"retries used up stop", policy(), with(one, func(b *budget) { b.retries = 2 }), fail(OutcomeTransientFailure, true),
			step{kind: stepStop}},
		{"retries used up move on", policy(), with(two, func(b *budget) { b.retries = 2 }), fail(OutcomeTransientFailure, true),
			step{kind: stepNext}},
		{"no retries move on", policy(func(p *guardPolicy) { p.maxRetries = 0 }), two, fail(OutcomeRateLimited, true),
			step{kind: stepNext}},
		{"quota moves on", policy(), two, fail(OutcomeQuotaExhausted, false), step{kind: stepNext}},
		{"auth moves on", policy(), two, fail(OutcomeAuthFailure, false), step{kind: stepNext}},
		{"overloaded not retryable moves on", policy(), two, fail(OutcomeOverloaded, false), step{kind: stepNext}},
		{"too long moves on", policy(), two,
			round{cl: Classification{Outcome: OutcomeRateLimited, RetryAfter: time.Minute, TooLong: true}}, step{kind: stepNext}},
		{"quota as the only candidate stops", policy(), one, fail(OutcomeQuotaExhausted, false), step{kind: stepStop}},
		{"client error stops", policy(), two, fail(OutcomeClientError, false), step{kind: stepStop}},
		{"canceled stops", policy(), two, fail(OutcomeCanceled, false), step{kind: stepStop}},
		{"no verdict stops", policy(), two, fail(OutcomeUnspecified, false), step{kind: stepStop}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, tt.policy.next(tt.budget, tt.round), "got %s", tt.policy.next(tt.budget, tt.round).kind)
		})
	}
}

func TestGuardNextJitterBounds(t *testing.T) {
	t.Parallel()
	// With the real random source every delay stays within the bounds the
	// options document.
	p := guardPolicy{maxRetries: 5, maxWait: time.Second, probePoll: time.Second,
		backoffBase: 100 * time.Millisecond, backoffCap: 300 * time.Millisecond, jitter: rand.N[time.Duration]}
	b := budget{candidates: 1, now: time.Unix(0, 0)}
	for range 1000 {
		st := p.next(b, round{denied: true, reason: ReasonCooldown, retryAfter: 200 * time.Millisecond})
		require.Equal(t, stepWait, st.kind)
		assert.GreaterOrEqual(t, st.delay, 200*time.Millisecond)
		assert.Less(t, st.delay, 230*time.Millisecond)
		for r, want := range []time.Duration{100, 200, 300, 300} {
			b := b
			b.retries = r
			st := p.next(b, round{cl: Classification{Outcome: OutcomeTransientFailure, Retryable: true}})
			require.Equal(t, stepRetry, st.kind)
			assert.GreaterOrEqual(t, st.delay, want*time.Millisecond/2, "retry %d", r+1)
			assert.LessOrEqual(t, st.delay, want*time.Millisecond, "retry %d", r+1)
		}
	}
}

func TestStepKindString(t *testing.T) {
	t.Parallel()
	for k, want := range map[stepKind]string{stepStop: "stop", stepWait: "wait", stepRetry: "retry", stepSwitch: "switch",
		stepNext: "next", stepKind(9): "step(9)"} {
		assert.Equal(t, want, k.String())
	}
}

func TestClientEnumsBeyondTheBreakers(t *testing.T) {
	t.Parallel()
	// The client's enums are ints, the breaker's bytes: a value the byte
	// cannot hold is unknown, not wrapped onto a defined one.
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"outcome 257", Outcome(257).String(), "outcome(257)"},
		{"outcome 1", Outcome(1).String(), "success"},
		{"decision 259", Decision(259).String(), "decision(259)"},
		{"decision -1", Decision(-1).String(), "decision(-1)"},
		{"decision 0", Decision(0).String(), "decision(0)"},
		{"reason 258", DenyReason(258).String(), "reason(258)"},
		{"reason 100", ReasonUnavailable.String(), "unavailable"},
		{"reason 8", DenyReason(8).String(), "retry_budget"},
		{"reason 9", ReasonThrottled.String(), "throttled"},
		{"reason 10", DenyReason(10).String(), "reason(10)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, tt.got)
		})
	}
}
