package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/servertest"
)

const batchKey = "batch-key-0123456789ab"

// successBatch is a batch of one success report per id, of count i+1, at
// revs[i] (0 when revs is short).
func successBatch(key string, ids [][]byte, revs []uint64) *cooldownv1.ReportBatchRequest {
	req := &cooldownv1.ReportBatchRequest{Reporter: "proc-a", IdempotencyKey: key}
	for i, id := range ids {
		r := &cooldownv1.ReportRequest{Connection: conn(id), Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, HttpStatus: 200, Count: uint32(i + 1)}
		if i < len(revs) {
			r.Revision = revs[i]
		}
		req.Reports = append(req.Reports, r)
	}
	return req
}

// countKeys counts the keys that match pattern (a test's own Redis).
func countKeys(t *testing.T, rdb *redis.Client, pattern string) int {
	t.Helper()
	ks, err := rdb.Keys(t.Context(), pattern).Result()
	require.NoError(t, err)
	return len(ks)
}

// TestReportBatchWritesOneClaim: on a real Redis, a coalescing replica
// holds a process's batch of 40 healthy connections' successes and
// writes one key for it (its claim), none per report; the batch sent
// again — to it before the flush, to a replica without coalescing after —
// is answered as the first send was and counted once. Fails if the
// reports keep a key each (40 report keys), or if a resend counts again.
func TestReportBatchWritesOneClaim(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	ts := servertest.Start(t, servertest.WithRedis(rdb), servertest.WithPolicy(fastPolicy()))
	ts.Server().StartCoalescing(time.Hour) // no tick: only the stop flushes
	ctx := t.Context()
	c := cooldownv1connect.NewCooldownServiceClient(ts.Client(), ts.URL)
	ids := make([][]byte, 40)
	revs := make([]uint64, len(ids))
	for i := range ids {
		ids[i] = newID()
		res, err := c.Report(ctx, connect.NewRequest(&cooldownv1.ReportRequest{Connection: conn(ids[i]), Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, HttpStatus: 200}))
		require.NoError(t, err)
		revs[i] = res.Msg.GetRevision()
	}
	req := successBatch(batchKey, ids, revs)
	for range 2 { // the second: a resend whose first answer was lost
		res, err := c.ReportBatch(ctx, connect.NewRequest(req))
		require.NoError(t, err)
		require.Len(t, res.Msg.GetReports(), len(ids))
		for i, r := range res.Msg.GetReports() {
			assert.Equal(t, cooldownv1.ReportApplied_REPORT_APPLIED_COALESCED, r.GetApplied(), "report %d", i)
			assert.Equal(t, revs[i], r.GetRevision())
			assert.Equal(t, cooldownv1.State_STATE_CLOSED, r.GetState())
		}
	}
	assert.Equal(t, 1, countKeys(t, rdb, "cd:b:*"), "one claim for the batch")
	assert.Zero(t, countKeys(t, rdb, "cd:{*}:r:*"), "no key per report")

	ts.Server().StopCoalescing(ctx)
	got := func() []int64 {
		out := make([]int64, len(ids))
		for i, id := range ids {
			snap, _, err := ts.Store.Get(ctx, "default", keyID(id), 0)
			require.NoError(t, err)
			out[i] = snap.State.Successes
		}
		return out
	}
	want := make([]int64, len(ids))
	for i := range want {
		want[i] = 1 + int64(i+1)
	}
	assert.Equal(t, want, got(), "each report counted once")

	hs := servertest.Start(t, servertest.WithStore(ts.Store)) // another replica, not coalescing
	oc := cooldownv1connect.NewCooldownServiceClient(hs.Client(), hs.URL)
	res, err := oc.ReportBatch(ctx, connect.NewRequest(req))
	require.NoError(t, err)
	require.Len(t, res.Msg.GetReports(), len(ids))
	assert.Equal(t, want, got(), "a resend to another replica after the flush counts nothing")
}

