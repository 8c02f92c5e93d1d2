package server

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/store"
)

// Coalescing's bounds (decision 0054): what a replica holds between two
// flushes. A report past a bound is applied at once, as without
// coalescing, so a bound costs Redis operations, never a report.
const (
	// CoalesceMaxConns is the most connections a replica coalesces at
	// once, each about coalesceEntryBytes.
	CoalesceMaxConns = 65_536
	// CoalesceMaxKeyed is the most reports with an idempotency key a
	// replica holds between two flushes (across its connections), each
	// about coalesceKeyBytes.
	CoalesceMaxKeyed = 262_144
	// coalesceFlushers is how many connections' batches one flush applies
	// at once.
	coalesceFlushers = 16
	// CoalesceQuietKeep is how many flushes in a row with nothing held a
	// healthy connection stays learned (decision 0065): what the replica
	// answers for it is then at most that many intervals old, and a
	// connection whose successes reach this replica less than once per
	// interval is not applied at once each time it comes back.
	CoalesceQuietKeep = 8
)

// The bytes a coalescing replica holds per connection and per keyed
// report, measured by TestCoalesceMemoryBound (heap in use per entry and
// per key, rounded up). At the bounds: 65,536 × 512 B + 262,144 × 128 B
// = 64 MiB at most.
const (
	coalesceEntryBytes = 512
	coalesceKeyBytes   = 128
)

// coalesceStore is what the coalescer applies batches with (the store).
type coalesceStore interface {
	ReportCoalesced(ctx context.Context, c store.Conn, b store.Coalesced) (store.CoalescedResult, error)
}

// coalescer merges the success reports a replica is sent, per connection
// and interval, into one report of their sum (store.ReportCoalesced),
// so that a healthy connection costs Redis a batch per replica per
// interval, not a report per process or call (issue 25 point 3, decision
// 0054).
//
// A report is taken only when it is a SUCCESS with no lease token and no
// retry_after hint, at the revision this replica last learned, from an
// answer of the store, was current on a closed connection with no
// throttle (a success it applied at once, or the last flush). Anything
// else, a report past the bounds, and every report of a connection the
// replica has not learned yet go to the store at once, as before; any
// other outcome reported at once makes the connection's next successes
// go at once too, until a success's answer shows it healthy again. So
// failures, hints, probes and transitions never wait, and the answer a
// taken report gets (ReportResponse.applied = COALESCED, the learned
// revision, state closed) is at most one interval and a flush old. A
// report applied at once first applies the successes held for its
// connection (settle, decision 0059): one replica's reports reach the
// store in the order they came.
type coalescer struct {
	st       coalesceStore
	log      *slog.Logger
	interval time.Duration
	timeout  time.Duration // of one batch's store calls
	maxConns int
	maxKeyed int
	// route, when set, sends each connection's batches to its owner among
	// the live replicas instead of Redis (decision 0064).
	route coalesceRoute

	mu      sync.Mutex
	entries map[connKey]*coalesceEntry
	keyed   int  // keyed reports pending, over every entry
	closed  bool // after close: every report goes at once
	stop    chan struct{}
	done    chan struct{}
}

// connKey names one connection of one tenant.
type connKey struct {
	tenant string
	id     keys.ID
}

// coalesceEntry is what a replica knows of one connection and the
// successes it holds for it.
type coalesceEntry struct {
	// healthy: rev is the revision of a closed connection with no
	// throttle, as of at (the store's clock, when) and learned (this
	// replica's).
	healthy bool
	rev     uint64
	shadow  bool
	at      time.Time
	learned time.Time
	label   string
	// pending are the batches by retry flag (a first attempt and a retry
	// count differently in the fleet window); nil when empty.
	pending [2]*coalesceBatch
	// applying, while batches taken from pending are being applied (by a
	// flush or by settle), is closed once they are.
	applying chan struct{}
	// forwardTo is the peer this replica last routed the connection's
	// batches to, at forwardedAt; settle asks it to apply them first.
	forwardTo   string
	forwardedAt time.Time
	// quiet counts the flushes in a row that found nothing held.
	quiet uint8
}

// coalesceBatch is the successes taken at one revision with one retry flag.
type coalesceBatch struct {
	rev    uint64
	retry  bool
	count  int64
	keyed  []store.KeyedCount
	keys   map[string]int64 // key → count, for a resend to this replica
	status int
	code   string
	// peer: the batch holds successes a peer routed here; it is applied
	// here, never routed on.
	peer bool
}

