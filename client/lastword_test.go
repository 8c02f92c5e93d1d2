package client

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// TestLocalHonoursLastWord: the in-process fallback denies a candidate
// cooldownd last denied until that denial runs out, and forgets it when
// cooldownd admits the candidate again.
func TestLocalHonoursLastWord(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	deny := func(r cooldownv1.DenyReason, wait time.Duration) *cooldownv1.CandidateDecision {
		return &cooldownv1.CandidateDecision{Decision: cooldownv1.Decision_DECISION_DENY, DenyReason: r, RetryAfter: durationpb.New(wait)}
	}
	allow := &cooldownv1.CandidateDecision{Decision: cooldownv1.Decision_DECISION_ALLOW}
	open, budget := cooldownv1.DenyReason_DENY_REASON_OPEN, cooldownv1.DenyReason_DENY_REASON_RETRY_BUDGET
	throttled := cooldownv1.DenyReason_DENY_REASON_THROTTLED
	tests := []struct {
		name       string
		heard      []*cooldownv1.CandidateDecision // cooldownd's answer at t0
		later      []*cooldownv1.CandidateDecision // a second answer at t0+1s, if any
		laterRetry []bool                          // the second Admit's retry flags
		at         time.Duration                   // when the fallback decides
		retry      []bool                          // the fallback's call's retry flags
		alone      bool                            // the fallback's call names the primary only
		index      int
		want       Decision
		reason     DenyReason
	}{
		{name: "primary skipped for its fallback", heard: []*cooldownv1.CandidateDecision{deny(cooldownv1.DenyReason_DENY_REASON_QUOTA, 30*time.Second), allow},
			at: 10 * time.Second, index: 1, want: DecisionAllow},
		{name: "the denial runs out", heard: []*cooldownv1.CandidateDecision{deny(cooldownv1.DenyReason_DENY_REASON_QUOTA, 30*time.Second), allow},
			at: 30 * time.Second, index: 0, want: DecisionAllow},
		{name: "every candidate denied: the soonest", heard: []*cooldownv1.CandidateDecision{deny(cooldownv1.DenyReason_DENY_REASON_OPEN, 20*time.Second), deny(cooldownv1.DenyReason_DENY_REASON_COOLDOWN, 5*time.Second)},
			at: time.Second, index: 1, want: DecisionDeny, reason: ReasonCooldown},
		{name: "an admission clears the word", heard: []*cooldownv1.CandidateDecision{deny(cooldownv1.DenyReason_DENY_REASON_OPEN, 20*time.Second), allow},
			later: []*cooldownv1.CandidateDecision{allow}, at: 2 * time.Second, index: 0, want: DecisionAllow},
		{name: "a denial without a wait is not kept", heard: []*cooldownv1.CandidateDecision{deny(cooldownv1.DenyReason_DENY_REASON_PROBE_IN_FLIGHT, 0), allow},
			at: time.Millisecond, index: 0, want: DecisionAllow},

		// A throttled call is one draw, not a wait for the connection.
		{name: "a throttled candidate leaves no word", heard: []*cooldownv1.CandidateDecision{deny(throttled, time.Second), allow},
			at: time.Millisecond, index: 0, want: DecisionAllow},
		{name: "a throttled candidate is closed: an older word is spent", heard: []*cooldownv1.CandidateDecision{deny(open, 20*time.Second), allow},
			later: []*cooldownv1.CandidateDecision{deny(throttled, time.Second)}, at: 2 * time.Second, index: 0, want: DecisionAllow},
		{name: "a throttled candidate keeps a retry word", heard: []*cooldownv1.CandidateDecision{deny(budget, 20*time.Second), allow},
			later: []*cooldownv1.CandidateDecision{deny(throttled, time.Second)}, at: 2 * time.Second, retry: []bool{true}, alone: true,
			index: 0, want: DecisionDeny, reason: ReasonRetryBudget},

		// A spent retry budget denies retries only.
		{name: "a budget denial sends retries to the fallback", heard: []*cooldownv1.CandidateDecision{deny(budget, 20*time.Second), allow},
			at: time.Second, retry: []bool{true, false}, index: 1, want: DecisionAllow},
		{name: "a budget denial leaves first attempts alone", heard: []*cooldownv1.CandidateDecision{deny(budget, 20*time.Second), allow},
			at: time.Second, index: 0, want: DecisionAllow},
		{name: "a budget denial of every candidate: the budget", heard: []*cooldownv1.CandidateDecision{deny(budget, 20*time.Second), deny(budget, 10*time.Second)},
			at: time.Second, retry: []bool{true, true}, index: 1, want: DecisionDeny, reason: ReasonRetryBudget},
		{name: "a budget denial runs out", heard: []*cooldownv1.CandidateDecision{deny(budget, 20*time.Second), allow},
			at: 20 * time.Second, retry: []bool{true}, index: 0, want: DecisionAllow},
		{name: "a budget denial spends an older word", heard: []*cooldownv1.CandidateDecision{deny(open, 20*time.Second), allow},
			later: []*cooldownv1.CandidateDecision{deny(budget, 5*time.Second)}, at: 2 * time.Second, index: 0, want: DecisionAllow},
		{name: "an allowed retry clears the retry word", heard: []*cooldownv1.CandidateDecision{deny(budget, 20*time.Second), allow},
			later: []*cooldownv1.CandidateDecision{allow}, laterRetry: []bool{true}, at: 2 * time.Second, retry: []bool{true},
			index: 0, want: DecisionAllow},
		{name: "an allowed first attempt keeps the retry word", heard: []*cooldownv1.CandidateDecision{deny(budget, 20*time.Second), allow},
			later: []*cooldownv1.CandidateDecision{allow}, at: 2 * time.Second, retry: []bool{true}, alone: true,
			index: 0, want: DecisionDeny, reason: ReasonRetryBudget},
		{name: "a later denial of every call denies retries with its reason", heard: []*cooldownv1.CandidateDecision{deny(budget, 20*time.Second), allow},
			later: []*cooldownv1.CandidateDecision{deny(open, 5*time.Second)}, at: 2 * time.Second, retry: []bool{true}, alone: true,
			index: 0, want: DecisionDeny, reason: ReasonOpen},
		{name: "and when it ends the retry word holds", heard: []*cooldownv1.CandidateDecision{deny(budget, 20*time.Second), allow},
			later: []*cooldownv1.CandidateDecision{deny(open, 5*time.Second)}, at: 7 * time.Second, retry: []bool{true}, alone: true,
			index: 0, want: DecisionDeny, reason: ReasonRetryBudget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newLocal(defaultConfig(), slog.New(slog.DiscardHandler))
			cands := []Conn{NewConn(ID{1}, "primary"), NewConn(ID{2}, "fallback")}
			l.learn(t0, &cooldownv1.AdmitResponse{Candidates: tt.heard}, cands, nil)
			if tt.later != nil {
				l.learn(t0.Add(time.Second), &cooldownv1.AdmitResponse{Candidates: tt.later}, cands, tt.laterRetry)
			}
			admitted := cands
			if tt.alone {
				admitted = cands[:1]
			}
			a := l.admit(t0.Add(tt.at), admitted, tt.retry)
			assert.True(t, a.Local)
			assert.Equal(t, tt.index, a.Index)
			assert.Equal(t, tt.want, a.Decision)
			assert.Equal(t, tt.reason, a.Reason)
		})
	}
}

