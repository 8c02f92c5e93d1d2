package store

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/keys"
)

// DefaultReplicaTimeout is how long a durable report waits for its
// replicas unless Durability.Timeout says otherwise.
const DefaultReplicaTimeout = 50 * time.Millisecond

// DefaultReplicaRecheck is how long, after a WAIT came up short, durable
// reports answer NotReplicated at once instead of waiting, unless
// Durability.Recheck says otherwise.
const DefaultReplicaRecheck = 500 * time.Millisecond

// Replication says whether a report's transitions reached the replicas
// Durability waits for (ReportResponse.durability).
type Replication uint8

const (
	// ReplicationNone: the report made no transition, or Durability is off.
	ReplicationNone Replication = iota
	// Replicated: the replicas acknowledged the transitions.
	Replicated
	// NotReplicated: the transitions are applied on the master, which has
	// too few replicas: a failover before they catch up may lose them. The
	// answer stands: a resend changes nothing.
	NotReplicated
)

// Durability makes the reports that move a connection survive a failover.
// Redis replicates asynchronously: a write the master acknowledged can be
// lost when a replica is promoted before it received it (a Sentinel
// failover lost 18 of 572 acknowledged reports in its ~1 s window). With
// Replicas set, a report whose script made a transition (opened, closed,
// settled a probe) is answered only once that many replicas acknowledged
// it (WAIT, on the connection that ran the script: WAIT cannot run inside
// a script), or once the wait timed out, with [NotReplicated]. A report
// that made no transition (a healthy success, a denial's report) never
// waits. See docs/reliability.md and decision 0047.
type Durability struct {
	// Replicas is how many replicas must acknowledge a transition (zero:
	// none, asynchronous replication).
	Replicas int
	// Timeout bounds the wait (zero: [DefaultReplicaTimeout]). A report
	// not acknowledged in time is answered [NotReplicated]: its transition
	// is applied on the master.
	Timeout time.Duration
	// Recheck is how long after a wait came up short the next reports do
	// not wait (zero: [DefaultReplicaRecheck]): they are answered
	// NotReplicated at once, and one report per Recheck waits again to see
	// whether the replicas are back. Without it, every report would wait
	// out Timeout while the master has no replica (after a failover,
	// until Sentinel gives the new master one).
	Recheck time.Duration
}

// timeout is Timeout, or DefaultReplicaTimeout when unset.
func (d Durability) timeout() time.Duration {
	if d.Timeout > 0 {
		return d.Timeout
	}
	return DefaultReplicaTimeout
}

// durableConn returns what a report's or an Admit's script runs on: with
// Durability on, one connection to the connection's master held for the
// call (release returns it), so that WAIT follows the script on the same
// connection. Holding it costs no round trip: the script is still the
// only command of a call that wrote nothing.
func (s *Store) durableConn(ctx context.Context, l keys.Layout) (sc processor, release func()) {
	if s.durable.Replicas <= 0 {
		return s.rdb, func() {}
	}
	node, ok := s.rdb.(connClient) // single, and Sentinel (a failover client)
	if s.cluster != nil {
		m, err := s.cluster.MasterForKey(ctx, l.State())
		if err != nil {
			// The cluster's layout is unknown: the script will most likely
			// fail too; if it does not, this report is not waited for.
			slog.Warn("store: no master for a durable report; it is not waited for", "err", err)
			return s.rdb, func() {}
		}
		node, ok = m, true
	}
	if !ok {
		return s.rdb, func() {}
	}
	conn := node.Conn()
	return conn, func() { _ = conn.Close() }
}

// wallNow is the clock of the replica recheck: the store's test clock when
// set, else the wall clock.
func (s *Store) wallNow() time.Time {
	if s.clock != nil {
		return s.clock()
	}
	return time.Now()
}

