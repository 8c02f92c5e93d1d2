package main

import (
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/redistest"
)

// TestWaitReplicasFlag: with --wait-replicas 1 and a Redis without a
// replica, a report that opens a connection is not acknowledged (the
// client retries or falls back); one that opens nothing is.
func TestWaitReplicasFlag(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	in := start(t, "--addr", "127.0.0.1:0", "--redis-url", "redis://"+srv.Addr, "--wait-replicas", "1", "--wait-timeout", "20ms")
	c := cooldownv1connect.NewCooldownServiceClient(h2c(), in.url())
	report := func(o cooldownv1.Outcome) error {
		_, err := c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
			Connection: &cooldownv1.Connection{Id: newID(9)}, Outcome: o,
		}))
		return err
	}
	require.NoError(t, report(cooldownv1.Outcome_OUTCOME_SUCCESS))
	err := report(cooldownv1.Outcome_OUTCOME_RATE_LIMITED)
	require.Error(t, err)
	assert.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)
	assert.Contains(t, in.logs.String(), "replicas", "the cause is logged")
}