// TestFallbackKeepsTheFleetsWord reproduces the storm's quota-fallback
// case: cooldownd sends callers of an exhausted primary to the fallback;
// one admit then goes unanswered (cooldownd is gone) and is decided
// in-process. That decision must not send the call to the primary, nor to
// a connection whose Retry-After this process reported.
func TestFallbackKeepsTheFleetsWord(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	ft := &fakeTime{now: time.Now()}
	c := newClient(t, cd.URL, withClock(ft.Now), WithDegradeAfter(1, 0))
	primary := conn(t, c, "https://api.example.com", "key-primary", "")
	fallback := conn(t, c, "https://api.example.com", "key-fallback", "")
	limited := conn(t, c, "https://api.example.com", "key-limited", "")
	ctx := t.Context()

	a, err := c.Admit(ctx, primary)
	require.NoError(t, err)
	require.NoError(t, c.Report(ctx, a, Classification{Outcome: OutcomeQuotaExhausted, RetryAfter: time.Hour}))
	a, err = c.Admit(ctx, limited)
	require.NoError(t, err)
	require.NoError(t, c.Report(ctx, a, Classification{Outcome: OutcomeRateLimited, RetryAfter: 30 * time.Second}))
	a, err = c.Admit(ctx, primary, fallback)
	require.NoError(t, err)
	require.False(t, a.Local)
	require.Equal(t, 1, a.Index, "cooldownd sends the call to the fallback")

	cd.Stop()
	a, err = c.Admit(ctx, primary, fallback)
	require.NoError(t, err)
	require.True(t, a.Local, "decided in-process")
	assert.Equal(t, 1, a.Index, "the exhausted primary stays skipped")
	assert.Equal(t, DecisionAllow, a.Decision)
	a, err = c.Admit(ctx, limited)
	require.NoError(t, err)
	assert.Equal(t, DecisionDeny, a.Decision, "the Retry-After this process reported holds")
	assert.Equal(t, ReasonCooldown, a.Reason)
	assert.InDelta(t, 30*time.Second, a.RetryAfter, float64(time.Second))

	ft.now = ft.now.Add(31 * time.Second)
	a, err = c.Admit(ctx, limited)
	require.NoError(t, err)
	assert.Equal(t, DecisionAllow, a.Decision, "and runs out")
}
