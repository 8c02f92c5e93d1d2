package client

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMirrorOnByDefault: a client made without a mirror option has the
// mirror (issue 25): the first call to a connection asks cooldownd, the
// watch stream opens at that first answer, and once it is live a healthy
// connection's calls cost no round trip, their successes one batch.
// WithoutMirror turns it off: every call is an Admit and a Report, and no
// stream is opened.
func TestMirrorOnByDefault(t *testing.T) {
	t.Parallel()
	const calls = 100
	cases := []struct {
		name        string
		opts        []Option
		mirror      bool
		wantAdmits  int64 // after the first call
		wantReports int64 // at most, after the first call and Flush
	}{
		// The call after the stream came up asks cooldownd once more: its
		// answer, under a live stream, mirrors the connection.
		{name: "default", mirror: true, wantAdmits: 1, wantReports: 2},
		{name: "WithoutMirror", opts: []Option{WithoutMirror()}, wantAdmits: calls, wantReports: calls},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cd := startCooldownd(t, fastPolicy())
			var admits, reports, watches atomic.Int64
			cd.SetIntercept(func(_ http.ResponseWriter, r *http.Request) bool {
				switch {
				case isRPC(r, "Admit"):
					admits.Add(1)
				case isRPC(r, "Report"):
					reports.Add(1)
				case isRPC(r, "WatchConnections"):
					watches.Add(1)
				}
				return false
			})
			c := newClient(t, cd.URL, tc.opts...)
			cn := conn(t, c, "https://api.example.com/v1", "key-default", "")
			assert.Zero(t, watches.Load(), "no stream before the first answer")
			do := func() {
				resp, err := c.Do(t.Context(), cn, noop)
				require.NoError(t, err)
				_ = resp.Body.Close()
			}
			do()
			assert.Equal(t, int64(1), admits.Load(), "the first call asks cooldownd")
			if tc.mirror {
				require.Eventually(t, func() bool { return c.Stats().Mirror.Live }, 5*time.Second, 5*time.Millisecond, "the stream opens at the first answer")
			}
			a0, r0 := admits.Load(), reports.Load()
			for range calls {
				do()
			}
			require.NoError(t, c.Flush(t.Context()))
			assert.Equal(t, tc.wantAdmits, admits.Load()-a0)
			assert.LessOrEqual(t, reports.Load()-r0, tc.wantReports)
			assert.Equal(t, uint64(calls+1), cd.get(t, cn).GetConnection().GetRecentSuccesses(), "every success counted once")
			st := c.Stats().Mirror
			if tc.mirror {
				assert.Equal(t, uint64(calls-1), st.Admits, "every call after the second admitted from the mirror")
				assert.Equal(t, int64(1), watches.Load())
			} else {
				assert.Equal(t, MirrorStats{}, st)
				assert.Zero(t, watches.Load(), "no stream without the mirror")
			}
		})
	}
}

// TestDefaultMirrorAsksCooldowndWhereItMust: with the default mirror a
// retry and the first call after a failure of this process still go to
// cooldownd, and a failure is reported at once, not batched.
func TestDefaultMirrorAsksCooldowndWhereItMust(t *testing.T) {
	t.Parallel()
	svc := newFakeService(fastPolicy())
	c := svc.serve(t) // the default: no mirror option
	_, err := c.Admit(t.Context(), NewConn(ID{0xee}, "warm-up"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.Stats().Mirror.Live }, 5*time.Second, 5*time.Millisecond, "the watch stream is up")
	svc.forget()

	cn := NewConn(ID{3}, "p")
	first, err := c.Admit(t.Context(), cn)
	require.NoError(t, err)
	assert.False(t, first.Mirrored, "the first call to a connection asks cooldownd")
	assert.Len(t, svc.admitRequests(), 1)
	adm, err := c.Admit(t.Context(), cn)
	require.NoError(t, err)
	require.True(t, adm.Mirrored)
	assert.Len(t, svc.admitRequests(), 1, "then the mirror admits")

	retry, err := c.AdmitAttempt(t.Context(), Attempt{Candidates: []Conn{cn}, Sent: []Conn{cn}})
	require.NoError(t, err)
	assert.False(t, retry.Mirrored, "a retry is cooldownd's to admit")
	require.Len(t, svc.admitRequests(), 2)

	require.NoError(t, c.Report(t.Context(), adm, Classification{Outcome: OutcomeTransientFailure, HTTPStatus: 500}))
	reps := svc.reportRequests()
	require.Len(t, reps, 1, "a failure is reported at once")
	assert.Equal(t, OutcomeTransientFailure, Outcome(reps[0].GetOutcome()))
	after, err := c.Admit(t.Context(), cn)
	require.NoError(t, err)
	assert.False(t, after.Mirrored, "after its own failure the process asks cooldownd")
	assert.Len(t, svc.admitRequests(), 3)
}

