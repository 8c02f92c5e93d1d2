package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/store"
)

// coalescedReport is one process's success report in a coalesced batch.
type coalescedReport struct {
	key    string // idempotency key, "" for none
	count  int64
	status int
}

// TestReportCoalescedIsTheSumOfItsReports: the successes of N processes
// on one connection, applied by ReportCoalesced as one report of their
// sum, leave the connection's state exactly as the N reports applied one
// by one at the same instant do (every field: counts, the failure-rate
// window, the fleet window's first attempts, requests and accepts, the
// last status, the revision), on real Redis and miniredis, with every
// count a success moves on; and the same batch matches the model
// (internal/breaker) applied report by report. It fails when a keyed
// report is left out of the sum, counted twice, or the retry flag or the
// last status is lost.
func TestReportCoalescedIsTheSumOfItsReports(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		retry bool
		reps  []coalescedReport
	}{
		{name: "unkeyed", reps: []coalescedReport{{count: 1, status: 200}, {count: 7, status: 200}, {count: 30, status: 201}}},
		{name: "keyed", reps: []coalescedReport{{key: "k-c-keyed-000001", count: 3, status: 200}, {key: "k-c-keyed-000002", count: 1, status: 204}}},
		{name: "mixed", reps: []coalescedReport{{key: "k-c-mixed-000001", count: 5, status: 200}, {count: 2, status: 200},
			{key: "k-c-mixed-000002", count: 1, status: 200}, {count: 1, status: 202}}},
		{name: "retries", retry: true, reps: []coalescedReport{{count: 4, status: 200}, {key: "k-c-retry-000001", count: 2, status: 200}}},
		{name: "one report", reps: []coalescedReport{{key: "k-c-one-0000001", count: 1, status: 200}}},
	}
	for name, open := range keyBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := keyPolicy()
			at := time.Date(2026, 12, 2, 3, 0, 0, 250_000_000, time.UTC)
			st, _, _ := open(t, store.Options{Policy: &p, Clock: func() time.Time { return at }})
			ctx := context.Background()
			for i, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					one := store.Conn{Tenant: "t", ID: testID(0xc0, byte(i), 1)}
					sum := store.Conn{Tenant: "t", ID: testID(0xc0, byte(i), 2)}
					prime := breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200}
					var model breaker.State
					for _, c := range []store.Conn{one, sum} {
						_, err := st.Report(ctx, c, prime)
						require.NoError(t, err)
					}
					model.Report(p, at.UnixMilli(), prime, 0)
					rev := countsOf(t, st, one).Revision
					require.Equal(t, rev, countsOf(t, st, sum).Revision)

					b := store.Coalesced{Revision: rev, Retry: tc.retry}
					for _, r := range tc.reps {
						rep := breaker.Report{Revision: rev, Outcome: breaker.OutcomeSuccess, HTTPStatus: r.status, Count: r.count, Retry: tc.retry}
						c := one
						c.ReportKey = r.key
						_, err := st.Report(ctx, c, rep)
						require.NoError(t, err)
						model.Report(p, at.UnixMilli(), rep, 0)
						if r.key != "" {
							// The sum's connection remembers the key on its own
							// (a key is one connection's).
							b.Keyed = append(b.Keyed, store.KeyedCount{Key: r.key, Count: r.count})
						} else {
							b.Count += r.count
						}
						b.HTTPStatus = r.status
					}
					res, err := st.ReportCoalesced(ctx, sum, b)
					require.NoError(t, err)
					var want int64
					for _, r := range tc.reps {
						want += r.count
					}
					assert.Equal(t, want, res.Applied)
					assert.True(t, res.Accepted)
					assert.Equal(t, rev, res.Revision)

					a, _, err := st.Get(ctx, one.Tenant, one.ID, 0)
					require.NoError(t, err)
					s, _, err := st.Get(ctx, sum.Tenant, sum.ID, 0)
					require.NoError(t, err)
					assert.Equal(t, a.State, s.State, "one report of the sum = the reports one by one")
					assert.Equal(t, model.Successes, s.State.Successes, "the model's successes")
					assert.Equal(t, model.Window, s.State.Window, "the model's failure-rate window")
					assert.Equal(t, model.Fleet, s.State.Fleet, "the model's fleet window")
					assert.Equal(t, model.LastStatus, s.State.LastStatus, "the last report's status")
				})
			}
		})
	}
}

