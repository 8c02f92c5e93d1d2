package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
)

// noTripPolicy never trips on transient failures: the guard's retries
// reach the provider.
func noTripPolicy() breaker.Policy {
	p := fastPolicy()
	p.ConsecutiveFailures = 0
	return p
}

// perConn returns a call func for DoFallback that answers each connection
// from its own script (then its last entry) and records the order of the
// calls by label.
func perConn(scripts map[string][]reply) (func(context.Context, Conn) (*http.Response, error), *[]string) {
	var calls []string
	n := map[string]int{}
	return func(_ context.Context, cn Conn) (*http.Response, error) {
		s := scripts[cn.Label()]
		r := s[min(n[cn.Label()], len(s)-1)]
		n[cn.Label()]++
		calls = append(calls, cn.Label())
		return response(r.status, r.headers, r.body), nil
	}, &calls
}

// candidates returns the labels and retry flags of an Admit request, as
// "label" or "label*" for a retry.
func candidates(r *cooldownv1.AdmitRequest) []string {
	var out []string
	for i, c := range r.GetCandidates() {
		l := c.GetLabel()
		if i < len(r.GetRetry()) && r.GetRetry()[i] {
			l += "*"
		}
		out = append(out, l)
	}
	return out
}

// TestGuardMarksRetriesPerCandidate: every Admit of a guard marks as a
// retry exactly the candidates that call was already sent to, and each
// report says whether its call was one.
func TestGuardMarksRetriesPerCandidate(t *testing.T) {
	t.Parallel()
	fail := reply{status: 500}
	ok := reply{status: 200}
	quota := reply{status: 429, body: quotaBody}
	tests := []struct {
		name    string
		policy  breaker.Policy
		scripts map[string][]reply
		labels  []string
		admits  [][]string // each Admit's candidates, "*" marking a retry
		reports []bool     // each report's retry flag
	}{
		{name: "one candidate retried", policy: noTripPolicy(),
			scripts: map[string][]reply{"p": {fail, fail, ok}}, labels: []string{"p"},
			admits: [][]string{{"p"}, {"p*"}, {"p*"}}, reports: []bool{false, true, true}},
		{name: "a retry names the untried fallback as a first attempt", policy: noTripPolicy(),
			scripts: map[string][]reply{"p": {fail, ok}, "f": {ok}}, labels: []string{"p", "f"},
			admits: [][]string{{"p", "f"}, {"p*", "f"}}, reports: []bool{false, true}},
		{name: "the fallback after a failure is a first attempt", policy: noTripPolicy(),
			scripts: map[string][]reply{"p": {quota}, "f": {fail, ok}}, labels: []string{"p", "f"},
			admits: [][]string{{"p", "f"}, {"f"}, {"f*"}}, reports: []bool{false, false, true}},
		{name: "a switch after a trip keeps the tripped one a retry", policy: func() breaker.Policy {
			p := fastPolicy()
			p.ConsecutiveFailures = 1
			p.OpenBase = time.Minute
			p.OpenMax = time.Minute
			return p
		}(),
			scripts: map[string][]reply{"p": {fail}, "f": {ok}}, labels: []string{"p", "f"},
			admits: [][]string{{"p", "f"}, {"p*", "f"}}, reports: []bool{false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				svc := newFakeService(tt.policy)
				c, err := svc.client(WithMaxRetries(3), WithBackoff(time.Millisecond, time.Millisecond))
				require.NoError(t, err)
				var conns []Conn
				for i, l := range tt.labels {
					conns = append(conns, NewConn(ID{byte(i + 1)}, l))
				}
				call, _ := perConn(tt.scripts)
				resp, err := c.DoFallback(t.Context(), conns, call)
				require.NoError(t, err)
				_ = resp.Body.Close()
				var admits [][]string
				for _, r := range svc.admitRequests() {
					admits = append(admits, candidates(r))
				}
				assert.Equal(t, tt.admits, admits)
				var reports []bool
				for _, r := range svc.reportRequests() {
					reports = append(reports, r.GetRetry())
					assert.Equal(t, c.Reporter(), r.GetReporter(), "every report names the reporter")
				}
				assert.Equal(t, tt.reports, reports)
			})
		})
	}
}

