package client

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
)

// TestNotReplicatedIsAnAnswer (issue 28 point 2): a report answered
// durability NOT_REPLICATED (applied on a master that has no replica yet,
// as after a failover) is an answer: the client neither resends it nor
// counts it as an outage, however many arrive in a row, and its Admits
// keep going to cooldownd. (Before the field existed cooldownd failed such
// a report unavailable, which this client counts as an outage and queues
// for a resend: three in a row degraded it.)
func TestNotReplicatedIsAnAnswer(t *testing.T) {
	t.Parallel()
	svc := newFakeService(breaker.DefaultPolicy())
	svc.answerReport(func(_ *cooldownv1.ReportRequest, out *cooldownv1.ReportResponse) {
		out.Durability = cooldownv1.Durability_DURABILITY_NOT_REPLICATED
	})
	c, err := svc.client()
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	const n = 6
	for i := range n {
		cn := conn(t, c, "https://api.openai.com/v1", "key", "gpt-"+string(rune('a'+i)))
		a, err := c.Admit(ctx, cn)
		require.NoError(t, err)
		require.False(t, a.Local, "report %d: decided by cooldownd", i)
		require.NoError(t, c.Report(ctx, a, Classification{Outcome: OutcomeRateLimited, HTTPStatus: 429}))
		assert.False(t, c.Degraded(), "report %d: NOT_REPLICATED is not an outage", i)
	}
	require.NoError(t, c.Close())
	assert.EqualValues(t, n, svc.reports.Load(), "each report sent once: none queued for a resend")
}
