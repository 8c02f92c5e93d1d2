package server

import (
	"context"
	"sync"
	"time"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/store"
)

// The coalescer's applying side (decision 0054): the flush every interval,
// settle before a report applied at once, and the last flush on close.

// flushed is one batch's outcome, for learn.
type flushed struct {
	key connKey
	b   *coalesceBatch
	res store.CoalescedResult
	err error
	// peer is, for a batch a peer took (decision 0064), what the peer had
	// learned of the connection.
	peer *cooldownv1.PeerLearned
}

// flushJob is one connection's batches, taken from its entry to be
// applied; done is the entry's applying.
type flushJob struct {
	key     connKey
	label   string
	batches []*coalesceBatch
	done    chan struct{}
}

// detach takes e's pending batches for one job (k.mu held); false when
// it has none.
func (k *coalescer) detach(key connKey, e *coalesceEntry) (flushJob, bool) {
	j := flushJob{key: key, label: e.label}
	for i, b := range e.pending {
		if b != nil {
			j.batches = append(j.batches, b)
			k.keyed -= len(b.keyed)
			e.pending[i] = nil
		}
	}
	if len(j.batches) == 0 {
		return flushJob{}, false
	}
	j.done = make(chan struct{})
	e.applying = j.done
	e.quiet = 0
	return j, true
}

// applyJob applies a job's batches in order and marks the entry's
// application done.
func (k *coalescer) applyJob(ctx context.Context, j flushJob) []flushed {
	out := make([]flushed, 0, len(j.batches))
	for _, b := range j.batches {
		out = append(out, k.apply(ctx, j.key, j.label, b))
	}
	k.finish(j, "", time.Time{})
	return out
}

// finish marks j's application done; forwardTo non-empty: its batches
// went to that peer at t.
func (k *coalescer) finish(j flushJob, forwardTo string, t time.Time) {
	if forwardTo != "" {
		k.routedTo(j.key, forwardTo, t)
	}
	k.mu.Lock()
	if e := k.entries[j.key]; e != nil && e.applying == j.done {
		e.applying = nil
	}
	k.mu.Unlock()
	close(j.done)
}

// flush applies every batch held (each connection's on its own, up to
// coalesceFlushers at once) and forgets the connections that had none
// for CoalesceQuietKeep intervals in a row: a connection stays learned
// only while its successes keep coming.
func (k *coalescer) flush(ctx context.Context, now func() time.Time) {
	var jobs []flushJob
	k.mu.Lock()
	for key, e := range k.entries {
		if e.applying != nil {
			continue // settle is applying its batches: these go at the next flush, after them
		}
		j, ok := k.detach(key, e)
		if !ok {
			if e.healthy && e.quiet < CoalesceQuietKeep {
				// Still learned: the Zipf tail's connections have quiet
				// intervals, and each would cost a success applied at once
				// to learn it again (decision 0065).
				e.quiet++
				continue
			}
			if e.forwardTo != "" && now().Sub(e.forwardedAt) < k.routeWindow() {
				// Kept for settle, which asks the owner to apply what was
				// routed to it; not learned any more.
				e.healthy = false
				continue
			}
			delete(k.entries, key)
			continue
		}
		jobs = append(jobs, j)
	}
	k.mu.Unlock()
	if len(jobs) == 0 {
		return
	}
	jobs, fwd := k.forwardAll(ctx, jobs, now)
	out := make(chan []flushed, len(jobs)+1)
	out <- fwd
	var wg sync.WaitGroup
	work := make(chan flushJob)
	for range min(coalesceFlushers, len(jobs)) {
		wg.Go(func() {
			for j := range work {
				out <- k.applyJob(ctx, j)
			}
		})
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	close(out)
	t := now()
	k.mu.Lock()
	defer k.mu.Unlock()
	for fs := range out {
		k.learnFlushed(fs, t)
	}
}

// settle runs before a report of c that is applied at once: the
// successes this replica holds for c, taken before it, reach the store
// before it does, so that in one replica the store sees a connection's
// reports in the order they came (a failure after a held success meets a
// window that holds the success, as internal/breaker would have it). A
// flush applying c's batches is waited for (within ctx); batches still
// pending are applied now. It costs nothing to a connection with
// nothing held.
//
// With routing (decision 0064) the batches this replica sent c's owner
// within the last two intervals are applied first too: the owner is asked
// to settle c (a Settle call; when it fails, the order across the two is
// by interval, as across replicas without routing).
func (k *coalescer) settle(ctx context.Context, c store.Conn, now func() time.Time) {
	k.settleOn(ctx, c, now, true)
}

// settleHeld is settle for a peer's Settle: what this replica holds, not
// what it routed on (two replicas with different views of who owns c
// must not ask each other in a loop).
func (k *coalescer) settleHeld(ctx context.Context, c store.Conn, now func() time.Time) {
	k.settleOn(ctx, c, now, false)
}

func (k *coalescer) settleOn(ctx context.Context, c store.Conn, now func() time.Time, routed bool) {
	key := connKey{c.Tenant, c.ID}
	k.mu.Lock()
	e := k.entries[key]
	routedTo := func(e *coalesceEntry) (string, time.Time) { // k.mu held
		if e != nil && routed && e.forwardTo != "" && now().Sub(e.forwardedAt) < k.routeWindow() {
			return e.forwardTo, e.forwardedAt
		}
		return "", time.Time{}
	}
	peer, _ := routedTo(e)
	if e == nil || (e.applying == nil && e.pending[0] == nil && e.pending[1] == nil && peer == "") {
		k.mu.Unlock()
		return
	}
	wait := e.applying
	j, ok := k.detach(key, e)
	k.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
		}
	}
	if routed {
		// Read again: a flush routing c's batches records the owner once
		// its Merge is answered, which wait waited for.
		k.mu.Lock()
		peer, sent := routedTo(k.entries[key])
		k.mu.Unlock()
		if peer != "" {
			k.settlePeer(ctx, key, c.Label, peer, sent)
		}
	}
	if !ok {
		return
	}
	// Acknowledged successes: applied even when the caller of this report
	// goes away (k.timeout bounds it, as a flush).
	fs := k.applyJob(context.WithoutCancel(ctx), j)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.learnFlushed(fs, now())
}