// TestMirrorRefusedWorksWithout: a cooldownd that refuses the watch
// stream — one that lacks it, or one whose clients may not watch (before
// the mirror: it did not count batched successes either), or a token whose
// role may not watch — leaves the default client working as without the
// mirror: no call fails, each asks cooldownd, each success is reported at
// once on its own, the refusal is logged once and counted, and the stream
// is asked for again only now and then.
func TestMirrorRefusedWorksWithout(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
	}{
		{"token may not watch", connect.NewError(connect.CodePermissionDenied, errors.New("WatchConnections needs a token of role viewer"))},
		{"cooldownd without the watch", connect.NewError(connect.CodeUnimplemented, errors.New("cooldown.v1.CooldownService.WatchConnections is not implemented"))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			svc := newFakeService(fastPolicy())
			svc.refuseWatch(tc.err)
			log, logs := newLogger()
			c := svc.serve(t, WithLogger(log)) // the default: no mirror option
			cn := NewConn(ID{4}, "p")
			_, err := c.Admit(t.Context(), cn)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return c.Stats().Mirror.Refused > 0 }, 5*time.Second, 5*time.Millisecond, "the stream was asked for and refused")
			svc.forget()

			const calls = 20
			for range calls {
				resp, err := c.Do(t.Context(), cn, noop)
				require.NoError(t, err, "a refused stream never fails a call")
				_ = resp.Body.Close()
			}
			assert.Len(t, svc.admitRequests(), calls, "every call asks cooldownd")
			reps := svc.reportRequests()
			require.Len(t, reps, calls, "every success is reported at once, before any Flush")
			for _, r := range reps {
				assert.LessOrEqual(t, r.GetCount(), uint32(1), "no batch: such a cooldownd would count one as one success")
			}
			st := c.Stats().Mirror
			assert.False(t, st.Live)
			assert.Zero(t, st.Admits)
			assert.Zero(t, st.Batched)
			assert.Equal(t, uint64(1), st.Refused, "asked for again only after about 30 s")
			assert.Equal(t, 1, svc.watchCalls())
			assert.Equal(t, 1, strings.Count(logs.String(), "refused the mirror's watch stream"), "logged once:\n%s", logs)
			assert.Contains(t, logs.String(), "level=WARN")
		})
	}
}

// TestMirrorBatchesOnlyOnceAccepted: before cooldownd accepts the watch
// stream (and so is known to count batched successes) a success is
// reported on its own, at once.
func TestMirrorBatchesOnlyOnceAccepted(t *testing.T) {
	t.Parallel()
	svc := newFakeService(fastPolicy())
	hold := make(chan struct{})
	svc.refuseWatch(nil)
	c := svc.serve(t, WithHTTPClient(holdWatch{http.DefaultClient, hold}))
	t.Cleanup(func() { close(hold) })
	cn := NewConn(ID{5}, "p")
	for range 3 {
		a, err := c.Admit(t.Context(), cn)
		require.NoError(t, err)
		require.NoError(t, c.Report(t.Context(), a, Classification{Outcome: OutcomeSuccess, HTTPStatus: 200}))
	}
	assert.Len(t, svc.reportRequests(), 3, "each success at once while the stream is not accepted")
	assert.Zero(t, c.Stats().Mirror.Batched)
}

// holdWatch is an HTTP client whose WatchConnections requests wait until
// hold is closed or their context ends.
type holdWatch struct {
	h    connect.HTTPClient
	hold chan struct{}
}

func (h holdWatch) Do(req *http.Request) (*http.Response, error) {
	if isRPC(req, "WatchConnections") {
		select {
		case <-h.hold:
		case <-req.Context().Done():
			return nil, context.Cause(req.Context())
		}
	}
	return h.h.Do(req)
}