// TestReportCoalescedCountsAKeyOnce: a keyed success coalesced by one
// replica is counted once whoever applies it first: the same report in
// another replica's batch (the client's resend went there), a resend to a
// full Report after the flush, and a report applied by a full Report
// before the flush are each counted once; a key remembered for another
// report is not counted and is told apart. The control (a key not seen
// before) counts. Fails if the claim is dropped (every case counts twice).
func TestReportCoalescedCountsAKeyOnce(t *testing.T) {
	t.Parallel()
	for name, open := range keyBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := keyPolicy()
			st, _, _ := open(t, store.Options{Policy: &p})
			ctx := context.Background()
			c := store.Conn{Tenant: "t", ID: testID(0xc1)}
			ok := breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200}
			_, err := st.Report(ctx, c, ok)
			require.NoError(t, err)
			rev := countsOf(t, st, c).Revision
			successes := func() int64 { return countsOf(t, st, c).Successes }

			// A full Report applied the key first; the batch holding its
			// resend does not count it.
			direct := c
			direct.ReportKey = "k-direct-first-01"
			_, err = st.Report(ctx, direct, breaker.Report{Revision: rev, Outcome: breaker.OutcomeSuccess, Count: 4})
			require.NoError(t, err)
			before := successes()
			res, err := st.ReportCoalesced(ctx, c, store.Coalesced{Revision: rev,
				Keyed: []store.KeyedCount{{Key: "k-direct-first-01", Count: 4}, {Key: "k-fresh-00000001", Count: 2}}})
			require.NoError(t, err)
			assert.Equal(t, int64(2), res.Applied, "only the fresh key")
			assert.Equal(t, 1, res.Replayed)
			assert.Equal(t, before+2, successes())

			// Another replica's batch with the same report: nothing counted.
			before = successes()
			res, err = st.ReportCoalesced(ctx, c, store.Coalesced{Revision: rev, Keyed: []store.KeyedCount{{Key: "k-fresh-00000001", Count: 2}}})
			require.NoError(t, err)
			assert.Equal(t, int64(0), res.Applied)
			assert.Equal(t, 1, res.Replayed)
			assert.Equal(t, before, successes(), "a second claim counts nothing")

			// A resend to a full Report after the flush is replayed.
			resend := c
			resend.ReportKey = "k-fresh-00000001"
			r, err := st.Report(ctx, resend, breaker.Report{Revision: rev, Outcome: breaker.OutcomeSuccess, Count: 2})
			require.NoError(t, err)
			assert.True(t, r.Replayed, "the claim is remembered as an applied report")
			assert.True(t, r.Accepted)
			assert.Equal(t, rev, r.Revision)
			assert.Equal(t, breaker.Closed, r.Phase)
			assert.Equal(t, before, successes())

			// A key remembered for another report (another count): not
			// counted, told apart from a resend.
			res, err = st.ReportCoalesced(ctx, c, store.Coalesced{Revision: rev, Keyed: []store.KeyedCount{{Key: "k-fresh-00000001", Count: 3}}})
			require.NoError(t, err)
			assert.Equal(t, 1, res.Reused)
			assert.Equal(t, before, successes())
		})
	}
}

