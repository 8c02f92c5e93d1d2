package store_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// TestFreshReadIsNotReplicated (issue 28 point 1, decision 0057): a call
// that wrote nothing but read a transition or a probe grant its writer is
// still waiting on is answered NotReplicated, without a WAIT. A chaos
// run's fifth failover run failed on it: a report tripped a connection on
// the demoted master, and a report of the old revision sent a millisecond
// later by the same process was refused as stale and answered as if firm,
// 56 ms before the trip's WAIT came up short; the failover lost the trip
// and the old revision's reports were accepted again (38 stale accepts).
// Here the writer is one store (one cooldownd process) whose WAIT the
// stalled replication link holds, and the readers another store that has
// seen no WAIT come up short. On the code before it they answered
// ReplicationNone.
func TestFreshReadIsNotReplicated(t *testing.T) {
	t.Parallel()
	master, _, link := replicated(t)
	clock := newTestClock()
	p := breaker.DefaultPolicy()
	p.LeaseTTL = time.Minute
	dur := store.Durability{Replicas: 1, Timeout: 2 * time.Second}
	writer, err := store.New(master, store.Options{Clock: clock.Now, Policy: &p, Durability: dur})
	require.NoError(t, err)
	reader, err := store.New(master, store.Options{Clock: clock.Now, Policy: &p, Durability: dur})
	require.NoError(t, err)
	ctx := context.Background()
	c := store.Conn{Tenant: "t", ID: testID(0x51)}
	first, err := writer.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess})
	require.NoError(t, err)
	clock.advance(time.Minute) // the connection's creation is old news

	link.Swallow(true) // the replica gets nothing from here on
	t.Cleanup(func() { link.Swallow(false); link.Reset() })
	tripped := make(chan store.ReportResult, 1)
	go func() {
		res, err := writer.Report(ctx, c, breaker.Report{Revision: first.Revision, Outcome: breaker.OutcomeRateLimited, RetryAfter: 600_000})
		assert.NoError(t, err)
		tripped <- res
	}()
	var d store.Decision
	for i := 0; ; i++ { // until the trip's script has run (its WAIT then waits out 2 s)
		require.Less(t, i, 400, "the trip never reached the master")
		d, err = reader.Admit(ctx, c)
		require.NoError(t, err)
		if d.Decision == breaker.Deny {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	assert.Equal(t, store.NotReplicated, d.Durability, "a denial read from a trip the replica lacks is no firmer than the trip")
	stale, err := reader.Report(ctx, c, breaker.Report{Revision: first.Revision, Outcome: breaker.OutcomeSuccess})
	require.NoError(t, err)
	assert.False(t, stale.Accepted, "the old revision's report is stale on the master")
	assert.Equal(t, store.NotReplicated, stale.Durability, "…and the failover may lose the revision that made it stale")
	res := <-tripped
	require.Len(t, res.Events, 1)
	assert.Equal(t, store.NotReplicated, res.Durability, "the trip itself: its WAIT came up short")

	// Past the window the same reads say nothing: the writer's WAIT has
	// long been answered and the replica poll has had its turn.
	link.Swallow(false)
	clock.advance(10 * time.Second)
	d, err = reader.Admit(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, breaker.Deny, d.Decision)
	assert.Equal(t, store.ReplicationNone, d.Durability, "a transition 10 s old is not fresh")
}

// TestReplayOfAReplyRememberedBeforeWrittenAt: a report's first reply
// remembered by the scripts before REPORT_REPLY had written_at (a
// rolling upgrade; keys live --report-key-ttl) is replayed as the same
// answer, the missing field read as 0, for the fast path's resend and the
// full script's alike.
func TestReplayOfAReplyRememberedBeforeWrittenAt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rep  breaker.Report
	}{
		{"a healthy success (the fast path's reply)", breaker.Report{Outcome: breaker.OutcomeSuccess}},
		{"a trip (the full script's reply, with its transition)", breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 60_000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := redistest.Real(t)
			st, err := store.New(rdb, store.Options{})
			require.NoError(t, err)
			ctx := context.Background()
			c := store.Conn{Tenant: "t", ID: testID(0x52)}
			first, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess})
			require.NoError(t, err)
			c.ReportKey = "k-before-written-at-01"
			rep := tc.rep
			rep.Revision = first.Revision
			res, err := st.Report(ctx, c, rep)
			require.NoError(t, err)
			k := keys.Layout{Tenant: c.Tenant, ID: c.ID}.Report(c.ReportKey)
			v, err := rdb.Get(ctx, k).Result()
			require.NoError(t, err)
			said, reply, ok := strings.Cut(v, "|")
			require.True(t, ok, v)
			fields := strings.Split(reply, ",")
			require.Greater(t, len(fields), 10, v)
			old := said + "|" + strings.Join(slices.Delete(fields, 9, 10), ",") // REPORT_AT.written_at, 1-based 10
			require.NoError(t, rdb.Set(ctx, k, old, time.Minute).Err())

			again, err := st.Report(ctx, c, rep)
			require.NoError(t, err)
			assert.True(t, again.Replayed, "answered from the remembered reply")
			assert.Equal(t, res.Revision, again.Revision)
			assert.Equal(t, res.Phase, again.Phase)
			assert.Equal(t, res.Accepted, again.Accepted)
			assert.Equal(t, len(res.Events), len(again.Events))
		})
	}
}
