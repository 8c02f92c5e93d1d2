package store

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
)

// DefaultReplicaTimeout is how long a durable report waits for its
// replicas unless Durability.Timeout says otherwise.
const DefaultReplicaTimeout = 50 * time.Millisecond

// Durability makes the reports that open a connection survive a failover.
// Redis replicates asynchronously: a write the master acknowledged can be
// lost when a replica is promoted before it received it (a Sentinel
// failover lost 18 of 572 acknowledged reports in its ~1 s window). With
// Replicas set, a report whose transitions open the connection is answered
// only once that many replicas acknowledged it (WAIT, on the connection
// that ran the script: WAIT cannot run inside a script). Other reports,
// and every Admit, are not delayed. See docs/reliability.md.
type Durability struct {
	// Replicas is how many replicas must acknowledge an opening report
	// (zero: none, asynchronous replication).
	Replicas int
	// Timeout bounds the wait (zero: [DefaultReplicaTimeout]). A report
	// not acknowledged in time fails with [ErrUnavailable]; its transition
	// is applied on the master, and a retry with the same revision is safe
	// (a hint merges by max, a stale revision moves nothing).
	Timeout time.Duration
}

// durableConn returns what a report's script runs on: with Durability on
// and a report that may open the connection, one connection to the
// connection's master held for the report (release returns it), so that
// WAIT follows the script on the same connection.
func (s *Store) durableConn(ctx context.Context, l keys.Layout, rep breaker.Report) (sc processor, release func()) {
	if s.durable.Replicas <= 0 || !mayOpen(rep) {
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

// awaitReplicas waits, with Durability on and when events open the
// connection, until the replicas acknowledged what sc wrote.
func (s *Store) awaitReplicas(ctx context.Context, sc processor, events []breaker.Event) error {
	if s.durable.Replicas <= 0 || !opens(events) {
		return nil
	}
	conn, ok := sc.(*redis.Conn)
	if !ok {
		// The report cannot open the connection by itself (see mayOpen):
		// an open the script applied on the way (a forced-closed override
		// that ended over an open breaker) is a timed transition, not this
		// report's to wait for.
		return nil
	}
	timeout := s.durable.Timeout
	if timeout <= 0 {
		timeout = DefaultReplicaTimeout
	}
	n, err := conn.Wait(ctx, s.durable.Replicas, timeout).Result()
	if err != nil {
		return unavailable("wait for replicas", err)
	}
	if n < int64(s.durable.Replicas) {
		return fmt.Errorf("%w: report applied on the master but acknowledged by %d of %d replicas within %s; retry",
			ErrUnavailable, n, s.durable.Replicas, timeout)
	}
	return nil
}

// mayOpen reports whether a report can open a connection (see
// breaker.State.Report): a failure trips or cools it, any report with a
// Retry-After cools it; a success, a client error or a cancel without one
// never opens it.
func mayOpen(rep breaker.Report) bool {
	switch rep.Outcome {
	case breaker.OutcomeSuccess, breaker.OutcomeClientError, breaker.OutcomeCanceled:
		return rep.RetryAfter > 0 && rep.Outcome != breaker.OutcomeCanceled
	}
	return true
}

// opens reports whether a transition opened the connection.
func opens(events []breaker.Event) bool {
	for _, e := range events {
		if e.To == breaker.Open {
			return true
		}
	}
	return false
}
