package server_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// TestReportResentRoundTrip: over every protocol, a report sent again
// with its idempotency key (a client whose answer was lost) gets the first
// answer back, the same server time and revision, and the connection's
// counts and the server's report metrics take it once; the same key with
// another outcome is invalid_argument; keys at the bounds are accepted.
// Failed before the key: the resend counted a second failure and tripped
// FastPolicy's three-failure breaker.
func TestReportResentRoundTrip(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := e.cooldown(p.opts...)
			id := newID()
			fail := &cooldownv1.ReportRequest{Connection: conn(id), Outcome: cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE,
				HttpStatus: 503, IdempotencyKey: "Zq3xT9vLm2Pa8RkW4nYc7w"}
			first, err := c.Report(t.Context(), connect.NewRequest(fail))
			require.NoError(t, err)
			require.Equal(t, cooldownv1.State_STATE_CLOSED, first.Msg.GetState(), "one failure of FastPolicy's three")
			e.advance(3 * time.Second) // a resend is later; its answer is the first's
			for range 3 {
				again, err := c.Report(t.Context(), connect.NewRequest(fail))
				require.NoError(t, err)
				assert.True(t, proto.Equal(first.Msg, again.Msg), "the first answer: %v, got %v", first.Msg, again.Msg)
			}
			got, err := c.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id}))
			require.NoError(t, err)
			st := got.Msg.GetConnection()
			assert.Equal(t, cooldownv1.State_STATE_CLOSED, st.GetState(), "three resends did not trip it")
			assert.Equal(t, uint32(1), st.GetConsecutiveFailures())
			_, metrics := e.get(t, "/metrics")
			assert.Contains(t, metrics, `cooldownd_reports_total{accepted="true",outcome="transient_failure"} 1`+"\n", "the metrics count it once")

			other := proto.CloneOf(fail)
			other.Outcome = cooldownv1.Outcome_OUTCOME_SUCCESS
			_, err = c.Report(t.Context(), connect.NewRequest(other))
			requireCode(t, err, connect.CodeInvalidArgument, "idempotency_key")

			var res *connect.Response[cooldownv1.ReportResponse]
			for _, k := range []string{"another-key_00001", "another-key_00002"} {
				fresh := proto.CloneOf(fail)
				fresh.IdempotencyKey = k
				res, err = c.Report(t.Context(), connect.NewRequest(fresh))
				require.NoError(t, err)
			}
			assert.Equal(t, cooldownv1.State_STATE_OPEN, res.Msg.GetState(), "new reports (new keys) count: the third failure trips")

			for _, k := range []string{"", strings.Repeat("A", 16), strings.Repeat("z", 64), "AAECAwQFBgcICQoLDA0ODw", "a-b_c-d_e-f_g-h_"} {
				_, err := c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
					Connection: conn(newID()), Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, IdempotencyKey: k,
				}))
				require.NoError(t, err, "key %q", k)
			}
		})
	}
}
