package client

import (
	"context"
	"errors"
	"io"
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
