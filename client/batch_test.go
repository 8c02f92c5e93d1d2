package client

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// recordReports records the Report and ReportBatch requests cooldownd is
// sent; answer, when set, may answer one instead (true).
// readReports decodes the body of a Report (q) or a ReportBatch (b) and
// leaves r's body to be read again; ok is false for any other request or
// a body that does not decode (a test failure).
func readReports(t *testing.T, r *http.Request) (q *cooldownv1.ReportRequest, b *cooldownv1.ReportBatchRequest, ok bool) {
	batch := isRPC(r, "ReportBatch")
	if !batch && !isRPC(r, "Report") {
		return nil, nil, false
	}
	body, err := io.ReadAll(r.Body)
	if !assert.NoError(t, err) {
		return nil, nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if batch {
		b = &cooldownv1.ReportBatchRequest{}
		return nil, b, assert.NoError(t, proto.Unmarshal(body, b), "a Connect unary request with the proto codec")
	}
	q = &cooldownv1.ReportRequest{}
	return q, nil, assert.NoError(t, proto.Unmarshal(body, q), "a Connect unary request with the proto codec")
}

func recordReports(t *testing.T, cd *cooldownd, answer func(w http.ResponseWriter, r *http.Request, batch bool) bool) (reports func() []*cooldownv1.ReportRequest, batches func() []*cooldownv1.ReportBatchRequest) {
	t.Helper()
	var (
		mu sync.Mutex
		rs []*cooldownv1.ReportRequest
		bs []*cooldownv1.ReportBatchRequest
	)
	cd.SetIntercept(func(w http.ResponseWriter, r *http.Request) bool {
		q, b, ok := readReports(t, r)
		if !ok {
			return false
		}
		batch := b != nil
		mu.Lock()
		if batch {
			bs = append(bs, b)
		} else {
			rs = append(rs, q)
		}
		mu.Unlock()
		return answer != nil && answer(w, r, batch)
	})
	return func() []*cooldownv1.ReportRequest {
			mu.Lock()
			defer mu.Unlock()
			return append([]*cooldownv1.ReportRequest(nil), rs...)
		}, func() []*cooldownv1.ReportBatchRequest {
			mu.Lock()
			defer mu.Unlock()
			return append([]*cooldownv1.ReportBatchRequest(nil), bs...)
		}
}

// unimplemented answers like a cooldownd older than ReportBatch.
func unimplemented(w http.ResponseWriter) bool {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotImplemented)
	_, _ = w.Write([]byte(`{"code":"unimplemented","message":"cooldown.v1.CooldownService/ReportBatch is not implemented"}`))
	return true
}

// mirroredConns opens a mirroring client on cd and makes n connections
// known and healthy to it (one Admit and Report each, then a Flush).
func mirroredConns(t *testing.T, cd *cooldownd, n int, opts ...Option) (*Client, []Conn) {
	t.Helper()
	c := newClient(t, cd.URL, append([]Option{WithMirror(time.Hour)}, opts...)...) // batches go at Flush only
	conns := make([]Conn, n)
	for i := range conns {
		conns[i] = conn(t, c, "https://api.example.com/v1", fmt.Sprintf("key-%04d", i), "")
	}
	_, err := c.Admit(t.Context(), conns[0]) // the stream opens at cooldownd's first answer
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.Stats().Mirror.Live }, 5*time.Second, 5*time.Millisecond, "the watch stream is up")
	for _, cn := range conns { // learned closed from the answers: mirrored
		a, err := c.Admit(t.Context(), cn)
		require.NoError(t, err)
		require.NoError(t, c.Report(t.Context(), a, Classification{Outcome: OutcomeSuccess, HTTPStatus: 200}))
	}
	require.NoError(t, c.Flush(t.Context()))
	return c, conns
}

// succeed counts k mirrored successes on each of conns.
func succeed(t *testing.T, c *Client, conns []Conn, k int) {
	t.Helper()
	for _, cn := range conns {
		for range k {
			a, err := c.Admit(t.Context(), cn)
			require.NoError(t, err)
			require.True(t, a.Mirrored, "admitted from the mirror")
			require.NoError(t, c.Report(t.Context(), a, Classification{Outcome: OutcomeSuccess, HTTPStatus: 200}))
		}
	}
}