// scriptAdmits rewrites the fake's Admit answers in order: entry n (when
// not nil) replaces the model's n-th answer's decision.
func scriptAdmits(svc *fakeService, answers ...func(*cooldownv1.AdmitResponse)) {
	var n atomic.Int64
	svc.answerAdmit(func(_ *cooldownv1.AdmitRequest, out *cooldownv1.AdmitResponse) {
		if i := int(n.Add(1)) - 1; i < len(answers) && answers[i] != nil {
			answers[i](out)
		}
	})
}

// denyAt makes an answer a denial of candidate i.
func denyAt(i int, reason cooldownv1.DenyReason, wait time.Duration) func(*cooldownv1.AdmitResponse) {
	return func(out *cooldownv1.AdmitResponse) {
		out.Decision, out.CandidateIndex, out.DenyReason = cooldownv1.Decision_DECISION_DENY, uint32(i), reason
		out.RetryAfter, out.LeaseToken, out.LeaseExpiresAt = durationpb.New(wait), "", nil
	}
}

// TestGuardDoesNotWaitForBudgetOrThrottle: a retry over the fleet's retry
// budget and a throttled call are not waits for the connection: the guard
// falls back to the next candidate at once, or ends the call at once.
func TestGuardDoesNotWaitForBudgetOrThrottle(t *testing.T) {
	t.Parallel()
	fail := reply{status: 500}
	ok := reply{status: 200}
	budget := cooldownv1.DenyReason_DENY_REASON_RETRY_BUDGET
	throttled := cooldownv1.DenyReason_DENY_REASON_THROTTLED
	tests := []struct {
		name    string
		scripts map[string][]reply
		labels  []string
		opts    []Option
		answers []func(*cooldownv1.AdmitResponse)
		calls   []string   // provider calls, by label
		admits  [][]string // Admit requests' candidates
		reason  DenyReason // of the DeniedError; ReasonNone: success
		lastErr int        // the HTTP status of the wrapped *Error, 0: none
	}{
		{name: "throttled first attempt ends at once", scripts: map[string][]reply{"p": {ok}}, labels: []string{"p"},
			answers: []func(*cooldownv1.AdmitResponse){denyAt(0, throttled, time.Second)},
			admits:  [][]string{{"p"}}, reason: ReasonThrottled},
		{name: "retry over budget ends at once with the failure", scripts: map[string][]reply{"p": {fail, ok}}, labels: []string{"p"},
			answers: []func(*cooldownv1.AdmitResponse){nil, denyAt(0, budget, 20*time.Second)},
			calls:   []string{"p"}, admits: [][]string{{"p"}, {"p*"}}, reason: ReasonRetryBudget, lastErr: 500},
		{name: "retry over budget, fallback denied longer: falls back and waits for it",
			scripts: map[string][]reply{"p": {fail}, "f": {ok}}, labels: []string{"p", "f"},
			answers: []func(*cooldownv1.AdmitResponse){nil, denyAt(0, budget, 2*time.Second), denyAt(0, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, 5*time.Second)},
			calls:   []string{"p", "f"}, admits: [][]string{{"p", "f"}, {"p*", "f"}, {"f"}, {"f"}}},
		{name: "throttled primary with every candidate denied: the fallback next",
			scripts: map[string][]reply{"p": {ok}, "f": {ok}}, labels: []string{"p", "f"},
			answers: []func(*cooldownv1.AdmitResponse){denyAt(0, throttled, time.Second)},
			calls:   []string{"f"}, admits: [][]string{{"p", "f"}, {"f"}}},
		{name: "throttled falls back also with no-wait",
			scripts: map[string][]reply{"p": {ok}, "f": {ok}}, labels: []string{"p", "f"}, opts: []Option{WithNoWait()},
			answers: []func(*cooldownv1.AdmitResponse){denyAt(0, throttled, time.Second)},
			calls:   []string{"f"}, admits: [][]string{{"p", "f"}, {"f"}}},
		{name: "retry over budget on the last candidate left ends at once",
			scripts: map[string][]reply{"p": {reply{status: 429, body: quotaBody}}, "f": {fail, ok}}, labels: []string{"p", "f"},
			answers: []func(*cooldownv1.AdmitResponse){nil, nil, denyAt(0, budget, 20*time.Second)},
			calls:   []string{"p", "f"}, admits: [][]string{{"p", "f"}, {"f"}, {"f*"}}, reason: ReasonRetryBudget, lastErr: 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				svc := newFakeService(noTripPolicy())
				scriptAdmits(svc, tt.answers...)
				c, err := svc.client(append([]Option{WithMaxRetries(3), WithBackoff(time.Millisecond, time.Millisecond)}, tt.opts...)...)
				require.NoError(t, err)
				var conns []Conn
				for i, l := range tt.labels {
					conns = append(conns, NewConn(ID{byte(i + 1)}, l))
				}
				call, calls := perConn(tt.scripts)
				start := time.Now()
				resp, err := c.DoFallback(t.Context(), conns, call)
				var admits [][]string
				for _, r := range svc.admitRequests() {
					admits = append(admits, candidates(r))
				}
				assert.Equal(t, tt.admits, admits)
				assert.Equal(t, tt.calls, *calls)
				if tt.reason == ReasonNone {
					require.NoError(t, err)
					_ = resp.Body.Close()
					return
				}
				var d *DeniedError
				require.ErrorAs(t, err, &d)
				assert.Equal(t, tt.reason, d.Reason)
				assert.Contains(t, err.Error(), tt.reason.String(), "the error names the reason")
				assert.LessOrEqual(t, time.Since(start), time.Millisecond, "ended at once: at most the 1 ms backoff, no wait for the denial")
				var e *Error
				if tt.lastErr == 0 {
					assert.False(t, errors.As(err, &e), "no provider call failed")
					return
				}
				require.ErrorAs(t, err, &e, "the last provider failure comes with the denial")
				assert.Equal(t, tt.lastErr, e.HTTPStatus)
			})
		})
	}
}

