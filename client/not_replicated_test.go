package client

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
)

// notReplicatedTrace is testdata/not_replicated.json, the rule both
// clients are held to.
type notReplicatedTrace struct {
	Steps []struct {
		Decision     string `json:"decision"`
		Reason       string `json:"reason"`
		RetryAfterMs int64  `json:"retryAfterMs"`
		Report       int    `json:"report"`
	} `json:"steps"`
}

// TestNotReplicatedAdmitIsAnAnswer (issue 28 point 1): an Admit answered
// durability NOT_REPLICATED (cooldownd granted the probe, or applied a
// timed transition, on a master short of replicas) is the answer: its
// decision stands and the Admission says NotReplicated; the call is not
// decided locally, the Admit is not sent again, and a run of them (with
// their reports, NOT_REPLICATED too) never degrades the client. The steps
// are testdata/not_replicated.json, which the TS client is checked against
// too (test/not-replicated.test.ts).
func TestNotReplicatedAdmitIsAnAnswer(t *testing.T) {
	t.Parallel()
	tr := readFixture[notReplicatedTrace](t, "not_replicated.json")
	require.Greater(t, len(tr.Steps), DefaultDegradeAfter, "more in a row than degrade the client on errors")

	svc := newFakeService(breaker.DefaultPolicy())
	var step atomic.Int64
	svc.answerAdmit(func(_ *cooldownv1.AdmitRequest, out *cooldownv1.AdmitResponse) {
		s := tr.Steps[step.Load()]
		d := cooldownv1.Decision(cooldownv1.Decision_value[s.Decision])
		out.Decision, out.Durability = d, cooldownv1.Durability_DURABILITY_NOT_REPLICATED
		out.DenyReason, out.RetryAfter, out.LeaseToken, out.LeaseExpiresAt = 0, nil, "", nil
		switch d {
		case cooldownv1.Decision_DECISION_DENY:
			out.DenyReason = cooldownv1.DenyReason(cooldownv1.DenyReason_value[s.Reason])
			out.RetryAfter = durationpb.New(time.Duration(s.RetryAfterMs) * time.Millisecond)
		case cooldownv1.Decision_DECISION_ALLOW_PROBE:
			out.LeaseToken = "1.0.1.probe"
			out.LeaseExpiresAt = timestamppb.New(time.Now().Add(time.Minute))
		}
		out.Candidates[out.CandidateIndex].Decision, out.Candidates[out.CandidateIndex].DenyReason = out.Decision, out.DenyReason
	})
	svc.answerReport(func(_ *cooldownv1.ReportRequest, out *cooldownv1.ReportResponse) {
		out.Durability = cooldownv1.Durability_DURABILITY_NOT_REPLICATED
	})
	c, err := svc.client(WithNoWait())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	cn := conn(t, c, "https://api.openai.com/v1", "key", "gpt-nrep")
	outcome := map[int]Outcome{200: OutcomeSuccess, 503: OutcomeTransientFailure, 429: OutcomeRateLimited}
	reports := 0
	for i, s := range tr.Steps {
		step.Store(int64(i))
		a, err := c.Admit(ctx, cn)
		require.NoError(t, err, "step %d", i)
		assert.False(t, a.Local, "step %d: decided by cooldownd", i)
		assert.True(t, a.NotReplicated, "step %d: the Admission says NOT_REPLICATED", i)
		assert.Equal(t, Decision(cooldownv1.Decision_value[s.Decision]), a.Decision, "step %d: the decision stands", i)
		if a.Decision == DecisionAllowProbe {
			assert.NotEmpty(t, a.LeaseToken, "step %d: the probe is the caller's", i)
		}
		if a.Allowed() {
			require.NoError(t, c.Report(ctx, a, Classification{Outcome: outcome[s.Report], HTTPStatus: s.Report}), "step %d", i)
			reports++
		}
		assert.False(t, c.Degraded(), "step %d: NOT_REPLICATED is not an outage", i)
		assert.EqualValues(t, i+1, svc.admits.Load(), "step %d: each Admit sent once", i)
	}
	require.NoError(t, c.Close())
	assert.EqualValues(t, reports, svc.reports.Load(), "each report sent once: none queued for a resend")
	assert.Zero(t, c.Stats().LocalDecisions)
}
