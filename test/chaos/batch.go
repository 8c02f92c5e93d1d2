package main

import (
	"strconv"

	"google.golang.org/protobuf/proto"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/test/chaos/history"
)

// reportOp records a Report's fields, or a ReportBatch entry's.
func reportOp(m *cooldownv1.ReportRequest) history.Op {
	return history.Op{Kind: history.Report, Conn: connHex(m.GetConnection()), Revision: m.GetRevision(),
		LeaseToken: m.GetLeaseToken(), Outcome: int(m.GetOutcome()), RetryAfter: m.GetRetryAfter().AsDuration().Milliseconds(),
		Count: int64(m.GetCount()), Retry: m.GetRetry()}
}

// parseBatch records a ReportBatch as one Report op per entry (decision
// 0065): the server applies each on its own, keyed <batch key>-<index>,
// so the batch is not one op but independent reports that share its call
// and return times. A resend of the batch (the client's queue sends it
// again as is) is then, per connection, a resend of that entry's report,
// as a Report's resend is: the send before it left an op whose answer was
// lost, and the resend is answered as the first application was. It
// returns nil for a batch it cannot read (which the server refuses whole).
func parseBatch(body []byte) []history.Op {
	var m cooldownv1.ReportBatchRequest
	if proto.Unmarshal(body, &m) != nil {
		return nil
	}
	ops := make([]history.Op, len(m.GetReports()))
	for i, e := range m.GetReports() {
		ops[i] = reportOp(e)
		ops[i].Reporter, ops[i].Entry = m.GetReporter(), i+1
		if k := m.GetIdempotencyKey(); k != "" {
			ops[i].Key = k + "-" + strconv.Itoa(i)
		}
		if ops[i].Conn == "" {
			return nil
		}
	}
	return ops
}

// answerBatch records a ReportBatch's answer into its entries' ops, one
// ReportResponse each in order (an answer of another length says nothing:
// every entry is lost), and returns the bytes the client gets. The seeded
// stale accept is applied to each entry as to a Report; the seeded double
// probe has no place in a batch (no entry grants or holds a lease).
func (r *recorder) answerBatch(ops []history.Op, raw []byte) []byte {
	var m cooldownv1.ReportBatchResponse
	if proto.Unmarshal(raw, &m) != nil {
		copy(ops, withCode(ops, "malformed"))
		return raw
	}
	if len(m.GetReports()) != len(ops) {
		copy(ops, withCode(ops, "lost"))
		return raw
	}
	rewrote := false
	for i, res := range m.GetReports() {
		if r.reportAnswer(&ops[i], res) {
			rewrote = true
		}
	}
	if rewrote {
		raw, _ = proto.Marshal(&m)
	}
	return raw
}