// TestGuardRetryBudgetFromTheModel: with the model's own retry budget (no
// minimum, 20 % of first attempts), the guard's first retry on a fresh
// connection is over budget and the call ends at once, while a fallback's
// first attempt is not charged.
func TestGuardRetryBudgetFromTheModel(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := noTripPolicy()
		p.RetryBudget, p.RetryBudgetMin = 0.2, 0
		svc := newFakeService(p)
		c, err := svc.client(WithMaxRetries(3), WithBackoff(time.Millisecond, time.Millisecond))
		require.NoError(t, err)
		primary, fallback := NewConn(ID{1}, "p"), NewConn(ID{2}, "f")
		call, calls := perConn(map[string][]reply{"p": {{status: 500}}, "f": {{status: 200}}})

		_, err = c.Do(t.Context(), primary, func(ctx context.Context) (*http.Response, error) { return call(ctx, primary) })
		var d *DeniedError
		require.ErrorAs(t, err, &d)
		assert.Equal(t, ReasonRetryBudget, d.Reason)
		assert.Equal(t, 1, d.Attempts)

		resp, err := c.DoFallback(t.Context(), []Conn{primary, fallback}, call)
		require.NoError(t, err, "the retry is denied on the primary; the fallback takes it as a first attempt")
		_ = resp.Body.Close()
		assert.Equal(t, []string{"p", "p", "f"}, *calls)
	})
}

