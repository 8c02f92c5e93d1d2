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
// replica, a report that opens a connection is answered, applied on the
// master, with durability NOT_REPLICATED (the client neither resends it
// nor counts an outage); one that opens nothing waits for nothing.
func TestWaitReplicasFlag(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	in := start(t, "--addr", "127.0.0.1:0", "--redis-url", "redis://"+srv.Addr, "--wait-replicas", "1", "--wait-timeout", "20ms")
	c := cooldownv1connect.NewCooldownServiceClient(h2c(), in.url())
	report := func(o cooldownv1.Outcome) (*cooldownv1.ReportResponse, error) {
		resp, err := c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
			Connection: &cooldownv1.Connection{Id: newID(9)}, Outcome: o,
		}))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	ok, err := report(cooldownv1.Outcome_OUTCOME_SUCCESS)
	require.NoError(t, err)
	assert.Equal(t, cooldownv1.Durability_DURABILITY_UNSPECIFIED, ok.GetDurability(), "no transition: nothing to replicate")
	opened, err := report(cooldownv1.Outcome_OUTCOME_RATE_LIMITED)
	require.NoError(t, err)
	assert.Equal(t, cooldownv1.State_STATE_OPEN, opened.GetState())
	assert.Equal(t, cooldownv1.Durability_DURABILITY_NOT_REPLICATED, opened.GetDurability())
	assert.Contains(t, in.logs.String(), "replicas", "the cause is logged")
}
