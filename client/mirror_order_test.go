package client

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// TestMirrorSendsItsSuccessesBeforeAFailure: a process whose calls
// alternate success, failure, success, failure... never has two failures
// in a row, so a breaker fed its reports in order never opens on
// consecutive failures (fastPolicy: 2). With the mirror on, successes wait
// for the next batch while failures go at once; unless the batch of a
// connection goes before the failure that follows it, cooldownd sees the
// failures back to back and opens a connection the process kept healthy.
func TestMirrorSendsItsSuccessesBeforeAFailure(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	c := newClient(t, cd.URL, WithMirror(time.Hour), WithAdmitTimeout(10*time.Second))
	_, err := c.Admit(t.Context(), NewConn(ID{0xee}, "warm-up"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.Stats().Mirror.Live }, 5*time.Second, 5*time.Millisecond, "the watch stream is up")
	cn := conn(t, c, "https://api.example.com/v1", "key-order", "")
	for i := range 6 {
		adm, err := c.Admit(t.Context(), cn)
		require.NoError(t, err, "call %d", i)
		require.Equal(t, DecisionAllow, adm.Decision, "call %d", i)
		cl := Classification{Outcome: OutcomeSuccess, HTTPStatus: 200}
		if i%2 == 1 {
			cl = Classification{Outcome: OutcomeTransientFailure, HTTPStatus: 503}
		}
		require.NoError(t, c.Report(t.Context(), adm, cl), "call %d", i)
	}
	got := cd.get(t, cn).GetConnection()
	assert.Equal(t, cooldownv1.State_STATE_CLOSED, got.GetState(), "no two failures in a row")
	assert.Equal(t, uint64(3), got.GetRecentSuccesses(), "the successes reached cooldownd before the failures after them")
}

// reportOrderTrace is testdata/report_order.json, the rule of decision
// 0061 that the TypeScript client replays too (clients/ts/test/mirror.test.ts).
type reportOrderTrace struct {
	Cases []struct {
		Name    string `json:"name"`
		Reports []struct {
			Conn        string `json:"conn"`
			Outcome     string `json:"outcome"`
			Status      int    `json:"status"`
			ProactiveMs int64  `json:"proactive_ms"`
		} `json:"reports"`
		Sent    map[string][]string `json:"sent"`
		Flushed map[string][]string `json:"flushed"`
	} `json:"cases"`
}

// TestReportOrderTrace replays testdata/report_order.json: the Report
// requests cooldownd receives from a mirrored client, per connection and
// in order, before and at the next flush.
func TestReportOrderTrace(t *testing.T) {
	t.Parallel()
	tr := readFixture[reportOrderTrace](t, "report_order.json")
	require.NotEmpty(t, tr.Cases)
	p := fastPolicy()
	p.ConsecutiveFailures = 100 // the fake never opens on the failures: the order is the point
	for _, tc := range tr.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			svc := newFakeService(p)
			c := servedMirror(t, svc)
			conns := map[string]Conn{"a": NewConn(ID{0xa1}, "a"), "b": NewConn(ID{0xb1}, "b")}
			for i, r := range tc.Reports {
				cn, ok := conns[r.Conn]
				require.True(t, ok, "report %d: conn %q", i, r.Conn)
				adm, err := c.Admit(t.Context(), cn)
				require.NoError(t, err)
				require.Equal(t, DecisionAllow, adm.Decision, "report %d", i)
				cl := Classification{Outcome: traceOutcome(t, r.Outcome), HTTPStatus: r.Status,
					Proactive: time.Duration(r.ProactiveMs) * time.Millisecond}
				require.NoError(t, c.Report(t.Context(), adm, cl), "report %d", i)
			}
			sent := svc.reportRequests()
			require.NoError(t, c.Flush(t.Context()))
			flushed := svc.reportRequests()[len(sent):]
			assert.Equal(t, tc.Sent, wireOrder(t, conns, sent), "before the flush")
			assert.Equal(t, tc.Flushed, wireOrder(t, conns, flushed), "at the flush")
		})
	}
}