// TestAdmitAttempt: the lower-level API marks the connections a call was
// sent to, and Admit stays a first attempt everywhere.
func TestAdmitAttempt(t *testing.T) {
	t.Parallel()
	p, f, other := NewConn(ID{1}, "p"), NewConn(ID{2}, "f"), NewConn(ID{3}, "x")
	tests := []struct {
		name  string
		admit func(context.Context, *Client) (Admission, error)
		wire  []string
		retry bool
	}{
		{"Admit is a first attempt", func(ctx context.Context, c *Client) (Admission, error) { return c.Admit(ctx, p, f) },
			[]string{"p", "f"}, false},
		{"sent to the primary", func(ctx context.Context, c *Client) (Admission, error) {
			return c.AdmitAttempt(ctx, Attempt{Candidates: []Conn{p, f}, Sent: []Conn{p}})
		}, []string{"p*", "f"}, true},
		{"sent only to a non-candidate", func(ctx context.Context, c *Client) (Admission, error) {
			return c.AdmitAttempt(ctx, Attempt{Candidates: []Conn{p, f}, Sent: []Conn{other}})
		}, []string{"p", "f"}, false},
		{"sent to the fallback only", func(ctx context.Context, c *Client) (Admission, error) {
			return c.AdmitAttempt(ctx, Attempt{Candidates: []Conn{p, f}, Sent: []Conn{f}})
		}, []string{"p", "f*"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := newFakeService(fastPolicy())
			c, err := svc.client()
			require.NoError(t, err)
			a, err := tt.admit(t.Context(), c)
			require.NoError(t, err)
			require.Equal(t, 0, a.Index)
			assert.Equal(t, tt.retry, a.Retry)
			reqs := svc.admitRequests()
			require.Len(t, reqs, 1)
			assert.Equal(t, tt.wire, candidates(reqs[0]))
			require.NoError(t, c.Report(t.Context(), a, Classification{Outcome: OutcomeSuccess}))
			reps := svc.reportRequests()
			require.Len(t, reps, 1)
			assert.Equal(t, tt.retry, reps[0].GetRetry(), "the report says whether the call was a retry")
		})
	}
	_, err := (&Client{}).AdmitAttempt(t.Context(), Attempt{})
	require.ErrorIs(t, err, ErrInvalidConn)
}