// TestReportBatchResentCountsOnce, on each protocol and with coalescing
// on or off: a keyed batch sent again (its answer lost) counts each
// report once, whether the replica held it (the claim) or applied it
// (each report's <key>-<index>); the same batch without a key counts at
// every send (the control); the key sent with other reports is refused.
// A connection the replica has not learned goes at once even when it
// coalesces, in the same batch as held ones.
func TestReportBatchResentCountsOnce(t *testing.T) {
	t.Parallel()
	for _, coalesce := range []bool{false, true} {
		for _, p := range protocols {
			t.Run(fmt.Sprintf("%s/coalesce=%v", p.name, coalesce), func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				if coalesce {
					e.srv.StartCoalescing(time.Hour)
				}
				ctx := t.Context()
				c := e.cooldown(p.opts...)
				learned, fresh := newID(), newID()
				res, err := c.Report(ctx, connect.NewRequest(&cooldownv1.ReportRequest{Connection: conn(learned), Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS}))
				require.NoError(t, err)
				ids := [][]byte{learned, fresh}
				req := successBatch(batchKey, ids, []uint64{res.Msg.GetRevision()})
				for send := range 3 {
					res, err := c.ReportBatch(ctx, connect.NewRequest(req))
					require.NoError(t, err)
					require.Len(t, res.Msg.GetReports(), 2)
					want := cooldownv1.ReportApplied_REPORT_APPLIED_UNSPECIFIED
					if coalesce {
						want = cooldownv1.ReportApplied_REPORT_APPLIED_COALESCED
					}
					assert.Equal(t, want, res.Msg.GetReports()[0].GetApplied(), "the learned connection")
					if send == 0 { // then learned: a resend may hold it, under its <key>-<index>
						assert.Equal(t, cooldownv1.ReportApplied_REPORT_APPLIED_UNSPECIFIED, res.Msg.GetReports()[1].GetApplied(), "a connection not learned goes at once")
					}
				}
				e.srv.StopCoalescing(ctx)
				assert.Equal(t, int64(1+1), successes(t, e, learned))
				assert.Equal(t, int64(2), successes(t, e, fresh))

				other := successBatch("another-key-0123456789", ids, []uint64{res.Msg.GetRevision()})
				other.Reports[1].Count = 7
				_, err = c.ReportBatch(ctx, connect.NewRequest(other))
				require.NoError(t, err)
				other.Reports[1].Count = 8
				_, err = c.ReportBatch(ctx, connect.NewRequest(other))
				requireCode(t, err, connect.CodeInvalidArgument, "idempotency_key")
				assert.Equal(t, int64(2+7), successes(t, e, fresh), "a reused key changes nothing")

				unkeyed := successBatch("", [][]byte{fresh}, nil)
				for range 2 {
					_, err := c.ReportBatch(ctx, connect.NewRequest(unkeyed))
					require.NoError(t, err)
				}
				assert.Equal(t, int64(2+7+2), successes(t, e, fresh), "without a key every send counts")
			})
		}
	}
}