// TestReportCoalescedIsOneScript: a coalesced batch is one script run on
// Redis, keyed or not (decision 0063), so a hot connection's scripts per
// interval are one per replica; the batch is counted in full all the
// same. It fails when the keys are claimed in a script of their own again
// (two runs per keyed batch).
func TestReportCoalescedIsOneScript(t *testing.T) {
	t.Parallel()
	p := keyPolicy()
	st, u, _ := keyBackends(t)["real"](t, store.Options{Policy: &p})
	rdb := u.(*redis.Client)
	ctx := context.Background()
	c := store.Conn{Tenant: "t", ID: testID(0xc2)}
	_, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200})
	require.NoError(t, err)
	rev := countsOf(t, st, c).Revision
	// A script's first run on a server is an EVALSHA refused (NOSCRIPT)
	// and an EVAL: loaded once here, on another connection.
	_, err = st.ReportCoalesced(ctx, store.Conn{Tenant: "t", ID: testID(0xc2, 1)},
		store.Coalesced{Keyed: []store.KeyedCount{{Key: "k-one-script-load", Count: 1}}})
	require.NoError(t, err)
	scripts := func() int64 { return cmdCalls(t, rdb, "evalsha") + cmdCalls(t, rdb, "eval") }
	for i, b := range []store.Coalesced{
		{Revision: rev, Count: 3},
		{Revision: rev, Keyed: []store.KeyedCount{{Key: "k-one-script-0001", Count: 2}, {Key: "k-one-script-0002", Count: 1}}},
		{Revision: rev, Count: 4, Keyed: []store.KeyedCount{{Key: "k-one-script-0003", Count: 5}}},
		// Every key remembered: still one run, nothing counted.
		{Revision: rev, Keyed: []store.KeyedCount{{Key: "k-one-script-0001", Count: 2}}},
	} {
		before, ran := countsOf(t, st, c).Successes, scripts()
		res, err := st.ReportCoalesced(ctx, c, b)
		require.NoError(t, err)
		assert.Equal(t, int64(1), scripts()-ran, "batch %d: one script run", i)
		want := b.Count
		if i < 3 {
			for _, k := range b.Keyed {
				want += k.Count
			}
		}
		assert.Equal(t, want, res.Applied, "batch %d", i)
		assert.Equal(t, before+want, countsOf(t, st, c).Successes, "batch %d", i)
	}
}

// TestReportCoalescedOnANewConnection: a keyed batch for a connection
// Redis has not seen yet (its first successes went through this replica)
// is refused as unregistered, registered, and run again: the first run's
// claims are given back, so the second counts every key once, and a
// resend to a full Report afterwards is replayed. It fails when the
// refused run keeps its claims (the second run then finds every key
// remembered and counts nothing) or counts them (twice).
func TestReportCoalescedOnANewConnection(t *testing.T) {
	t.Parallel()
	for name, open := range keyBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := keyPolicy()
			st, _, _ := open(t, store.Options{Policy: &p})
			ctx := context.Background()
			fresh := store.Conn{Tenant: "t", ID: testID(0xc3, 1)}
			control := store.Conn{Tenant: "t", ID: testID(0xc3, 2)}
			_, err := st.Report(ctx, control, breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200, Count: 6})
			require.NoError(t, err)

			res, err := st.ReportCoalesced(ctx, fresh, store.Coalesced{Count: 1, HTTPStatus: 200,
				Keyed: []store.KeyedCount{{Key: "k-new-conn-000001", Count: 3}, {Key: "k-new-conn-000002", Count: 2}}})
			require.NoError(t, err)
			assert.Equal(t, int64(6), res.Applied)
			assert.Zero(t, res.Replayed)
			assert.True(t, res.Accepted)
			got := countsOf(t, st, fresh)
			assert.Equal(t, countsOf(t, st, control), got, "as one first success of 6")

			resend := fresh
			resend.ReportKey = "k-new-conn-000001"
			r, err := st.Report(ctx, resend, breaker.Report{Outcome: breaker.OutcomeSuccess, Count: 3})
			require.NoError(t, err)
			assert.True(t, r.Replayed)
			assert.Equal(t, got, countsOf(t, st, fresh), "the resend counts nothing")
		})
	}
}
