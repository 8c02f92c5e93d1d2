package client

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

const (
	// mirrorMaxAge is how long a mirrored entry admits without cooldownd
	// confirming it (an Admit answer or an event): a safety net, since
	// every transition is an event.
	mirrorMaxAge = 30 * time.Second
	// mirrorSilence ends a watch stream that sent nothing (not even its
	// heartbeat, every 15 s) for this long.
	mirrorSilence = 45 * time.Second
	// maxMirrored bounds the entries and the event revisions kept.
	maxMirrored = 8192
	// mirrorRefusedRetry is about how long the mirror waits to ask again
	// after cooldownd refused its watch stream.
	mirrorRefusedRetry = 6 * queueBackoffCap
)

// mirrorEntry is what the client knows of one healthy connection.
type mirrorEntry struct {
	conn   Conn
	rev    uint64
	seenAt time.Time
}

// batchKey groups the successes of one connection under one revision, the
// retries apart from the first attempts: one report has one retry flag.
type batchKey struct {
	id    ID
	rev   uint64
	retry bool
}

// mirrorTicket is what the mirror was when an Admit went to cooldownd: its
// answer is learned only if neither the stream went down, nor the client
// degraded, nor the connection's throttle was seen on or a report of this
// process said it is not healthy, meanwhile.
type mirrorTicket struct {
	epoch uint64
	heat  uint64
}

// sickMark says that this process heard the connection is not healthy: a
// report of its own (a failure, a server delay) or cooldownd's answer to
// one (not closed, or a newer revision than the mirror held). The
// connection is not mirrored until cooldownd says it is closed again: an
// Admit answer sent after the mark at rev or newer, or an event at minEvent
// or newer. An event needs a revision past the one a failure was seen
// under, since the event of that revision may arrive late; an answer sent
// after the mark is cooldownd's word after the failure.
type sickMark struct {
	conn     Conn
	heat     uint64 // the mirror's heat when the mark was made or raised
	rev      uint64
	minEvent uint64
}

// mirror is the client's copy of the state of the connections it uses,
// kept by a WatchConnections stream, and the batches of successes it
// admitted itself. It is safe for concurrent use.
type mirror struct {
	c        *Client
	interval time.Duration
	wg       sync.WaitGroup
	// begin is closed at cooldownd's first answer to an Admit: the watch
	// stream opens then, not at New, so that a client that never calls
	// holds no stream, and the stream goes out once an answer has settled
	// the endpoint's protocol (an HTTP/1.1-only cooldownd is learnt from
	// the first call, not raced by the stream's request).
	begin     chan struct{}
	beginOnce sync.Once
	// sending is held by a flush from taking the batches until they are
	// sent, so that a Flush that finds them taken by the ticker waits for
	// them to be delivered.
	sending sync.Mutex

	mu      sync.Mutex
	live    bool   // the watch stream is subscribed
	epoch   uint64 // bumps when the stream goes down: older answers teach nothing
	entries map[ID]*mirrorEntry
	evRev   map[ID]uint64 // the newest revision an event showed, mirrored or not
	heat    uint64        // bumps at each sighting of a throttle above 0
	hot     map[ID]uint64 // connections last seen throttled, with the heat then
	sick    map[ID]sickMark
	batch   map[batchKey]int64
	labels  map[ID]Conn
	// sent are the batches a flush has taken and is sending (nil when
	// none), so that settle knows when to wait for it.
	sent map[batchKey]int64

	// accepted says cooldownd took a watch stream of this client's token:
	// it lets clients watch their tenant, so it counts batched successes
	// (ReportRequest.count came with that grant). Until a stream is
	// accepted, and again once one is refused, successes are reported one
	// by one and nothing is admitted locally: the client works as without
	// the mirror (see [mirror.batching]).
	accepted atomic.Bool

	admits, batched, batches, refused atomic.Uint64
	// batchesOffUntil is when (Unix ns, the client's clock) flushes try
	// ReportBatch again after a cooldownd answered it Unimplemented.
	batchesOffUntil atomic.Int64
}

func newMirror(c *Client, interval time.Duration) *mirror {
	return &mirror{c: c, interval: interval, begin: make(chan struct{}), entries: map[ID]*mirrorEntry{}, evRev: map[ID]uint64{},
		hot: map[ID]uint64{}, sick: map[ID]sickMark{}, batch: map[batchKey]int64{}, labels: map[ID]Conn{}}
}

