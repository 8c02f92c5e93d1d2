package client

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/keys"
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
)

// mirrorEntry is what the client knows of one healthy connection.
type mirrorEntry struct {
	conn   Conn
	rev    uint64
	seenAt time.Time
}

// batchKey groups the successes of one connection under one revision.
type batchKey struct {
	id  ID
	rev uint64
}

// mirror is the client's copy of the state of the connections it uses,
// kept by a WatchConnections stream, and the batches of successes it
// admitted itself. It is safe for concurrent use.
type mirror struct {
	c        *Client
	interval time.Duration
	wg       sync.WaitGroup

	mu      sync.Mutex
	live    bool   // the watch stream is subscribed
	epoch   uint64 // bumps when the stream goes down: older answers teach nothing
	entries map[ID]*mirrorEntry
	evRev   map[ID]uint64 // the newest revision an event showed, mirrored or not
	batch   map[batchKey]int64
	labels  map[ID]Conn

	admits, batched, batches atomic.Uint64
}

func newMirror(c *Client, interval time.Duration) *mirror {
	return &mirror{c: c, interval: interval, entries: map[ID]*mirrorEntry{}, evRev: map[ID]uint64{},
		batch: map[batchKey]int64{}, labels: map[ID]Conn{}}
}

func (m *mirror) start() {
	m.wg.Go(m.watch)
	m.wg.Go(m.flushLoop)
}

func (m *mirror) wait() { m.wg.Wait() }

// admit admits a call to conn from the mirror when the stream is live and
// cooldownd last said the connection is closed and healthy. When it does
// not, it returns the epoch to hand to learn with cooldownd's answer.
func (m *mirror) admit(conn Conn, now time.Time) (a Admission, epoch uint64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[conn.id]
	if !m.live || e == nil || now.Sub(e.seenAt) > mirrorMaxAge {
		return Admission{}, m.epoch, false
	}
	m.admits.Add(1)
	return Admission{Conn: conn, Decision: DecisionAllow, Revision: e.rev, Mirrored: true}, m.epoch, true
}

// learn takes cooldownd's answer to an Admit sent at epoch: a closed,
// allowed connection is mirrored unless an event already showed a newer
// revision or the stream went down meanwhile.
func (m *mirror) learn(a Admission, state cooldownv1.State, epoch uint64, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := a.Conn.id
	if a.Decision != DecisionAllow || state != cooldownv1.State_STATE_CLOSED {
		delete(m.entries, id)
		return
	}
	if !m.live || epoch != m.epoch || a.Revision < m.evRev[id] {
		return
	}
	if len(m.entries) >= maxMirrored {
		clear(m.entries)
	}
	m.entries[id] = &mirrorEntry{conn: a.Conn, rev: a.Revision, seenAt: now}
}

// event applies one transition of the tenant.
func (m *mirror) event(st *cooldownv1.ConnectionState, now time.Time) {
	id, err := keys.IDFromBytes(st.GetConnection().GetId())
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
	e := m.entries[id]
	if e == nil {
		return
	}
	if st.GetState() == cooldownv1.State_STATE_CLOSED && st.GetOverride() == cooldownv1.Override_OVERRIDE_UNSPECIFIED {
		e.rev, e.seenAt = rev, now
		return
	}
	delete(m.entries, id)
}

// up marks the stream subscribed; down forgets everything it vouched for.
func (m *mirror) up() {
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
}

// watch keeps a WatchConnections stream open on the current endpoint,
// reconnecting with backoff, until the client closes.
func (m *mirror) watch() {
	ctx := m.c.closed
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
			if !logged {
				m.c.log.Warn("cooldownd refused the mirror's watch stream; every call goes to cooldownd",
					slog.String("code", connect.CodeOf(err).String()), slog.String("error", err.Error()))
				logged = true
			}
			backoff = queueBackoffCap * 6
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
// the mirror on) for the next batch.
func (m *mirror) add(conn Conn, rev uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.batch[batchKey{conn.id, rev}]++
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

// flush sends one report per connection and revision with the count of
// its successes; one cooldownd does not take goes to the report queue.
func (m *mirror) flush(ctx context.Context) {
	m.mu.Lock()
	batch, labels := m.batch, m.labels
	m.batch, m.labels = map[batchKey]int64{}, map[ID]Conn{}
	m.mu.Unlock()
	for k, n := range batch {
		req := reportRequest(labels[k.id], k.rev, "", Classification{Outcome: OutcomeSuccess, HTTPStatus: 200})
		req.Count = uint32(min(n, 1_000_000))
		m.batches.Add(1)
		_, kind, _ := m.c.call(ctx, "report", func(ctx context.Context, rpc cooldownService) error {
			_, err := rpc.Report(ctx, connect.NewRequest(req))
			return err
		})
		switch kind {
		case rpcOK:
			m.c.health.success()
		case rpcRejected, rpcCapped:
		default:
			if m.c.closed.Err() == nil {
				m.c.enqueue(req, 0)
			}
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
	// reports that carried them.
	Batched, Batches uint64
}

func (m *mirror) stats() MirrorStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return MirrorStats{Live: m.live, Mirrored: len(m.entries), Admits: m.admits.Load(),
		Batched: m.batched.Load(), Batches: m.batches.Load()}
}