// TestAdmissionFromTheWire: the shadow answer and the retry flag of an
// Admit answer reach the Admission.
func TestAdmissionFromTheWire(t *testing.T) {
	t.Parallel()
	cands := []Conn{NewConn(ID{1}, "p"), NewConn(ID{2}, "f")}
	tests := []struct {
		name  string
		msg   *cooldownv1.AdmitResponse
		retry []bool
		want  Admission
	}{
		{"shadowed allow", &cooldownv1.AdmitResponse{Decision: cooldownv1.Decision_DECISION_ALLOW, Revision: 3,
			ShadowDenyReason: cooldownv1.DenyReason_DENY_REASON_OPEN, ShadowRetryAfter: durationpb.New(7 * time.Second)}, nil,
			Admission{Conn: cands[0], Decision: DecisionAllow, Revision: 3, Shadowed: ReasonOpen, ShadowRetryAfter: 7 * time.Second}},
		{"shadowed throttle on a retry of the fallback", &cooldownv1.AdmitResponse{Decision: cooldownv1.Decision_DECISION_ALLOW, CandidateIndex: 1,
			ShadowDenyReason: cooldownv1.DenyReason_DENY_REASON_THROTTLED, ShadowRetryAfter: durationpb.New(time.Second)}, []bool{false, true},
			Admission{Index: 1, Conn: cands[1], Decision: DecisionAllow, Retry: true, Shadowed: ReasonThrottled, ShadowRetryAfter: time.Second}},
		{"a retry of the primary", &cooldownv1.AdmitResponse{Decision: cooldownv1.Decision_DECISION_ALLOW}, []bool{true},
			Admission{Conn: cands[0], Decision: DecisionAllow, Retry: true}},
		{"retry flags shorter than the candidates", &cooldownv1.AdmitResponse{Decision: cooldownv1.Decision_DECISION_ALLOW, CandidateIndex: 1}, []bool{true},
			Admission{Index: 1, Conn: cands[1], Decision: DecisionAllow}},
		{"a budget denial", &cooldownv1.AdmitResponse{Decision: cooldownv1.Decision_DECISION_DENY, DenyReason: cooldownv1.DenyReason_DENY_REASON_RETRY_BUDGET,
			RetryAfter: durationpb.New(12 * time.Second)}, []bool{true},
			Admission{Conn: cands[0], Decision: DecisionDeny, Reason: ReasonRetryBudget, RetryAfter: 12 * time.Second, Retry: true}},
		{"a shadow reason on a denial is ignored", &cooldownv1.AdmitResponse{Decision: cooldownv1.Decision_DECISION_DENY,
			DenyReason: cooldownv1.DenyReason_DENY_REASON_FORCED_OPEN, ShadowDenyReason: cooldownv1.DenyReason_DENY_REASON_OPEN}, nil,
			Admission{Conn: cands[0], Decision: DecisionDeny, Reason: ReasonForcedOpen}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := admission(tt.msg, cands, tt.retry)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestShadowAllowIsAnAllow: a shadow policy's would-be denial lets the
// guard call, says why on the admission, and logs nothing.
func TestShadowAllowIsAnAllow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := fastPolicy()
		p.OpenBase, p.OpenMax = time.Minute, time.Minute
		p.Shadow = true
		svc := newFakeService(p)
		log, logs := newLogger()
		c, err := svc.client(WithLogger(log))
		require.NoError(t, err)
		cn := NewConn(ID{1}, "p")
		for range 2 { // trips the breaker, in shadow
			a, err := c.Admit(t.Context(), cn)
			require.NoError(t, err)
			require.NoError(t, c.Report(t.Context(), a, Classification{Outcome: OutcomeTransientFailure, HTTPStatus: 500}))
		}
		var seen Admission
		resp, err := c.Do(t.Context(), cn, func(ctx context.Context) (*http.Response, error) {
			seen, _ = AdmissionFrom(ctx)
			return response(200, nil, "ok"), nil
		})
		require.NoError(t, err, "a shadow denial is an allow")
		_ = resp.Body.Close()
		assert.Equal(t, DecisionAllow, seen.Decision)
		assert.Equal(t, ReasonOpen, seen.Shadowed)
		assert.Equal(t, time.Minute, seen.ShadowRetryAfter)
		assert.Empty(t, logs.String(), "nothing is logged per call")
	})
}

// TestShadowOpenIsNoSwitch: a shadow policy's OPEN answer to a report is
// computed, not enforced (the next Admit allows the connection again), so
// the guard backs off before retrying as it would without cooldownd,
// instead of retrying at once as if another candidate were now chosen
// (which sent every retry to the failing primary at one instant); an
// enforcing policy's OPEN switches to the fallback at once.
func TestShadowOpenIsNoSwitch(t *testing.T) {
	t.Parallel()
	for _, shadow := range []bool{false, true} {
		t.Run(fmt.Sprintf("shadow=%v", shadow), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				p := fastPolicy()
				p.OpenBase, p.OpenMax, p.RetryBudget, p.Shadow = time.Minute, time.Minute, 0, shadow
				svc := newFakeService(p)
				c, err := svc.client(WithMaxRetries(5), WithBackoff(time.Second, 10*time.Second))
				require.NoError(t, err)
				a, b := NewConn(ID{1}, "a"), NewConn(ID{2}, "b")
				var onA []time.Time
				var onB int
				resp, err := c.DoFallback(t.Context(), []Conn{a, b}, func(ctx context.Context, conn Conn) (*http.Response, error) {
					if conn.ID() == a.ID() {
						onA = append(onA, time.Now())
						return response(503, nil, "down"), nil
					}
					onB++
					return response(200, nil, "ok"), nil
				})
				require.NoError(t, err)
				_ = resp.Body.Close()
				assert.Equal(t, 1, onB)
				if !shadow {
					assert.Len(t, onA, 2, "the trip (the second failure) sends the next attempt to the fallback at once")
					return
				}
				// Shadow: the primary is allowed again, so its retries are
				// the guard's, each after its backoff, as without
				// cooldownd; the fallback comes when they are spent.
				require.Len(t, onA, 6, "the first attempt and 5 retries")
				for i := 1; i < len(onA); i++ {
					assert.GreaterOrEqual(t, onA[i].Sub(onA[i-1]), 500*time.Millisecond, "retry %d waited its backoff", i)
				}
			})
		})
	}
}