func (m *mirror) start() {
	m.wg.Go(m.watch)
	m.wg.Go(m.flushLoop)
}

func (m *mirror) wait() { m.wg.Wait() }

// admit admits a call to conn from the mirror when the stream is live,
// the client is not degraded (then every call is decided in-process),
// cooldownd last said the connection is closed and healthy, and the call
// is a first attempt there: a retry is always cooldownd's to decide (the
// fleet's retry budget). When it does not, it returns the ticket to hand
// to learn with cooldownd's answer.
func (m *mirror) admit(conn Conn, retry, degraded bool, now time.Time) (a Admission, t mirrorTicket, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t = mirrorTicket{epoch: m.epoch, heat: m.heat}
	e := m.entries[conn.id]
	if retry || degraded || !m.live || e == nil || now.Sub(e.seenAt) > mirrorMaxAge {
		return Admission{}, t, false
	}
	m.admits.Add(1)
	return Admission{Conn: conn, Decision: DecisionAllow, Revision: e.rev, Mirrored: true}, t, true
}

// learn takes cooldownd's answer to an Admit sent with ticket t: a closed,
// allowed connection whose throttle is off (probability 0) and whose
// policy would not have denied the call is mirrored, unless an event
// already showed a newer revision, the stream went down or the client
// degraded meanwhile, a throttle above 0 was seen for it after t was
// taken, or it is marked not healthy (see [sickMark]) and the answer is
// older than the mark or its revision.
func (m *mirror) learn(a Admission, state cooldownv1.State, throttle float64, t mirrorTicket, now time.Time) {
	m.beginOnce.Do(func() { close(m.begin) })
	m.mu.Lock()
	defer m.mu.Unlock()
	id := a.Conn.id
	if throttle > 0 {
		m.sawThrottle(id)
		return
	}
	if a.Decision != DecisionAllow || state != cooldownv1.State_STATE_CLOSED || a.Shadowed != ReasonNone {
		delete(m.entries, id)
		return
	}
	if !m.live || t.epoch != m.epoch || a.Revision < m.evRev[id] {
		return
	}
	if h, ok := m.hot[id]; ok {
		if h > t.heat {
			return // an answer older than the throttle seen since
		}
		delete(m.hot, id) // cooldownd answered again with 0
	}
	if s, ok := m.sick[id]; ok {
		if s.heat > t.heat || a.Revision < s.rev {
			return
		}
		delete(m.sick, id) // closed again, cooldownd says after the mark
	}
	if len(m.entries) >= maxMirrored {
		clear(m.entries)
	}
	m.entries[id] = &mirrorEntry{conn: a.Conn, rev: a.Revision, seenAt: now}
}

// answered takes cooldownd's answer to a report sent from the queue.
func (m *mirror) answered(req *cooldownv1.ReportRequest, resp *cooldownv1.ReportResponse) {
	if id, err := idFromBytes(req.GetConnection().GetId()); err == nil {
		m.reportAnswer(NewConn(id, req.GetConnection().GetLabel()), resp)
	}
}

// unhealthy reports whether a report of this process with cl says its
// connection is not healthy: a failure, a server delay hint (on any
// outcome, a success's proactive cooldown included), quota or auth. The
// caller's fault and a cancel say nothing of the connection.
func unhealthy(cl Classification) bool {
	switch cl.Outcome {
	case OutcomeTransientFailure, OutcomeRateLimited, OutcomeOverloaded, OutcomeQuotaExhausted, OutcomeAuthFailure:
		return true
	}
	return cl.RetryAfter > 0 || cl.Proactive > 0
}

// reported takes a report of this process on conn, for a call admitted
// under rev, before it is sent: one that says the connection is not
// healthy takes it out of the mirror at once, whether cooldownd takes the
// report or not, until cooldownd says it is closed again (see [sickMark]).
func (m *mirror) reported(conn Conn, rev uint64, cl Classification) {
	if !unhealthy(cl) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rev = max(rev, m.evRev[conn.id])
	if e := m.entries[conn.id]; e != nil {
		rev = max(rev, e.rev)
	}
	m.sicken(conn, rev, rev+1)
}

