package server

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"connectrpc.com/connect"

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

// routeWindow is how long after routing a connection's batches settle
// asks the owner to apply them first: the owner applies them at its
// next flush, within an interval of taking them.
func (k *coalescer) routeWindow() time.Duration { return 2*k.interval + k.timeout }

// forwardAll routes the batches of the jobs other replicas own (one
// goroutine per owner, all within one k.timeout) and returns the jobs to
// apply here (those this replica owns, and what an owner did not take)
// with the batches routed.
func (k *coalescer) forwardAll(ctx context.Context, jobs []flushJob, now func() time.Time) (local []flushJob, out []flushed) {
	local, remote := k.routed(jobs)
	if len(remote) == 0 {
		return local, nil
	}
	fctx, cancel := ctx, context.CancelFunc(func() {})
	if k.timeout > 0 {
		fctx, cancel = context.WithTimeout(ctx, k.timeout)
	}
	defer cancel()
	type result struct {
		out  []flushed
		left []flushJob
	}
	res := make(chan result, len(remote))
	var wg sync.WaitGroup
	for addr, js := range remote {
		wg.Go(func() {
			o, l := k.forward(fctx, addr, js, now)
			res <- result{o, l}
		})
	}
	wg.Wait()
	close(res)
	for r := range res {
		out = append(out, r.out...)
		local = append(local, r.left...)
	}
	return local, out
}

// forward sends js's batches to their owner addr, in Merges of at most
// peerMaxBatches batches and peerMaxKeyed keyed reports (a job's batches in
// one), and returns what addr took and the jobs left to apply here: the
// batches addr refused, and every batch after a Merge that surely did
// not reach it (the owner is not called again in this flush). A Merge
// that may have reached it (a timeout, a reset after sending) is not
// sent again and not applied here, which could count it twice: it is
// lost, as a batch whose store call fails (decision 0054).
func (k *coalescer) forward(ctx context.Context, addr string, js []flushJob, now func() time.Time) (out []flushed, left []flushJob) {
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
		o, l, err := k.forwardChunk(ctx, addr, js[:n], now)
		out, left = append(out, o...), append(left, l...)
		js = js[n:]
		if err != nil {
			return out, append(left, js...)
		}
	}
	return out, left
}

// errRouteLost is a routed batch's error when its Merge may have reached
// the owner but was not answered.
var errRouteLost = errors.New("routed to its owner without an answer: lost rather than counted twice")

func (k *coalescer) forwardChunk(ctx context.Context, addr string, js []flushJob, now func() time.Time) (out []flushed, left []flushJob, err error) {
	var req []*cooldownv1.PeerBatch
	for _, j := range js {
		for _, b := range j.batches {
			req = append(req, peerBatchOf(j, b))
		}
	}
	res, err := k.route.merge(ctx, addr, req)
	switch {
	case err != nil && notMerged(err):
		k.log.Warn("coalesced successes not routed: applied here", "peer", addr, "batches", len(req), "err", err)
		return nil, js, err
	case err != nil:
		k.log.Warn("coalesced successes routed without an answer", "peer", addr, "batches", len(req), "err", err)
		for _, j := range js {
			for _, b := range j.batches {
				out = append(out, flushed{key: j.key, b: b, err: errRouteLost})
			}
			k.finish(j, "", time.Time{})
		}
		return out, nil, err
	}
	i := 0
	for _, j := range js {
		rest := j
		rest.batches = nil
		for _, b := range j.batches {
			// What the owner learned counts for a batch it refused too
			// (it may have refused it for a newer revision).
			out = append(out, flushed{key: j.key, b: b, peer: res.GetLearned()[i]})
			if !res.GetAccepted()[i] {
				rest.batches = append(rest.batches, b)
			}
			i++
		}
		switch {
		case len(rest.batches) == len(j.batches):
			left = append(left, j)
		case len(rest.batches) > 0:
			k.routedTo(j.key, addr, now())
			left = append(left, rest) // its application closes j.done
		default:
			k.finish(j, addr, now())
		}
	}
	return out, left, nil
}

// notMerged says a Merge's error shows the owner took none of it: it
// was refused before merging, or never sent (no connection).
func notMerged(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated, connect.CodeInvalidArgument, connect.CodeFailedPrecondition,
		connect.CodeUnimplemented, connect.CodeResourceExhausted:
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// routedTo records that key's batches went to addr at t.
func (k *coalescer) routedTo(key connKey, addr string, t time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e := k.entries[key]; e != nil {
		e.forwardTo, e.forwardedAt = addr, t
	}
}

// settlePeer asks peer to apply what it holds of key, sent to it at sent,
// and forgets the peer when nothing was routed to it since.
func (k *coalescer) settlePeer(ctx context.Context, key connKey, label, peer string, sent time.Time) {
	sctx, cancel := ctx, context.CancelFunc(func() {})
	if k.timeout > 0 {
		sctx, cancel = context.WithTimeout(ctx, k.timeout)
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
