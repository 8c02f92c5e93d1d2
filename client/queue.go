package client

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// Defaults of the report queue (see [WithReportQueue]).
const (
	DefaultReportQueueSize   = 1024
	DefaultReportQueueMaxAge = time.Minute
)

// The report queue's retry backoff: from the base, doubling, with jitter,
// at most the cap.
const (
	queueBackoffBase = 100 * time.Millisecond
	queueBackoffCap  = 5 * time.Second
)

// newReportKey returns a report's idempotency key
// (ReportRequest.idempotency_key): 16 random bytes, unpadded base64url
// (22 characters). A report keeps it in every resend, so cooldownd, which
// remembers it for at least the queue's default max age, answers a resend
// as it answered the first send and counts the report once.
func newReportKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// pendingReport is a report cooldownd has not accepted yet: the request
// is kept as built, with its idempotency key, and sent again as is (only
// its delay shrinks, see request).
type pendingReport struct {
	req *cooldownv1.ReportRequest
	// batch, instead of req: a mirror's ReportBatch (decision 0065), sent
	// again as is; never leased, stale only past the max age.
	batch    *cooldownv1.ReportBatchRequest
	hint     time.Duration // the report's delay as observed
	observed time.Time
}

func (p *pendingReport) leased() bool { return p.req.GetLeaseToken() != "" }

// stale reports whether p is no longer worth sending: older than maxAge,
// or a hint-only report whose delay has passed (sending it now would cool
// the connection down after the provider's own cooldown ended). A report
// that holds a lease is sent until maxAge: it releases the lease.
func (p *pendingReport) stale(now time.Time, maxAge time.Duration) bool {
	age := now.Sub(p.observed)
	if age > maxAge {
		return true
	}
	if p.leased() || p.hint <= 0 || age < p.hint {
		return false
	}
	switch p.req.GetOutcome() {
	case cooldownv1.Outcome_OUTCOME_SUCCESS, cooldownv1.Outcome_OUTCOME_RATE_LIMITED, cooldownv1.Outcome_OUTCOME_OVERLOADED:
		return true
	}
	return false
}

// request returns the request to send now: the delay it carries is what is
// left of the observed one, so that a late report never cools the
// connection down for longer than the provider asked.
func (p *pendingReport) request(now time.Time) *cooldownv1.ReportRequest {
	if p.hint <= 0 {
		return p.req
	}
	left := max(p.hint-now.Sub(p.observed), time.Millisecond)
	p.req.RetryAfter = durationpb.New(left)
	return p.req
}

// reportQueue holds the reports that could not be sent, bounded: when full
// the oldest is dropped (a report without a lease first). Reports that hold
// a probe lease are sent first. One goroutine sends them, started when the
// queue becomes non-empty and gone when it is empty again.
type reportQueue struct {
	size   int
	maxAge time.Duration

	mu       sync.Mutex
	leased   []*pendingReport // oldest first
	plain    []*pendingReport
	running  bool
	inflight int // popped by the sender, not yet settled
	stats    QueueStats
}

func newReportQueue(size int, maxAge time.Duration) *reportQueue {
	return &reportQueue{size: size, maxAge: maxAge}
}

// push queues p, at the back or (a report sent back after a failed try) at
// the front. It reports whether the caller must start the sender.
func (q *reportQueue) push(p *pendingReport, front bool) (start bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	list := &q.plain
	if p.leased() {
		list = &q.leased
	}
	if front {
		*list = append([]*pendingReport{p}, *list...)
		q.inflight--
	} else {
		*list = append(*list, p)
		q.stats.Queued++
	}
	for len(q.leased)+len(q.plain) > q.size {
		if len(q.plain) > 0 {
			q.plain = q.plain[1:]
		} else {
			q.leased = q.leased[1:]
		}
		q.stats.Dropped++
	}
	if q.running {
		return false
	}
	q.running = true
	return true
}

// next pops the report to send now, leased first, dropping stale ones. When
// the queue is empty it returns false, and the sender must stop: the next
// push starts a new one.
func (q *reportQueue) next(now time.Time) (*pendingReport, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, list := range []*[]*pendingReport{&q.leased, &q.plain} {
		for len(*list) > 0 {
			p := (*list)[0]
			(*list)[0] = nil
			*list = (*list)[1:]
			if p.stale(now, q.maxAge) {
				q.stats.Stale++
				continue
			}
			q.inflight++
			return p, true
		}
	}
	q.running = false
	return nil, false
}

// settled counts the end of a popped report: delivered, or refused.
func (q *reportQueue) settled(delivered bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.inflight--
	if delivered {
		q.stats.Delivered++
	} else {
		q.stats.Rejected++
	}
}

// snapshot returns the counters and the current length (with the report
// being sent, if any).
func (q *reportQueue) snapshot() QueueStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.stats
	s.Len = len(q.leased) + len(q.plain) + q.inflight
	return s
}

// enqueue queues a report and starts the sender when none runs.
func (c *Client) enqueue(req *cooldownv1.ReportRequest, hint time.Duration) {
	p := &pendingReport{req: req, hint: hint, observed: c.now()}
	if c.queue.push(p, false) {
		c.startSender()
	}
}

