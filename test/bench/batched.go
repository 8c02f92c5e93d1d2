package main

import (
	"context"
	"encoding/base64"
	"math/rand/v2"
	"slices"
	"sync/atomic"

	"connectrpc.com/connect"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
)

// batchWidth is how many connections each ReportBatch of the batched
// phase carries: the hot one and batchWidth-1 others at random among
// batchPool. The pool is small enough that each of its connections has
// successes at every replica in every interval: a replica forgets a
// connection after an interval without any (decision 0054), and its next
// success then goes at once; this phase measures the steady state.
const (
	batchWidth = 16
	batchPool  = 64
)

// hotBatches is the batched phase (decision 0065): each op is one keyed
// ReportBatch, as a client's mirror flush sends it, of one success on the
// hot connection (conns[0]) and on batchWidth-1 others of conns[1:1+batchPool], each at
// the revision its last answer named (a coalescing replica holds only a
// report at the revision it learned). coalesced and direct count the
// reports' answers.
func hotBatches(cl func(w int) cooldownv1connect.CooldownServiceClient, conns []*cooldownv1.Connection, coalesced, direct *atomic.Int64) op {
	conns = conns[:min(len(conns), 1+batchPool)]
	revs := make([]atomic.Uint64, len(conns))
	return func(ctx context.Context, w int) error {
		var key [16]byte
		for i := range key {
			key[i] = byte(rand.N(256))
		}
		idx := make([]int, 0, batchWidth)
		idx = append(idx, 0)
		for len(idx) < min(batchWidth, len(conns)) {
			if i := 1 + rand.N(len(conns)-1); !slices.Contains(idx, i) {
				idx = append(idx, i)
			}
		}
		req := &cooldownv1.ReportBatchRequest{Reporter: "bench", IdempotencyKey: base64.RawURLEncoding.EncodeToString(key[:])}
		for _, i := range idx {
			req.Reports = append(req.Reports, &cooldownv1.ReportRequest{Connection: conns[i], Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS,
				HttpStatus: 200, Revision: revs[i].Load()})
		}
		r, err := cl(w).ReportBatch(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		for j, a := range r.Msg.GetReports() {
			revs[idx[j]].Store(a.GetRevision())
			if a.GetApplied() == cooldownv1.ReportApplied_REPORT_APPLIED_COALESCED {
				coalesced.Add(1)
			} else {
				direct.Add(1)
			}
		}
		return nil
	}
}