// learnFlushed takes what the store answered to one connection's batches
// (k.mu held).
func (k *coalescer) learnFlushed(fs []flushed, t time.Time) {
	for _, f := range fs {
		e := k.entries[f.key]
		switch {
		case f.peer != nil:
			// The peer applies it at its next flush; what it learned of the
			// connection (a trip seen in its answers) reaches this replica:
			// a newer revision, or at this one that it is not healthy (its
			// view may be older than this replica's, so it never makes a
			// connection healthy again at the same revision).
			if l := f.peer; e != nil && l.GetKnown() && (l.GetRevision() > e.rev || !l.GetHealthy()) {
				e.set(l.GetHealthy(), store.ReportResult{Revision: l.GetRevision(), Shadow: l.GetShadow(), Now: l.GetServerTime().AsTime()}, t)
			}
		case f.err != nil:
			// Lost (decision 0054): the batch may have been applied in
			// part, and a second try could count it twice.
			k.log.Warn("coalesced successes not applied", "tenant", f.key.tenant, "connection", f.key.id,
				"revision", f.b.rev, "count", f.b.count, "keyed", len(f.b.keyed), "err", f.err)
			if e != nil {
				e.healthy = false
			}
		case f.res.Applied > 0 && e != nil:
			e.set(f.res.Accepted && f.res.Phase == breaker.Closed && f.res.ThrottleProbability == 0, f.res.ReportResult, t)
		}
		if f.res.Reused > 0 {
			k.log.Warn("coalesced success with an idempotency key already used by another report: not counted",
				"tenant", f.key.tenant, "connection", f.key.id, "reused", f.res.Reused)
		}
	}
}

// apply reports one batch.
func (k *coalescer) apply(ctx context.Context, key connKey, label string, b *coalesceBatch) flushed {
	if k.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, k.timeout)
		defer cancel()
	}
	res, err := k.st.ReportCoalesced(ctx, store.Conn{Tenant: key.tenant, ID: key.id, Label: label}, store.Coalesced{
		Revision: b.rev, Retry: b.retry, Count: b.count, Keyed: b.keyed, HTTPStatus: b.status, ErrorCode: b.code,
	})
	return flushed{key: key, b: b, res: res, err: err}
}

// run flushes every interval until close; a batch waits at most one
// interval and a flush.
func (k *coalescer) run(now func() time.Time) {
	defer close(k.done)
	t := time.NewTicker(k.interval)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
			k.flush(context.Background(), now)
		}
	}
}

// start runs the flush loop.
func (k *coalescer) start(now func() time.Time) {
	k.stop, k.done = make(chan struct{}), make(chan struct{})
	go k.run(now)
}

// close stops taking reports (every later one is applied at once), stops
// the loop and applies what it holds: nothing acknowledged is lost on a
// clean stop. ctx bounds the last flush.
func (k *coalescer) close(ctx context.Context, now func() time.Time) {
	k.mu.Lock()
	was := k.closed
	k.closed = true
	k.mu.Unlock()
	if was {
		return
	}
	if k.stop != nil {
		close(k.stop)
		select {
		case <-k.done:
		case <-ctx.Done(): // a flush is still at it: flush what it left anyway
		}
	}
	for {
		k.flush(ctx, now)
		// A flush leaves the batches of a connection whose held successes
		// a settle is applying: wait for it, then flush them.
		k.mu.Lock()
		var busy []chan struct{}
		for _, e := range k.entries {
			if e.applying != nil && (e.pending[0] != nil || e.pending[1] != nil) {
				busy = append(busy, e.applying)
			}
		}
		k.mu.Unlock()
		if len(busy) == 0 {
			return
		}
		for _, c := range busy {
			select {
			case <-c:
			case <-ctx.Done():
				return
			}
		}
	}
}
