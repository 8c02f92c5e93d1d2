package server_test

import (
	"encoding/hex"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
)

// TestExplanationEverywhere: every ConnectionState the server sends
// carries the breaker's explanation, with what only the history knows:
// the operator and reason of a forced state, the cause that opened a
// half-open connection.
func TestExplanationEverywhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth(tokens))
	c := cooldownv1connect.NewCooldownServiceClient(e.withToken("a-client"), e.http.URL)
	viewer := cooldownv1connect.NewCooldownServiceClient(e.withToken("a-viewer"), e.http.URL)
	admin := cooldownv1connect.NewAdminServiceClient(e.withToken("a-admin"), e.http.URL)

	forced, halfOpen, failing := newID(), newID(), newID()
	rateLimit(t, c, forced, time.Minute)
	fres, err := admin.ForceConnection(t.Context(), connect.NewRequest(&cooldownv1.ForceConnectionRequest{
		Id: forced, Override: cooldownv1.Override_OVERRIDE_FORCED_OPEN, Reason: "provider incident", Duration: durationpb.New(time.Hour),
	}))
	require.NoError(t, err)
	assert.Equal(t, "a-admin", fres.Msg.GetConnection().GetExplanation().GetActor(), "the force's own answer")

	rateLimit(t, c, halfOpen, 100*time.Millisecond)
	for range 2 {
		_, err := c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
			Connection: conn(failing), Outcome: cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE, HttpStatus: 503,
		}))
		require.NoError(t, err)
	}
	e.advance(200 * time.Millisecond) // halfOpen's cooldown is over

	check := func(t *testing.T, where string, states []*cooldownv1.ConnectionState) {
		t.Helper()
		got := map[string]*cooldownv1.Explanation{}
		for _, s := range states {
			got[hex.EncodeToString(s.GetConnection().GetId())] = s.GetExplanation()
		}
		f := got[hex.EncodeToString(forced)]
		require.NotNil(t, f, where)
		assert.Equal(t, "a-admin", f.GetActor(), where)
		assert.Equal(t, "provider incident", f.GetReason(), where)
		assert.Equal(t, []string{"forced open by a-admin: provider incident"}, f.GetReasons(), where)
		assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_FORCED_OPEN, f.GetDenies(), where)

		h := got[hex.EncodeToString(halfOpen)]
		require.NotNil(t, h, where)
		assert.Equal(t, cooldownv1.Cause_CAUSE_RATE_LIMIT, h.GetOpenedBy(), where)
		assert.Equal(t, []string{"recovering from a rate-limit cooldown: the next call probes"}, h.GetReasons(), where)
		assert.Less(t, f.GetSeverity(), h.GetSeverity(), "%s: forced open sorts with the open ones, before half-open", where)

		fl := got[hex.EncodeToString(failing)]
		require.NotNil(t, fl, where)
		assert.Equal(t, uint32(1), fl.GetFailuresToTrip(), where)
		assert.Equal(t, []string{"2 of 3 consecutive failures, failure rate 100% of 2 calls over 1s (trips at 50% of 4+ calls), the next failure trips the breaker"}, fl.GetReasons(), where)
		assert.Greater(t, fl.GetSeverity(), h.GetSeverity(), where)
	}

	list, err := viewer.ListConnections(t.Context(), connect.NewRequest(&cooldownv1.ListConnectionsRequest{}))
	require.NoError(t, err)
	check(t, "list", list.Msg.GetConnections())

	var got []*cooldownv1.ConnectionState
	for _, id := range [][]byte{forced, halfOpen, failing} {
		res, err := viewer.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id}))
		require.NoError(t, err)
		assert.Empty(t, res.Msg.GetHistory(), "the explanation's read returns no history that was not asked for")
		got = append(got, res.Msg.GetConnection())
	}
	check(t, "get", got)

	stream, err := viewer.WatchConnections(t.Context(), connect.NewRequest(&cooldownv1.WatchConnectionsRequest{Snapshot: true}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = stream.Close() })
	got = nil
	for stream.Receive() && stream.Msg().GetConnection() != nil {
		got = append(got, stream.Msg().GetConnection())
	}
	require.NoError(t, stream.Err())
	check(t, "watch snapshot", got)
}