// wireOrder groups report requests by connection name, each as its
// outcome with ×count for a batch.
func wireOrder(t *testing.T, conns map[string]Conn, reqs []*cooldownv1.ReportRequest) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range reqs {
		name := ""
		for n, cn := range conns {
			if bytes.Equal(r.GetConnection().GetId(), cn.id[:]) {
				name = n
			}
		}
		require.NotEmpty(t, name, "a report of an unknown connection")
		s := Outcome(r.GetOutcome()).String()
		if r.GetCount() > 0 {
			s += fmt.Sprintf("×%d", r.GetCount())
		}
		out[name] = append(out[name], s)
	}
	return out
}

// TestReportOrderWhileDegraded: a client that cannot reach cooldownd
// queues its reports; the successes batched before a failure are queued
// ahead of it (decision 0061), so that cooldownd, back, sees them in the
// order they happened: whether the admission was cooldownd's (its report
// queued because the client is degraded) or the in-process breaker's.
func TestReportOrderWhileDegraded(t *testing.T) {
	t.Parallel()
	p := fastPolicy()
	p.ConsecutiveFailures = 100
	for _, local := range []bool{false, true} {
		name := "admitted by cooldownd"
		if local {
			name = "admitted in-process"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			svc := newFakeService(p)
			c := servedMirror(t, svc, WithDegradeAfter(1, time.Minute))
			cn, other := NewConn(ID{0xa2}, "a"), NewConn(ID{0xb2}, "b")
			adm, err := c.Admit(t.Context(), cn)
			require.NoError(t, err)
			require.NoError(t, c.Report(t.Context(), adm, Classification{Outcome: OutcomeSuccess, HTTPStatus: 200}))
			if !local {
				adm, err = c.Admit(t.Context(), cn)
				require.NoError(t, err)
			}
			svc.down.Store(true)
			o, err := c.Admit(t.Context(), other)
			require.NoError(t, err)
			require.NoError(t, c.Report(t.Context(), o, Classification{Outcome: OutcomeTransientFailure, HTTPStatus: 503}))
			require.True(t, c.Degraded())
			if local {
				adm, err = c.Admit(t.Context(), cn)
				require.NoError(t, err)
				require.True(t, adm.Local, "decided in-process")
			}
			before := len(svc.reportRequests())
			require.NoError(t, c.Report(t.Context(), adm, Classification{Outcome: OutcomeTransientFailure, HTTPStatus: 503}))
			svc.down.Store(false)
			// The queue alone, as its sender does once cooldownd is back; the
			// mirror's own flush is an hour away (and Flush would send its
			// batches before the queue, hiding the order).
			drainQueue(t, c)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			require.NoError(t, c.Flush(ctx))
			var got []string
			for _, r := range svc.reportRequests()[before:] {
				if bytes.Equal(r.GetConnection().GetId(), cn.id[:]) {
					got = append(got, wireOrder(t, map[string]Conn{"a": cn}, []*cooldownv1.ReportRequest{r})["a"]...)
				}
			}
			assert.Equal(t, []string{"success×1", "transient_failure"}, dedupe(got), "the batch, then the failure")
		})
	}
}

// dedupe drops a request that repeats the one before it: a queued report
// cooldownd did not take while down is sent again.
func dedupe(xs []string) []string {
	var out []string
	for _, x := range xs {
		if len(out) == 0 || out[len(out)-1] != x {
			out = append(out, x)
		}
	}
	return out
}

// drainQueue sends the report queue until it is empty (within 20 s).
func drainQueue(t *testing.T, c *Client) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for c.queue.snapshot().Len > 0 {
		require.True(t, time.Now().Before(deadline), "the queue drains")
		if c.queue.kick() {
			c.startSender()
		}
		time.Sleep(5 * time.Millisecond)
	}
}