// reportAnswer takes cooldownd's answer to a report of this process on
// conn (direct, batched or queued): a throttle above 0 stops the local
// admits until an Admit answer says 0 again;
// a state not closed, or a revision newer than the mirror's entry (the
// state moved on without this process hearing of it), takes the
// connection out until cooldownd says it is closed at that revision or
// newer. An answer older than what an event or the entry showed says
// nothing.
func (m *mirror) reportAnswer(conn Conn, resp *cooldownv1.ReportResponse) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, rev := conn.id, resp.GetRevision()
	e := m.entries[id]
	known := m.evRev[id]
	if e != nil {
		known = max(known, e.rev)
	}
	if resp.GetThrottleProbability() > 0 {
		m.sawThrottle(id)
	}
	if rev < known {
		return
	}
	_, marked := m.sick[id]
	if resp.GetState() != cooldownv1.State_STATE_CLOSED || (e != nil && rev > e.rev) || marked {
		m.sicken(conn, rev, rev)
	}
}

// sicken marks conn not healthy (or raises its mark): its entry goes, and
// answers to Admits sent before now teach nothing. m.mu must be held.
func (m *mirror) sicken(conn Conn, rev, minEvent uint64) {
	id := conn.id
	delete(m.entries, id)
	s, ok := m.sick[id]
	if !ok && len(m.sick) >= maxMirrored {
		// Forgetting marks would let an answer older than a failure
		// mirror the connection: forget every entry and ticket too.
		clear(m.sick)
		clear(m.entries)
		m.epoch++
	}
	m.heat++
	m.sick[id] = sickMark{conn: conn, heat: m.heat, rev: max(s.rev, rev), minEvent: max(s.minEvent, minEvent)}
}

// outage takes the client's degradation: the mirror vouches for nothing
// it learned before, and answers to Admits sent before teach nothing.
func (m *mirror) outage() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.epoch++
	clear(m.entries)
}

// sawThrottle records a throttle above 0 for id: its entry goes, and
// answers to Admits sent before now teach nothing. m.mu must be held.
func (m *mirror) sawThrottle(id ID) {
	delete(m.entries, id)
	if len(m.hot) >= maxMirrored {
		// Forgetting sightings would let a late Admit answer mirror a
		// throttled connection: forget every entry and every ticket too.
		clear(m.hot)
		clear(m.entries)
		m.epoch++
	}
	m.heat++
	m.hot[id] = m.heat
}

// event applies one transition of the tenant.
func (m *mirror) event(st *cooldownv1.ConnectionState, now time.Time) {
	id, err := idFromBytes(st.GetConnection().GetId())
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rev := st.GetRevision()
	if rev < m.evRev[id] {
		return // an older event, delivered late
	}
	if len(m.evRev) >= maxMirrored {
		// Forgetting event revisions would let a late Admit answer
		// mirror a stale state: forget the entries too.
		clear(m.evRev)
		clear(m.entries)
	}
	m.evRev[id] = rev
	if st.GetFleet().GetThrottleProbability() > 0 {
		m.sawThrottle(id)
		return
	}
	healthy := st.GetState() == cooldownv1.State_STATE_CLOSED && st.GetOverride() == cooldownv1.Override_OVERRIDE_UNSPECIFIED
	if s, ok := m.sick[id]; ok {
		_, hot := m.hot[id]
		if !healthy || rev < s.minEvent || hot || !m.live {
			return
		}
		// Closed again at a revision past the mark: mirrored again.
		delete(m.sick, id)
		if len(m.entries) >= maxMirrored {
			clear(m.entries)
		}
		m.entries[id] = &mirrorEntry{conn: s.conn, rev: rev, seenAt: now}
		return
	}
	e := m.entries[id]
	if e == nil {
		return
	}
	if healthy {
		e.rev, e.seenAt = rev, now
		return
	}
	delete(m.entries, id)
}

// batching reports whether successes go in batches: a stream was
// accepted and none refused since. A cooldownd that refuses the watch
// (an older one: its clients may not watch, and it does not know
// ReportRequest.count, so a batch would count as one success; or a token
// whose role may not watch) hears every report at once, as a client
// without the mirror's would.
func (m *mirror) batching() bool { return m.accepted.Load() }

