package server

import (
	"context"
	"time"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// The coalescer's routing side (decision 0064): at a flush, the batches
// of connections another live replica owns go to that replica (one Merge
// per peer, chunked), which applies them with its own; a batch a peer
// refuses or cannot be sent is applied here at once, as without routing.
// So each connection's successes meet at one replica and cost Redis one
// batch per interval, not one per replica.

// coalesceRoute is where the coalescer routes batches (the router).
type coalesceRoute interface {
	owner(key connKey) (addr string, remote bool)
	merge(ctx context.Context, addr string, batches []*cooldownv1.PeerBatch) (*cooldownv1.MergeResponse, error)
	settle(ctx context.Context, addr string, key connKey, label string) error
}

// routed splits jobs into those applied here and those routed to each
// owner. A job holding a batch a peer routed here stays here.
func (k *coalescer) routed(jobs []flushJob) (local []flushJob, remote map[string][]flushJob) {
	if k.route == nil {
		return jobs, nil
	}
	local = jobs[:0:0]
	for _, j := range jobs {
		addr, ok := k.route.owner(j.key)
		for _, b := range j.batches {
			ok = ok && !b.peer
		}
		if !ok {
			local = append(local, j)
			continue
		}
		if remote == nil {
			remote = map[string][]flushJob{}
		}
		remote[addr] = append(remote[addr], j)
	}
	return local, remote
}

// forward sends js's batches to their owner addr, in Merges of at most
// peerMaxBatches batches and peerMaxKeyed keyed reports (a job's batches in
// one), and applies here what addr did not take.
func (k *coalescer) forward(ctx context.Context, addr string, js []flushJob, now func() time.Time) []flushed {
	var out []flushed
	for len(js) > 0 {
		n, batches, keyed := 0, 0, 0
		for n < len(js) {
			kb := 0
			for _, b := range js[n].batches {
				kb += len(b.keyed)
			}
			if n > 0 && (batches+len(js[n].batches) > peerMaxBatches || keyed+kb > peerMaxKeyed) {
				break
			}
			batches, keyed = batches+len(js[n].batches), keyed+kb
			n++
		}
		out = append(out, k.forwardChunk(ctx, addr, js[:n], now)...)
		js = js[n:]
	}
	return out
}

func (k *coalescer) forwardChunk(ctx context.Context, addr string, js []flushJob, now func() time.Time) []flushed {
	var req []*cooldownv1.PeerBatch
	for _, j := range js {
		for _, b := range j.batches {
			req = append(req, peerBatchOf(j, b))
		}
	}
	mctx, cancel := ctx, context.CancelFunc(func() {})
	if k.timeout > 0 {
		mctx, cancel = context.WithTimeout(ctx, k.timeout)
	}
	res, err := k.route.merge(mctx, addr, req)
	cancel()
	if err != nil {
		k.log.Warn("coalesced successes not routed: applied here", "peer", addr, "batches", len(req), "err", err)
	}
	var out []flushed
	i := 0
	for _, j := range js {
		to := ""
		for _, b := range j.batches {
			if err == nil && res.GetAccepted()[i] {
				out = append(out, flushed{key: j.key, b: b, peer: res.GetLearned()[i]})
				to = addr
			} else {
				out = append(out, k.apply(ctx, j.key, j.label, b))
			}
			i++
		}
		k.finish(j, to, now())
	}
	return out
}

// settlePeer asks peer to apply what it holds of key, sent to it at sent,
// and forgets the peer when nothing was routed to it since.
func (k *coalescer) settlePeer(ctx context.Context, key connKey, label, peer string, sent time.Time) {
	sctx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if k.timeout > 0 {
		sctx, cancel = context.WithTimeout(sctx, k.timeout)
	}
	defer cancel()
	if err := k.route.settle(sctx, peer, key, label); err != nil {
		k.log.Warn("routed successes not settled before a report applied at once", "peer", peer,
			"tenant", key.tenant, "connection", key.id, "err", err)
		return
	}
	k.mu.Lock()
	if e := k.entries[key]; e != nil && e.forwardTo == peer && e.forwardedAt.Equal(sent) {
		e.forwardTo = ""
	}
	k.mu.Unlock()
}

func peerBatchOf(j flushJob, b *coalesceBatch) *cooldownv1.PeerBatch {
	pb := &cooldownv1.PeerBatch{Connection: &cooldownv1.PeerConnection{Tenant: j.key.tenant, Id: j.key.id[:], Label: j.label},
		Revision: b.rev, Retry: b.retry, Count: b.count, HttpStatus: int32(b.status), ErrorCode: b.code}
	for _, kc := range b.keyed {
		pb.Keyed = append(pb.Keyed, &cooldownv1.PeerKeyedCount{Key: kc.Key, Count: kc.Count})
	}
	return pb
}
