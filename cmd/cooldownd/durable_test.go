package main

import (
	"testing"
	"time"

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
// nor counts an outage). One that opens nothing waits for nothing, and
// once cooldownd's replica poll (every 25 ms, decision 0055) has seen the
// master without a replica it says NOT_REPLICATED too: what it read may be
// lost with the writes. (Before the poll it says nothing; the test asked
// for that answer alone and failed whenever the poll came first.)
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
	for i := 0; ; i++ {
		ok, err := report(cooldownv1.Outcome_OUTCOME_SUCCESS)
		require.NoError(t, err)
		if ok.GetDurability() == cooldownv1.Durability_DURABILITY_NOT_REPLICATED {
			break
		}
		require.Equal(t, cooldownv1.Durability_DURABILITY_UNSPECIFIED, ok.GetDurability(), "no transition, and not polled yet: nothing to say")
		require.Less(t, i, 500, "the replica poll never marked the replicas short")
		time.Sleep(10 * time.Millisecond)
	}
	opened, err := report(cooldownv1.Outcome_OUTCOME_RATE_LIMITED)
	require.NoError(t, err)
	assert.Equal(t, cooldownv1.State_STATE_OPEN, opened.GetState())
	assert.Equal(t, cooldownv1.Durability_DURABILITY_NOT_REPLICATED, opened.GetDurability())
	assert.Contains(t, in.logs.String(), "replicas", "the cause is logged")
}