// up marks the stream subscribed; down forgets everything it vouched for
// (the marks of connections not healthy stay: they are this process's own
// word).
func (m *mirror) up() {
	m.accepted.Store(true)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live = true
}

func (m *mirror) down() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live = false
	m.epoch++
	clear(m.entries)
	clear(m.evRev)
	clear(m.hot) // the epoch already turns away every answer before now
}

// watch keeps a WatchConnections stream open on the current endpoint,
// from cooldownd's first answer to an Admit (see begin), reconnecting with
// backoff, until the client closes.
func (m *mirror) watch() {
	ctx := m.c.closed
	select {
	case <-m.begin:
	case <-ctx.Done():
		return
	}
	backoff := queueBackoffBase
	logged := false
	for ctx.Err() == nil {
		e := m.c.endpoints[int(m.c.current.Load())%len(m.c.endpoints)]
		err := m.follow(ctx, e.rpc)
		m.down()
		m.c.log.Debug("mirror watch stream ended", slog.String("code", connect.CodeOf(err).String()), slog.Any("error", err))
		if ctx.Err() != nil {
			return
		}
		if classifyRPC(err) == rpcRejected {
			// An older cooldownd, or a token that may not watch: the
			// client works as without the mirror, and asks again now and
			// then (cooldownd may be upgraded, the token's role changed).
			m.accepted.Store(false)
			m.refused.Add(1)
			if !logged {
				m.c.log.Warn("cooldownd refused the mirror's watch stream; the client works without the mirror "+
					"(every call asks cooldownd, every report goes at once) and asks again every "+mirrorRefusedRetry.String()+
					"; upgrade cooldownd, give the token the client role, or turn the mirror off with WithoutMirror",
					slog.String("code", connect.CodeOf(err).String()), slog.String("error", err.Error()))
				logged = true
			}
			backoff = mirrorRefusedRetry
		}
		d := equalJitter(backoff)
		backoff = min(2*backoff, queueBackoffCap)
		if sleep(ctx, d) != nil {
			return
		}
		if err == nil {
			backoff = queueBackoffBase
		}
	}
}

// follow reads one stream until it ends; a stream silent for too long is
// ended too.
func (m *mirror) follow(ctx context.Context, rpc cooldownService) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	quiet := time.AfterFunc(mirrorSilence, cancel)
	defer quiet.Stop()
	st, err := rpc.WatchConnections(sctx, connect.NewRequest(&cooldownv1.WatchConnectionsRequest{}))
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	for st.Receive() {
		quiet.Reset(mirrorSilence)
		m.up() // the first message, a heartbeat, says the subscription is live
		if cs := st.Msg().GetConnection(); cs != nil {
			m.event(cs, m.c.now())
		}
	}
	return st.Err()
}

// add counts one success admitted from the mirror (or by cooldownd, with
// the mirror on) for the next batch; retry says it was a retry there.
func (m *mirror) add(conn Conn, rev uint64, retry bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.batch[batchKey{conn.id, rev, retry}]++
	m.labels[conn.id] = conn
	m.batched.Add(1)
}

func (m *mirror) flushLoop() {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		select {
		case <-m.c.closed.Done():
			// What was counted still reaches the fleet, within one admit
			// timeout in all, so that Close does not hang on a dead cooldownd.
			ctx, cancel := context.WithTimeout(context.Background(), m.c.cfg.admitTimeout)
			m.flush(ctx)
			cancel()
			return
		case <-t.C:
			m.flush(context.Background()) // each report bounded by the admit timeout
		}
	}
}

// flush sends the batches: one ReportBatch per up to maxBatchReports of
// them, under one idempotency key (decision 0065), or, to a cooldownd that
// lacks it, one report per connection, revision and retry flag with the
// count of its successes. What cooldownd does not take goes to the report
// queue. An answer with a throttle above 0 stops the connection's local
// admits.
func (m *mirror) flush(ctx context.Context) {
	m.sending.Lock()
	defer m.sending.Unlock()
	m.mu.Lock()
	batch, labels := m.batch, m.labels
	m.batch, m.labels = map[batchKey]int64{}, map[ID]Conn{}
	m.sent = batch
	m.mu.Unlock()
	chunk := make([]batchItem, 0, min(len(batch), maxBatchReports))
	for k, n := range batch {
		chunk = append(chunk, batchItem{labels[k.id], k, n})
		if len(chunk) == maxBatchReports {
			m.sendAll(ctx, chunk)
			chunk = chunk[:0]
		}
	}
	if len(chunk) > 0 {
		m.sendAll(ctx, chunk)
	}
	m.mu.Lock()
	m.sent = nil
	m.mu.Unlock()
}