// awaitReplicas waits, with Durability on and when the call wrote (a
// report's transition; an Admit's transition or probe lease), until the
// replicas acknowledged what sc wrote, or the timeout: then the answer is
// NotReplicated, and for Recheck the next reports and Admits do not wait
// at all (one of them, after Recheck, waits again). An error means the
// WAIT itself failed (the connection broke): whether the write is on any
// replica is unknown.
//
// A call that wrote nothing never waits; it is answered NotReplicated too
// while the replicas are short (a WAIT came up short and none has been
// acknowledged since) or when what it read is fresh (see freshWrite):
// what it read may be a write a failover loses (in a manual failover the
// demoted master serves the writes its promoted replica never got until
// the clients move), so its answer is no firmer than the writes'.
func (s *Store) awaitReplicas(ctx context.Context, sc processor, wrote, fresh bool) (Replication, error) {
	if s.durable.Replicas <= 0 {
		return ReplicationNone, nil
	}
	if !wrote {
		if fresh || s.shortUntil.Load() != 0 {
			return NotReplicated, nil
		}
		return ReplicationNone, nil
	}
	conn, ok := sc.(*redis.Conn)
	if !ok {
		return ReplicationNone, nil // no master to wait on (see durableConn)
	}
	recheck := s.durable.Recheck
	if recheck <= 0 {
		recheck = DefaultReplicaRecheck
	}
	now := s.wallNow()
	if until := s.shortUntil.Load(); until != 0 {
		if now.UnixNano() < until || !s.shortUntil.CompareAndSwap(until, now.Add(recheck).UnixNano()) {
			return NotReplicated, nil // short of replicas a moment ago; another report rechecks
		}
	}
	timeout := s.durable.timeout()
	n, err := conn.Wait(ctx, s.durable.Replicas, timeout).Result()
	if err != nil {
		return ReplicationNone, unavailable("wait for replicas", err)
	}
	if n < int64(s.durable.Replicas) {
		if s.shortUntil.Swap(s.wallNow().Add(recheck).UnixNano()) == 0 {
			slog.Warn("store: transitions are applied on the master only: too few replicas acknowledge them; answered NOT_REPLICATED",
				"acknowledged", n, "want", s.durable.Replicas, "timeout", timeout)
		}
		return NotReplicated, nil
	}
	if s.shortUntil.Swap(0) != 0 {
		slog.Info("store: replicas acknowledge transitions again", "want", s.durable.Replicas)
	}
	return Replicated, nil
}

// freshWrite reports, with Durability on, whether a call that read a
// state last moved at writtenAt (a transition or a probe grant, Unix ms)
// answers at now (the same script clock) within the time its writer may
// still be waiting for the replicas, and the other processes' replica
// poll may not have seen them short: two WAIT timeouts and two polls. A
// call that wrote nothing cannot WAIT for another call's write (WAIT
// covers the connection's own writes) and a denial must not wait, so such
// an answer is NotReplicated. Without it, a call whose script ran just
// after a transition's, answered before that transition's WAIT came up
// short, was answered as if firm, and a failover then lost what it had
// read (a chaos run's stale accepts: decision 0057).
func (s *Store) freshWrite(now, writtenAt int64) bool {
	if s.durable.Replicas <= 0 || writtenAt <= 0 {
		return false
	}
	return now-writtenAt < (2*s.durable.timeout() + 2*replicaPoll).Milliseconds()
}

// shortOfReplicas is when (unix ns) the latest WAIT that came up short
// stops keeping reports from waiting; zero: the replicas kept up.
type shortOfReplicas = atomic.Int64

// replicaPoll is how often, with Durability on one master (single Redis,
// Sentinel), [Store.Run] reads the master's connected replicas: from a
// promotion until then, a read of a write made after it is answered as if
// firm by a process that has not seen a WAIT come up short (at 100 ms a
// chaos run in three still read one; INFO replication costs Redis
// microseconds).
const replicaPoll = 25 * time.Millisecond

// watchReplicas reads, every replicaPoll until ctx ends, how many replicas
// the master has connected, and when fewer than Durability waits for it
// marks the replicas short (see pollReplicas). A WAIT finds it out only
// when this process writes; in a manual Sentinel failover the promoted
// replica leaves the master at once, and a process that has not written
// since would answer reads of writes the failover loses as if firm (other
// processes' writes, answered NOT_REPLICATED to them).
func (s *Store) watchReplicas(ctx context.Context) {
	if s.durable.Replicas <= 0 || s.cluster != nil {
		return
	}
	t := time.NewTicker(replicaPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.pollReplicas(ctx)
	}
}

// pollReplicas reads the master's connected replicas once (INFO
// replication) and, when there are fewer than Durability waits for, marks
// the replicas short as a WAIT that came up short would: the next writing
// calls are answered NOT_REPLICATED without a WAIT until Recheck, then one
// waits and the first acknowledged one ends it, and calls that wrote
// nothing are answered NOT_REPLICATED meanwhile. It never clears the mark:
// only an acknowledged WAIT does. An error changes nothing.
func (s *Store) pollReplicas(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, replicaPoll)
	defer cancel()
	cmd := redis.NewStringCmd(pctx, "info", "replication")
	if s.rdb.Process(pctx, cmd) != nil {
		return
	}
	n := -1
	for _, line := range strings.Split(cmd.Val(), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	if n < 0 || n >= s.durable.Replicas {
		return
	}
	recheck := s.durable.Recheck
	if recheck <= 0 {
		recheck = DefaultReplicaRecheck
	}
	if s.shortUntil.CompareAndSwap(0, s.wallNow().Add(recheck).UnixNano()) {
		slog.Warn("store: the master has too few replicas connected; answers are NOT_REPLICATED until one acknowledges",
			"connected", n, "want", s.durable.Replicas)
	}
}