func newCoalescer(st coalesceStore, log *slog.Logger, interval, timeout time.Duration) *coalescer {
	return &coalescer{st: st, log: log, interval: interval, timeout: timeout, maxConns: CoalesceMaxConns,
		maxKeyed: CoalesceMaxKeyed, entries: map[connKey]*coalesceEntry{}}
}

// take holds rep for the next flush when it may be coalesced, and
// returns the answer for it; ok false: apply it at once. A keyed report
// whose key this replica holds already is a resend: answered again,
// counted once; with another count it is a key reused (errReused).
func (k *coalescer) take(c store.Conn, rep breaker.Report, now time.Time) (resp *cooldownv1.ReportResponse, ok bool, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.holding(c, rep)
	if e == nil {
		return nil, false, nil
	}
	b := e.pending[retryIndex(rep.Retry)]
	n := max(rep.Count, 1)
	if c.ReportKey != "" {
		if b != nil {
			if seen, dup := b.keys[c.ReportKey]; dup {
				if seen != n {
					return nil, true, errReused()
				}
				return e.answer(now), true, nil
			}
		}
		if k.keyed >= k.maxKeyed {
			return nil, false, nil
		}
	}
	b = e.batchFor(rep.Retry, e.rev)
	if c.ReportKey != "" {
		k.holdKeyed(b, store.KeyedCount{Key: c.ReportKey, Count: n})
	} else {
		b.count += n
	}
	b.status, b.code = rep.HTTPStatus, rep.ErrorCode
	if c.Label != "" {
		e.label = c.Label
	}
	return e.answer(now), true, nil
}

// holdable reports whether take would hold rep now, unkeyed (ReportBatch
// claims what it will hold before it takes it).
func (k *coalescer) holdable(c store.Conn, rep breaker.Report) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.holding(c, rep) != nil
}

// holding is the entry rep may be coalesced into, nil when it goes at
// once (k.mu held): a success with no lease and no hint, at the revision
// learned healthy, and no batch held at an older revision (a peer's, or
// before an answer moved it: it goes after them, settle).
func (k *coalescer) holding(c store.Conn, rep breaker.Report) *coalesceEntry {
	if rep.Outcome != breaker.OutcomeSuccess || rep.LeaseToken != "" || rep.RetryAfter > 0 {
		return nil
	}
	e := k.entries[connKey{c.Tenant, c.ID}]
	if k.closed || e == nil || !e.healthy || rep.Revision != e.rev {
		return nil
	}
	if b := e.pending[retryIndex(rep.Retry)]; b != nil && b.rev != e.rev {
		return nil
	}
	return e
}

// retryIndex is the index in coalesceEntry.pending of a retry flag.
func retryIndex(retry bool) int {
	if retry {
		return 1
	}
	return 0
}

// batchFor is e's pending batch of the retry flag, started at rev when
// there is none (k.mu held).
func (e *coalesceEntry) batchFor(retry bool, rev uint64) *coalesceBatch {
	i := retryIndex(retry)
	if e.pending[i] == nil {
		e.pending[i] = &coalesceBatch{rev: rev, retry: retry}
	}
	return e.pending[i]
}

// holdKeyed adds a keyed report to b (k.mu held). A key b holds already
// keeps its first count for a resend's check; the store counts a key once.
func (k *coalescer) holdKeyed(b *coalesceBatch, kc store.KeyedCount) {
	if b.keys == nil {
		b.keys = map[string]int64{}
	}
	if _, dup := b.keys[kc.Key]; !dup {
		b.keys[kc.Key] = kc.Count
	}
	b.keyed = append(b.keyed, kc)
	k.keyed++
}

// answer is a taken report's answer: the state the replica last learned,
// at the store's clock then plus the time since.
func (e *coalesceEntry) answer(now time.Time) *cooldownv1.ReportResponse {
	a := heldAnswer(e.rev, e.at.Add(now.Sub(e.learned)))
	a.Shadow = e.shadow
	return a
}

// heldAnswer is the answer to a success a replica held: accepted on a
// closed connection at rev, to be applied with its batch (COALESCED).
func heldAnswer(rev uint64, serverTime time.Time) *cooldownv1.ReportResponse {
	return &cooldownv1.ReportResponse{State: cooldownv1.State_STATE_CLOSED, Revision: rev, Accepted: true,
		ServerTime: timestamppb.New(serverTime), Applied: cooldownv1.ReportApplied_REPORT_APPLIED_COALESCED}
}

