package server_test

import (
	"bytes"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// TestBatchedSuccesses: a report may stand for a batch of successes (a
// client's mirror), which count as that many in the failure-rate window;
// anything else with a count is refused.
func TestBatchedSuccesses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := e.cooldown()
	id := bytes.Repeat([]byte{7}, 32)
	report := func(o cooldownv1.Outcome, n uint32, tok string) (*cooldownv1.ReportResponse, error) {
		resp, err := api.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
			Connection: conn(id), Outcome: o, Count: n, LeaseToken: tok}))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	for _, bad := range []struct {
		o   cooldownv1.Outcome
		n   uint32
		tok string
	}{
		{cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE, 2, ""},
		{cooldownv1.Outcome_OUTCOME_SUCCESS, 2, "1.0.1.x"},
		{cooldownv1.Outcome_OUTCOME_SUCCESS, 1_000_001, ""},
	} {
		_, err := report(bad.o, bad.n, bad.tok)
		assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%+v", bad)
	}
	// fastPolicy trips at a 50 % failure rate over at least 4 calls in its
	// window, or at 3 failures in a row. A batch of 3 successes, then F S F
	// S F: 3 failures of 8 calls, closed. Were the batch one success, the
	// last failure would make 3 of 6 and trip.
	_, err := report(cooldownv1.Outcome_OUTCOME_SUCCESS, 3, "")
	require.NoError(t, err)
	for i, o := range []cooldownv1.Outcome{cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE, cooldownv1.Outcome_OUTCOME_SUCCESS,
		cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE, cooldownv1.Outcome_OUTCOME_SUCCESS, cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE} {
		got, err := report(o, 0, "")
		require.NoError(t, err)
		assert.Equal(t, cooldownv1.State_STATE_CLOSED, got.GetState(), "after report %d", i)
	}
	got, err := api.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id}))
	require.NoError(t, err)
	assert.Equal(t, uint64(5), got.Msg.GetConnection().GetRecentSuccesses())
}