// TestMirrorFlushIsOneReportBatch: a flush of 30 connections' successes
// is one ReportBatch of 30 reports under one 22-character key, from the
// client's reporter, each report without a key or reporter of its own,
// and cooldownd counts each. Fails if the flush sends a Report per
// connection (each its own key in Redis).
func TestMirrorFlushIsOneReportBatch(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	c, conns := mirroredConns(t, cd, 30, WithReporter("proc-batch"))
	reports, batches := recordReports(t, cd, nil)
	succeed(t, c, conns, 3)
	require.NoError(t, c.Flush(t.Context()))

	assert.Empty(t, reports(), "no Report per connection")
	bs := batches()
	require.Len(t, bs, 1)
	b := bs[0]
	assert.Len(t, b.GetIdempotencyKey(), 22)
	assert.Equal(t, "proc-batch", b.GetReporter())
	require.Len(t, b.GetReports(), len(conns))
	for _, r := range b.GetReports() {
		assert.Empty(t, r.GetIdempotencyKey())
		assert.Empty(t, r.GetReporter())
		assert.Equal(t, uint32(3), r.GetCount())
		assert.Equal(t, cooldownv1.Outcome_OUTCOME_SUCCESS, r.GetOutcome())
	}
	for _, cn := range conns {
		assert.Equal(t, uint64(1+3), cd.get(t, cn).GetConnection().GetRecentSuccesses())
	}
}

// TestMirrorFlushChunksAtTheServersBound: 1,500 connections' batches go
// as three ReportBatch requests (512, 512 and 476), each under its own key,
// and cooldownd takes each, though every connection's label is as long as
// a label may be (a batch of more would pass the server's request size).
func TestMirrorFlushChunksAtTheServersBound(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	c := newClient(t, cd.URL, WithMirror(time.Hour))
	_, batches := recordReports(t, cd, nil)
	var conns []Conn
	for i := range 1500 {
		label := strings.Repeat("l", MaxLabelLen-4) + fmt.Sprintf("%04d", i)
		cn, err := c.Connection("openai", "https://api.example.com/v1", fmt.Sprintf("key-%04d", i), "", label)
		require.NoError(t, err)
		conns = append(conns, cn)
		c.mirror.add(conns[i], 0, false)
	}
	c.mirror.flush(t.Context())
	assert.Zero(t, c.Stats().Reports.Queued, "every batch taken")
	for i := 0; i < len(conns); i += 97 {
		assert.Equal(t, uint64(1), cd.get(t, conns[i]).GetConnection().GetRecentSuccesses(), "connection %d counted", i)
	}
	var sizes []int
	keys := map[string]bool{}
	for _, b := range batches() {
		sizes = append(sizes, len(b.GetReports()))
		keys[b.GetIdempotencyKey()] = true
	}
	assert.ElementsMatch(t, []int{512, 512, 476}, sizes)
	assert.Len(t, keys, len(sizes), "a key per request")
}

// TestMirrorFlushToACooldowndWithoutReportBatch: an endpoint that answers
// ReportBatch Unimplemented applied nothing, so the flush sends the
// connections' reports one each (each keyed, every success counted), and
// flushes stay per report for mirrorRefusedRetry (no ReportBatch tried),
// then try ReportBatch again. A batch queued after a lost answer and then
// answered Unimplemented is dropped (its first send may have been
// applied), counted as refused.
func TestMirrorFlushToACooldowndWithoutReportBatch(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c, conns := mirroredConns(t, cd, 3, withClock(clock))
	reports, batches := recordReports(t, cd, func(w http.ResponseWriter, _ *http.Request, batch bool) bool { return batch && unimplemented(w) })
	succeed(t, c, conns, 2)
	require.NoError(t, c.Flush(t.Context()))
	require.Len(t, batches(), 1, "tried once")
	rs := reports()
	require.Len(t, rs, 3, "then one Report per connection")
	for _, r := range rs {
		assert.Len(t, r.GetIdempotencyKey(), 22, "each its own key")
	}
	for _, cn := range conns {
		assert.Equal(t, uint64(1+2), cd.get(t, cn).GetConnection().GetRecentSuccesses())
	}

	succeed(t, c, conns, 1)
	require.NoError(t, c.Flush(t.Context()))
	assert.Len(t, batches(), 1, "not tried again within the window")
	assert.Len(t, reports(), 6)

	mu.Lock()
	now = now.Add(mirrorRefusedRetry + time.Second)
	mu.Unlock()
	c.mirror.add(conns[0], cd.get(t, conns[0]).GetConnection().GetRevision(), false) // the entries aged out meanwhile
	require.NoError(t, c.Flush(t.Context()))
	assert.Len(t, batches(), 2, "tried again after the window")

	// A queued batch (its send failed) that meets an endpoint without
	// ReportBatch is dropped.
	before := c.Stats().Reports
	c.enqueueBatch(&cooldownv1.ReportBatchRequest{IdempotencyKey: newReportKey(), Reports: []*cooldownv1.ReportRequest{batchEntry(batchItem{conns[0], batchKey{conns[0].id, 0, false}, 5})}})
	require.NoError(t, c.Flush(t.Context()))
	after := c.Stats().Reports
	assert.Equal(t, before.Rejected+1, after.Rejected)
	assert.Equal(t, before.Delivered, after.Delivered)
}
