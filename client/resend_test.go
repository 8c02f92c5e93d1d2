package client

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// loseReports makes cd apply the next n Report requests and then drop
// their replies (the connection is cut after the store applied the report,
// as when a link or a proxy fails at that moment), and records every
// Report request it receives.
func loseReports(t *testing.T, cd *cooldownd, n int64) func() []*cooldownv1.ReportRequest {
	t.Helper()
	var (
		mu   sync.Mutex
		seen []*cooldownv1.ReportRequest
		lose atomic.Int64
	)
	lose.Store(n)
	cd.SetIntercept(func(w http.ResponseWriter, r *http.Request) bool {
		req, b, ok := readReports(t, r)
		if !ok {
			return false
		}
		if b != nil { // seen as one report of its key and the sum of its counts
			req = &cooldownv1.ReportRequest{IdempotencyKey: b.GetIdempotencyKey()}
			for _, e := range b.GetReports() {
				req.Count += e.GetCount()
			}
		}
		mu.Lock()
		seen = append(seen, req)
		mu.Unlock()
		if lose.Add(-1) < 0 {
			return false
		}
		cd.proxy.ServeHTTP(httptest.NewRecorder(), r) // applied by the store
		panic(http.ErrAbortHandler)                   // its reply never arrives
	})
	return func() []*cooldownv1.ReportRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]*cooldownv1.ReportRequest(nil), seen...)
	}
}

// TestQueuedReportResentAfterALostReplyCountsOnce: a report whose reply
// was lost after cooldownd applied it goes to the report queue, which
// sends it again with the same idempotency key, and cooldownd counts it
// once: a failure (fastPolicy trips after 2: counted twice it would
// trip), also after several lost replies, and a batch of the mirror's
// successes (counted twice, twice the successes). Failed before the key:
// the failure tripped the breaker, the batch counted 2n.
func TestQueuedReportResentAfterALostReplyCountsOnce(t *testing.T) {
	t.Parallel()
	fail := Classification{Outcome: OutcomeTransientFailure, HTTPStatus: 503}
	cases := []struct {
		name string
		lost int64 // replies lost in a row
		// run reports through c and returns what the connection must show.
		run   func(t *testing.T, c *Client, cn Conn)
		check func(t *testing.T, st *cooldownv1.ConnectionState)
	}{
		{"a failure, one reply lost", 1, func(t *testing.T, c *Client, cn Conn) {
			a, err := c.Admit(t.Context(), cn)
			require.NoError(t, err)
			require.NoError(t, c.Report(t.Context(), a, fail))
		}, func(t *testing.T, st *cooldownv1.ConnectionState) {
			assert.Equal(t, cooldownv1.State_STATE_CLOSED, st.GetState(), "one failure of the two that trip")
			assert.Equal(t, uint32(1), st.GetConsecutiveFailures())
		}},
		{"a failure, three replies lost", 3, func(t *testing.T, c *Client, cn Conn) {
			a, err := c.Admit(t.Context(), cn)
			require.NoError(t, err)
			require.NoError(t, c.Report(t.Context(), a, fail))
		}, func(t *testing.T, st *cooldownv1.ConnectionState) {
			assert.Equal(t, cooldownv1.State_STATE_CLOSED, st.GetState())
			assert.Equal(t, uint32(1), st.GetConsecutiveFailures())
		}},
		{"a batch of the mirror's successes", 1, func(t *testing.T, c *Client, cn Conn) {
			for range 20 {
				a, err := c.Admit(t.Context(), cn)
				require.NoError(t, err)
				require.NoError(t, c.Report(t.Context(), a, Classification{Outcome: OutcomeSuccess, HTTPStatus: 200}))
			}
		}, func(t *testing.T, st *cooldownv1.ConnectionState) {
			assert.Equal(t, uint64(20), st.GetRecentSuccesses(), "every success once")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cd := startCooldownd(t, fastPolicy())
			opts := []Option{WithoutMirror()} // each report on its own, but for the batch's case
			mirror := tc.name == "a batch of the mirror's successes"
			if mirror {
				opts = append(opts, WithMirror(time.Hour)) // batches go at Flush only
			}
			c := newClient(t, cd.URL, opts...)
			cn := conn(t, c, "https://api.example.com/v1", "key-resend", "")
			if mirror {
				_, err := c.Admit(t.Context(), cn) // the stream opens at cooldownd's first answer
				require.NoError(t, err)
				require.Eventually(t, func() bool { return c.Stats().Mirror.Live }, 5*time.Second, 5*time.Millisecond, "the watch stream is up")
				a, err := c.Admit(t.Context(), cn) // known, closed: the next are admitted from the mirror
				require.NoError(t, err)
				require.NoError(t, c.Report(t.Context(), a, Classification{Outcome: OutcomeSuccess, HTTPStatus: 200}))
				require.NoError(t, c.Flush(t.Context()))
			}
			seen := loseReports(t, cd, tc.lost)
			tc.run(t, c, cn)
			require.NoError(t, c.Flush(t.Context()))

			sent := seen()
			require.Len(t, sent, int(tc.lost)+1, "the first send and a resend per lost reply")
			for _, r := range sent[1:] {
				assert.NotEmpty(t, r.GetIdempotencyKey())
				assert.Equal(t, sent[0].GetIdempotencyKey(), r.GetIdempotencyKey(), "every send of one report carries its key")
				assert.Equal(t, sent[0].GetCount(), r.GetCount())
			}
			assert.Equal(t, uint64(1), c.Stats().Reports.Delivered)
			st := cd.get(t, cn).GetConnection()
			if mirror {
				st.RecentSuccesses-- // the first, before the batch
			}
			tc.check(t, st)
		})
	}
}

// TestReportKeyPerReport: each report has a key of its own, 22 characters
// of unpadded base64url (16 random bytes), which the server accepts.
func TestReportKeyPerReport(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		k := newReportKey()
		assert.Regexp(t, `^[A-Za-z0-9_-]{22}$`, k)
		assert.False(t, seen[k], "a fresh key per report")
		seen[k] = true
	}
}