// learn takes the store's answer to a report applied at once: a success
// accepted on a closed connection with no throttle makes its revision the
// one successes are coalesced at; any other report, or another answer,
// makes the connection's successes go at once.
func (k *coalescer) learn(c store.Conn, rep breaker.Report, res store.ReportResult, now time.Time) {
	healthy := rep.Outcome == breaker.OutcomeSuccess && rep.RetryAfter == 0 && res.Accepted &&
		res.Phase == breaker.Closed && res.ThrottleProbability == 0
	k.mu.Lock()
	defer k.mu.Unlock()
	key := connKey{c.Tenant, c.ID}
	e := k.entries[key]
	if e == nil {
		if !healthy || k.closed || len(k.entries) >= k.maxConns {
			return
		}
		e = &coalesceEntry{}
		k.entries[key] = e
	}
	e.set(healthy, res, now)
}

// set records what an answer of the store says. A revision older than
// the one known says nothing: answers may arrive out of order.
func (e *coalesceEntry) set(healthy bool, res store.ReportResult, now time.Time) {
	if res.Revision < e.rev {
		return
	}
	e.healthy, e.rev, e.shadow, e.at, e.learned = healthy, res.Revision, res.Shadow, res.Now, now
}

// pending is how many connections and keyed reports the coalescer holds.
func (k *coalescer) pending() (conns, keyed int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.entries {
		if e.pending[0] != nil || e.pending[1] != nil {
			conns++
		}
	}
	return conns, k.keyed
}

// errReused is the error for a report whose idempotency key the replica holds for
// a report that said something else.
func errReused() error {
	return errInvalid("idempotency_key", "names a different report already applied: send a new key with each report")
}

// coalesced answers a report the replica coalesces (decision 0054); nil,
// nil: apply it at once. The Report handler's hook.
func (s cooldownService) coalesced(ctx context.Context, c store.Conn, rep breaker.Report) (*cooldownv1.ReportResponse, error) {
	if s.coalesce == nil {
		return nil, nil
	}
	resp, ok, err := s.coalesce.take(c, rep, s.now())
	if !ok {
		s.coalesce.settle(ctx, c, s.now)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.metrics.report(rep.Outcome, true)
	return resp, nil
}

// learned tells the coalescer the store's answer to a report applied at
// once. The Report handler's hook.
func (s cooldownService) learned(c store.Conn, rep breaker.Report, res store.ReportResult) {
	if s.coalesce != nil && !res.Replayed {
		s.coalesce.learn(c, rep, res, s.now())
	}
}

// StartCoalescing makes the server coalesce the success reports it is
// sent, per connection, over interval (see decision 0054); 0 or less:
// never (the default). Call it once, before serving; [Server.StopCoalescing]
// applies what it holds.
func (s *Server) StartCoalescing(interval time.Duration) {
	if interval <= 0 || s.coalesce != nil {
		return
	}
	s.coalesce = newCoalescer(s.store, s.log, interval, s.requestTO)
	s.coalesce.start(s.now)
}

// RouteCoalesced makes a coalescing server send each connection's
// batches to the one live replica that owns it (decision 0064), which
// merges the batches of every replica before they reach Redis: a
// connection then costs Redis one batch per interval, not one per replica.
// Every replica must run it with the same token. Call it after
// [Server.StartCoalescing] and before [Server.Handler] (which then serves
// PeerService).
func (s *Server) RouteCoalesced(o PeerOptions) error {
	if s.coalesce == nil {
		return errors.New("server: routing needs coalescing (StartCoalescing)")
	}
	if s.peers != nil {
		return errors.New("server: routing already started")
	}
	r, err := newRouter(s.store, s.log, o)
	if err != nil {
		return err
	}
	s.peers = r
	s.coalesce.mu.Lock()
	s.coalesce.route = r
	s.coalesce.mu.Unlock()
	r.start()
	return nil
}

// StopCoalescing stops coalescing and applies every success the server
// holds, within ctx: call it once the HTTP server has drained (after
// http.Server.Shutdown), so that no report acknowledged is lost on a
// clean stop. Reports after it are applied at once. A routing server
// first leaves its peers, then applies here what it holds.
func (s *Server) StopCoalescing(ctx context.Context) {
	if s.peers != nil {
		s.peers.close(ctx)
	}
	if s.coalesce != nil {
		s.coalesce.close(ctx, s.now)
	}
}