// TestReporterID: each client has its own random reporter id unless one
// is given; a given one is checked.
func TestReporterID(t *testing.T) {
	t.Parallel()
	a, err := New("http://cooldownd.invalid")
	require.NoError(t, err)
	b, err := New("http://cooldownd.invalid")
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{16}$`), a.Reporter())
	assert.NotEqual(t, a.Reporter(), b.Reporter(), "one id per client process")
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())

	tests := []struct {
		id   string
		want string // "": rejected
	}{
		{"pod-7.ns_a", "pod-7.ns_a"},
		{"A", "A"},
		{strings.Repeat("x", MaxReporterLen), strings.Repeat("x", MaxReporterLen)},
		{strings.Repeat("x", MaxReporterLen+1), ""},
		{"pod/7", ""},
		{"pod 7", ""},
		{"pöd", ""},
		{"key:sk-123", ""},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			t.Parallel()
			c, err := New("http://cooldownd.invalid", WithReporter(tt.id))
			if tt.want == "" {
				require.Error(t, err)
				assert.NotContains(t, err.Error(), tt.id, "the error does not quote the id")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, c.Reporter())
			require.NoError(t, c.Close())
		})
	}
}

// TestReporterOnEveryReport: direct, queued and in-process reports carry
// the reporter id.
func TestReporterOnEveryReport(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		svc := newFakeService(noTripPolicy())
		c, err := svc.client(WithReporter("worker-1"))
		require.NoError(t, err)
		defer func() { _ = c.Close() }()
		cn := NewConn(ID{1}, "p")
		ctx := t.Context()

		a, err := c.Admit(ctx, cn)
		require.NoError(t, err)
		require.NoError(t, c.Report(ctx, a, Classification{Outcome: OutcomeSuccess})) // direct

		a, err = c.AdmitAttempt(ctx, Attempt{Candidates: []Conn{cn}, Sent: []Conn{cn}})
		require.NoError(t, err)
		svc.down.Store(true)
		require.NoError(t, c.Report(ctx, a, Classification{Outcome: OutcomeTransientFailure, HTTPStatus: 503})) // queued

		a, err = c.Admit(ctx, cn) // decided in-process: cooldownd is down
		require.NoError(t, err)
		require.True(t, a.Local)
		require.NoError(t, c.Report(ctx, a, Classification{Outcome: OutcomeRateLimited, RetryAfter: time.Second})) // the fleet must learn it
		svc.down.Store(false)
		require.NoError(t, c.Flush(ctx))

		var delivered []string
		for _, r := range svc.reportRequests() {
			assert.Equal(t, "worker-1", r.GetReporter(), "%s", r.GetOutcome())
			delivered = append(delivered, r.GetOutcome().String())
		}
		assert.Contains(t, delivered, cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE.String())
		assert.Contains(t, delivered, cooldownv1.Outcome_OUTCOME_RATE_LIMITED.String())
		for _, r := range svc.reportRequests() {
			if r.GetOutcome() == cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE {
				assert.True(t, r.GetRetry(), "a queued report keeps its retry flag")
			}
		}
	})
}

// TestLocalFleetRules: the in-process fallback runs the fleet rules on
// this process's own calls: the retry budget from its first attempts
// (reports marked as retries are not the base), the throttle against a
// random draw per call; the trip quorum is off, one process being one
// reporter.
func TestLocalFleetRules(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	cn := NewConn(ID{1}, "p")
	budgetPolicy := noTripPolicy()
	budgetPolicy.RetryBudget, budgetPolicy.RetryBudgetMin = 0.2, 0
	report := func(l *local, n int, retry bool, o Outcome) {
		for range n {
			l.report(now, Admission{Conn: cn, Retry: retry}, Classification{Outcome: o}, true)
		}
	}
	t.Run("retry budget", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name            string
			firsts, retries int // reported before
			retry           bool
			want            DenyReason
		}{
			{"a first attempt is not charged", 0, 0, false, ReasonNone},
			{"a retry with no first attempts", 0, 0, true, ReasonRetryBudget},
			{"a retry over 20 % of four", 4, 0, true, ReasonRetryBudget},
			{"a retry within 20 % of five", 5, 0, true, ReasonNone},
			{"reported retries are not the base", 0, 10, true, ReasonRetryBudget},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				cfg := defaultConfig()
				cfg.policy = budgetPolicy
				l := newLocal(cfg, nil)
				report(l, tt.firsts, false, OutcomeSuccess)
				report(l, tt.retries, true, OutcomeSuccess)
				a := l.admit(now, []Conn{cn}, []bool{tt.retry})
				assert.Equal(t, tt.retry, a.Retry)
				assert.Equal(t, tt.want, a.Reason)
				assert.Equal(t, tt.want == ReasonNone, a.Allowed())
			})
		}
	})
	t.Run("throttle draws per call", func(t *testing.T) {
		t.Parallel()
		cfg := defaultConfig()
		cfg.policy = noTripPolicy()
		cfg.policy.ThrottleK = 1
		l := newLocal(cfg, nil)
		report(l, 10, false, OutcomeTransientFailure)
		report(l, 5, false, OutcomeSuccess)
		seen := map[DenyReason]int{}
		for range 200 {
			a := l.admit(now, []Conn{cn}, nil)
			seen[a.Reason]++
			if a.Reason == ReasonThrottled {
				assert.Equal(t, time.Duration(breaker.ThrottleRetryAfter)*time.Millisecond, a.RetryAfter)
			}
		}
		assert.Positive(t, seen[ReasonThrottled], "some calls are throttled")
		assert.Positive(t, seen[ReasonNone], "some go: the draw is random, not fixed")
		assert.Len(t, seen, 2, "%v", seen)
	})
	t.Run("trip quorum is one process", func(t *testing.T) {
		t.Parallel()
		cfg := defaultConfig()
		cfg.policy = fastPolicy() // trips after 2
		cfg.policy.TripQuorum = 2
		l := newLocal(cfg, nil)
		report(l, 2, false, OutcomeTransientFailure)
		a := l.admit(now, []Conn{cn}, nil)
		assert.Equal(t, ReasonOpen, a.Reason, "two failures of this process trip its breaker")
	})
	t.Run("shadow", func(t *testing.T) {
		t.Parallel()
		cfg := defaultConfig()
		cfg.policy = fastPolicy()
		cfg.policy.Shadow = true
		l := newLocal(cfg, nil)
		report(l, 2, false, OutcomeTransientFailure)
		a := l.admit(now, []Conn{cn}, nil)
		assert.True(t, a.Allowed())
		assert.Equal(t, ReasonOpen, a.Shadowed)
		assert.Equal(t, cfg.policy.OpenBase, a.ShadowRetryAfter)
	})
}
