package main

import (
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
)

// TestEmbeddedExpiresLeases: miniredis only expires keys when told time
// passed; the embedded default keeps it in step with the wall clock, so a
// dead probe's lease lapses there as on a real Redis.
func TestEmbeddedExpiresLeases(t *testing.T) {
	t.Parallel()
	in := start(t, "--addr", "127.0.0.1:0", "--lease-ttl", "1s") // long enough that two Admits in a row see it even on a loaded machine
	c := cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, in.url())
	conn := &cooldownv1.Connection{Id: newID(9)}
	admit := func() *cooldownv1.AdmitResponse {
		t.Helper()
		res, err := c.Admit(t.Context(), connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{conn}}))
		require.NoError(t, err)
		return res.Msg
	}
	_, err := c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
		Connection: conn, Outcome: cooldownv1.Outcome_OUTCOME_RATE_LIMITED, RetryAfter: durationpb.New(50 * time.Millisecond)}))
	require.NoError(t, err)
	time.Sleep(80 * time.Millisecond)
	require.Equal(t, cooldownv1.Decision_DECISION_ALLOW_PROBE, admit().GetDecision())
	assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_PROBE_IN_FLIGHT, admit().GetDenyReason())
	// The probe's holder never reports: within a bounded wait the lease
	// lapses and the next caller probes.
	deadline := time.Now().Add(6 * time.Second)
	for admit().GetDecision() != cooldownv1.Decision_DECISION_ALLOW_PROBE {
		require.True(t, time.Now().Before(deadline), "the lease did not lapse within 6s")
		time.Sleep(25 * time.Millisecond)
	}
}