// TestReportBatchIsValidated: each rule of a batch is refused with the
// field that broke it, and nothing is applied.
func TestReportBatchIsValidated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.cooldown()
	id := newID()
	ok := func() *cooldownv1.ReportBatchRequest { return successBatch(batchKey, [][]byte{id, newID()}, nil) }
	many := successBatch(batchKey, nil, nil)
	for range server.MaxBatchReports + 1 {
		many.Reports = append(many.Reports, &cooldownv1.ReportRequest{Connection: conn(newID()), Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS})
	}
	cases := []struct {
		name, field string
		edit        func(*cooldownv1.ReportBatchRequest)
	}{
		{"empty", "reports", func(r *cooldownv1.ReportBatchRequest) { r.Reports = nil }},
		{"too many", "reports", func(r *cooldownv1.ReportBatchRequest) { r.Reports = many.Reports }},
		{"a failure", "reports[1].outcome", func(r *cooldownv1.ReportBatchRequest) {
			r.Reports[1].Outcome = cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE
		}},
		{"a probe", "reports[0].lease_token", func(r *cooldownv1.ReportBatchRequest) { r.Reports[0].LeaseToken = "lease" }},
		{"a hint", "reports[0].retry_after", func(r *cooldownv1.ReportBatchRequest) { r.Reports[0].RetryAfter = durationpb.New(time.Second) }},
		{"a report's key", "reports[1]", func(r *cooldownv1.ReportBatchRequest) { r.Reports[1].IdempotencyKey = batchKey }},
		{"a report's reporter", "reports[1]", func(r *cooldownv1.ReportBatchRequest) { r.Reports[1].Reporter = "proc-b" }},
		{"a repeat", "reports[1]", func(r *cooldownv1.ReportBatchRequest) { r.Reports[1].Connection = conn(id) }},
		{"a bad id", "reports[1].connection.id", func(r *cooldownv1.ReportBatchRequest) { r.Reports[1].Connection = conn([]byte("short")) }},
		{"a count", "reports[0].count", func(r *cooldownv1.ReportBatchRequest) { r.Reports[0].Count = server.MaxBatch + 1 }},
		{"a long key", "idempotency_key", func(r *cooldownv1.ReportBatchRequest) {
			r.IdempotencyKey = strings.Repeat("k", server.MaxBatchKeyLen+1)
		}},
		{"a short key", "idempotency_key", func(r *cooldownv1.ReportBatchRequest) { r.IdempotencyKey = "short" }},
		{"a bad reporter", "reporter", func(r *cooldownv1.ReportBatchRequest) { r.Reporter = "a b" }},
	}
	for _, tc := range cases {
		req := ok()
		tc.edit(req)
		_, err := c.ReportBatch(t.Context(), connect.NewRequest(req))
		requireCode(t, err, connect.CodeInvalidArgument, tc.field)
	}
	snap, _, err := e.store.Get(context.Background(), "default", keyID(id), 0)
	require.NoError(t, err)
	assert.Zero(t, snap.State.Successes, "nothing applied")
	_, err = c.ReportBatch(t.Context(), connect.NewRequest(ok()))
	require.NoError(t, err, "the control batch is valid")
	assert.Equal(t, int64(1), successes(t, e, id))
}

// TestReportBatchOfTheMostFits: a batch of MaxBatchReports successes as
// large as the clients can make them (the longest label, reporter and key,
// the largest revision, count and status) is within the request size, and
// cooldownd takes it whole: the clients' flush never meets
// ResourceExhausted, which they read as the tenant's cap.
func TestReportBatchOfTheMostFits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.cooldown()
	req := &cooldownv1.ReportBatchRequest{Reporter: strings.Repeat("r", server.MaxReporterLen),
		IdempotencyKey: strings.Repeat("k", server.MaxBatchKeyLen)}
	for i := range server.MaxBatchReports {
		label := strings.Repeat("l", server.MaxLabelLen-4) + fmt.Sprintf("%04d", i)
		req.Reports = append(req.Reports, &cooldownv1.ReportRequest{Connection: &cooldownv1.Connection{Id: newID(), Label: label},
			Revision: math.MaxUint64, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, HttpStatus: 599, Count: server.MaxBatch, Retry: true})
	}
	size := proto.Size(req)
	t.Logf("%d reports: %d bytes of %d", len(req.Reports), size, server.MaxRequestBytes)
	require.LessOrEqual(t, size, server.MaxRequestBytes)
	resp, err := c.ReportBatch(t.Context(), connect.NewRequest(req))
	require.NoError(t, err)
	assert.Len(t, resp.Msg.GetReports(), server.MaxBatchReports)
}

// TestReportBatchFixtureBound: the clients' shared fixture of the flush
// (testdata/report_batch.json, replayed by both clients) states the
// request bound this server enforces.
func TestReportBatchFixtureBound(t *testing.T) {
	b, err := os.ReadFile("../../testdata/report_batch.json")
	require.NoError(t, err)
	var f struct {
		MaxRequestBytes int `json:"max_request_bytes"`
	}
	require.NoError(t, json.Unmarshal(b, &f))
	assert.Equal(t, server.MaxRequestBytes, f.MaxRequestBytes)
}