// enqueueBatch queues a mirror's ReportBatch and starts the sender when
// none runs.
func (c *Client) enqueueBatch(req *cooldownv1.ReportBatchRequest) {
	if c.queue.push(&pendingReport{batch: req, observed: c.now()}, false) {
		c.startSender()
	}
}

// startSender runs the queue's sender (which stops at once, keeping the
// reports, when the client is closed).
func (c *Client) startSender() {
	c.senders.Add(1)
	go func() {
		defer c.senders.Done()
		c.sendQueued()
	}()
}

// sendQueued sends the queued reports until the queue is empty, backing
// off (with jitter) while cooldownd does not answer. A report cooldownd
// refuses is dropped and counted; an answer ends an outage.
func (c *Client) sendQueued() {
	backoff := queueBackoffBase
	for {
		p, ok := c.queue.next(c.now())
		if !ok {
			return
		}
		if c.closed.Err() != nil {
			c.queue.push(p, true)
			c.queue.stop()
			return
		}
		kind, err := c.sendPending(p)
		switch kind {
		case rpcOK:
			c.queue.settled(true)
			c.health.success()
			backoff = queueBackoffBase
			continue
		case rpcRejected, rpcCapped:
			c.queue.settled(false)
			c.log.Debug("cooldownd refused a queued report; dropped", slog.String("code", connect.CodeOf(err).String()))
			continue
		}
		c.queue.push(p, true)
		d := equalJitter(backoff)
		backoff = min(2*backoff, queueBackoffCap)
		if sleep(c.closed, d) != nil { // a real wait: background work, not the guard's
			c.queue.stop()
			return
		}
	}
}

// sendPending sends a queued report (or batch) once, and gives the
// mirror cooldownd's answer. A batch answered Unimplemented (an endpoint
// older than ReportBatch) is refused like any report: its first send may
// have reached a newer one, so its reports cannot go again under new keys.
func (c *Client) sendPending(p *pendingReport) (rpcKind, error) {
	if p.batch != nil {
		var resp *connect.Response[cooldownv1.ReportBatchResponse]
		_, kind, err := c.call(c.closed, "report batch", func(ctx context.Context, rpc cooldownService) error {
			var err error
			resp, err = rpc.ReportBatch(ctx, connect.NewRequest(p.batch))
			return err
		})
		if kind == rpcOK && c.mirror != nil {
			c.mirror.batchAnswered(p.batch, resp.Msg)
		}
		return kind, err
	}
	req := p.request(c.now())
	var resp *connect.Response[cooldownv1.ReportResponse]
	_, kind, err := c.call(c.closed, "report", func(ctx context.Context, rpc cooldownService) error {
		var err error
		resp, err = rpc.Report(ctx, connect.NewRequest(req))
		return err
	})
	if kind == rpcOK && c.mirror != nil {
		c.mirror.answered(req, resp.Msg)
	}
	return kind, err
}

// kick reports whether the caller must start a sender: reports wait and
// none runs (the client stopped one while closing, or it is being flushed).
func (q *reportQueue) kick() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running || len(q.leased)+len(q.plain) == 0 {
		return false
	}
	q.running = true
	return true
}

// stop marks the sender stopped (the client is closing); the reports stay.
func (q *reportQueue) stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.running = false
}

// QueueStats are the counters of the client's report queue (see
// [Client.Stats]).
type QueueStats struct {
	// Len is how many reports wait now.
	Len int
	// Queued counts the reports queued because cooldownd did not take them
	// at once, including local outcomes the fleet must learn.
	Queued uint64
	// Delivered counts queued reports cooldownd accepted later.
	Delivered uint64
	// Dropped counts reports dropped because the queue was full (oldest
	// first).
	Dropped uint64
	// Stale counts reports dropped unsent because they were too old to
	// matter (see [WithReportQueue]).
	Stale uint64
	// Rejected counts queued reports cooldownd refused (for example after
	// its token was revoked).
	Rejected uint64
}

// Stats are the client's counters, for metrics and tests.
type Stats struct {
	// Degraded reports whether the client decides in-process now.
	Degraded bool
	// Degradations counts how many times the client left cooldownd.
	Degradations uint64
	// LocalDecisions counts the admissions decided in-process (during an
	// outage, after one failed call, or past the tenant's cap).
	LocalDecisions uint64
	// Reports are the counters of the report queue.
	Reports QueueStats
	// Mirror are the counters of the mirror (zero without [WithMirror]).
	Mirror MirrorStats
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	s := Stats{Degraded: c.health.isDegraded(), Degradations: c.health.degradations(),
		LocalDecisions: c.localDecisions.Load(), Reports: c.queue.snapshot()}
	if c.mirror != nil {
		s.Mirror = c.mirror.stats()
	}
	return s
}

// Flush sends the queued reports now and waits until the queue is empty
// or ctx ends (then it returns ctx's error). Call it before a process
// exits, so that what it saw reaches the fleet.
func (c *Client) Flush(ctx context.Context) error {
	if c.mirror != nil {
		c.mirror.flush(ctx)
	}
	for {
		if c.queue.snapshot().Len == 0 {
			return nil
		}
		if c.queue.kick() {
			c.startSender()
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}
