package client

import (
	"context"

	"connectrpc.com/connect"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// maxBatchReports is the most reports one ReportBatch carries (the
// server's bound, under which any flush fits the server's request size).
const maxBatchReports = 512

// batchItem is one batch of the mirror: n successes of conn under k.
type batchItem struct {
	conn Conn
	k    batchKey
	n    int64
}

// sendAll reports items, one report per item, in one ReportBatch under a
// fresh key (decision 0065): every send of it — the first, another
// endpoint, the queue's resends — carries that key, so cooldownd counts
// each report once. A cooldownd that answers Unimplemented (older than
// ReportBatch) applied nothing: the items go one report each, and
// flushes do so for mirrorRefusedRetry before trying ReportBatch again.
func (m *mirror) sendAll(ctx context.Context, items []batchItem) {
	if m.c.now().UnixNano() < m.batchesOffUntil.Load() {
		m.sendEach(ctx, items)
		return
	}
	req := &cooldownv1.ReportBatchRequest{Reporter: m.c.cfg.reporter, IdempotencyKey: newReportKey(),
		Reports: make([]*cooldownv1.ReportRequest, len(items))}
	for i, it := range items {
		req.Reports[i] = batchEntry(it)
	}
	m.batches.Add(1)
	var resp *connect.Response[cooldownv1.ReportBatchResponse]
	_, kind, err := m.c.call(ctx, "report batch", func(ctx context.Context, rpc cooldownService) error {
		var err error
		resp, err = rpc.ReportBatch(ctx, connect.NewRequest(req))
		return err
	})
	switch {
	case kind == rpcOK:
		m.c.health.success()
		m.batchAnswered(req, resp.Msg)
	case kind == rpcRejected && connect.CodeOf(err) == connect.CodeUnimplemented:
		m.batches.Add(^uint64(0)) // not a report after all
		m.batchesOffUntil.Store(m.c.now().Add(mirrorRefusedRetry).UnixNano())
		m.sendEach(ctx, items)
	case kind == rpcCapped:
		m.c.local.capped(err)
	case kind == rpcRejected:
	default:
		if m.c.closed.Err() == nil {
			m.c.enqueueBatch(req)
		}
	}
}

// sendEach reports items one report each.
func (m *mirror) sendEach(ctx context.Context, items []batchItem) {
	for _, it := range items {
		m.send(ctx, it.conn, it.k, it.n)
	}
}

// batchEntry is item's report inside a ReportBatch: the batch carries the
// reporter and the key.
func batchEntry(it batchItem) *cooldownv1.ReportRequest {
	return &cooldownv1.ReportRequest{Connection: wireConn(it.conn), Revision: it.k.rev, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS,
		HttpStatus: 200, Count: uint32(min(it.n, 1_000_000)), Retry: it.k.retry}
}

// batchAnswered takes cooldownd's answers to a ReportBatch, one per report
// in order (a reply of another length says nothing).
func (m *mirror) batchAnswered(req *cooldownv1.ReportBatchRequest, resp *cooldownv1.ReportBatchResponse) {
	if len(resp.GetReports()) != len(req.GetReports()) {
		return
	}
	for i, r := range req.GetReports() {
		m.answered(r, resp.GetReports()[i])
	}
}