// settle sends conn's batched successes now: a report of conn that goes
// to cooldownd at once (a failure, a hint, a probe's success, anything
// not batched) calls it first, so that cooldownd sees this process's
// reports of a connection in the order they happened (decision 0061).
// Without it, a process whose calls alternate success and failure sends
// its failures back to back, and cooldownd counts consecutive failures
// the process never had. A flush sending conn's batches is waited for;
// a connection with nothing batched costs one map scan under the lock.
// direct false (the client is degraded and the report will be queued):
// the batches are queued, ahead of it, instead of sent.
func (m *mirror) settle(ctx context.Context, conn Conn, direct bool) {
	m.mu.Lock()
	held := hasBatch(m.batch, conn.id) || hasBatch(m.sent, conn.id)
	m.mu.Unlock()
	if !held {
		return
	}
	m.sending.Lock() // after a flush that carries conn's batches
	defer m.sending.Unlock()
	m.mu.Lock()
	mine := map[batchKey]int64{}
	for k, n := range m.batch {
		if k.id == conn.id {
			mine[k] = n
			delete(m.batch, k)
		}
	}
	label, ok := m.labels[conn.id]
	if !ok {
		label = conn
	}
	delete(m.labels, conn.id)
	m.mu.Unlock()
	for k, n := range mine {
		if direct {
			m.send(ctx, label, k, n)
			continue
		}
		m.batches.Add(1)
		m.c.enqueue(m.batchRequest(label, k, n), 0)
	}
}

func hasBatch(b map[batchKey]int64, id ID) bool {
	for k := range b {
		if k.id == id {
			return true
		}
	}
	return false
}

// batchRequest is the report of one batch, sent alone: from this
// client's reporter, with a fresh idempotency key.
func (m *mirror) batchRequest(conn Conn, k batchKey, n int64) *cooldownv1.ReportRequest {
	req := batchEntry(batchItem{conn, k, n})
	req.Reporter, req.IdempotencyKey = m.c.cfg.reporter, newReportKey()
	return req
}

// send reports one batch: n successes of conn under k's revision and
// retry flag.
func (m *mirror) send(ctx context.Context, conn Conn, k batchKey, n int64) {
	req := m.batchRequest(conn, k, n)
	m.batches.Add(1)
	var resp *connect.Response[cooldownv1.ReportResponse]
	_, kind, err := m.c.call(ctx, "report", func(ctx context.Context, rpc cooldownService) error {
		var err error
		resp, err = rpc.Report(ctx, connect.NewRequest(req))
		return err
	})
	switch kind {
	case rpcOK:
		m.c.health.success()
		m.reportAnswer(conn, resp.Msg)
	case rpcCapped:
		m.c.local.capped(err) // logged once, as a direct report's would be
	case rpcRejected:
	default:
		if m.c.closed.Err() == nil {
			m.c.enqueue(req, 0)
		}
	}
}

// MirrorStats are the counters of the mirror (see [WithMirror]).
type MirrorStats struct {
	// Live reports whether the watch stream is subscribed now.
	Live bool
	// Mirrored is how many connections are admitted locally now.
	Mirrored int
	// Admits counts the calls admitted from the mirror.
	Admits uint64
	// Batched counts the successes reported in batches; Batches the
	// requests that carried them: a ReportBatch per flush (per 512
	// connections), or a Report per connection to a cooldownd without
	// ReportBatch, and one per connection settled before a report of it.
	Batched, Batches uint64
	// Refused counts the watch streams cooldownd refused (an older
	// cooldownd, or a token whose role may not watch). While the last
	// stream was refused, or before one was accepted, the client works as
	// without the mirror: nothing is admitted locally and every report goes
	// at once.
	Refused uint64
}

func (m *mirror) stats() MirrorStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return MirrorStats{Live: m.live, Mirrored: len(m.entries), Admits: m.admits.Load(),
		Batched: m.batched.Load(), Batches: m.batches.Load(), Refused: m.refused.Load()}
}
