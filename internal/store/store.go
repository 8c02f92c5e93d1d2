package store

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bsm/redislock"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

var (
	// ErrLeaseNotHeld is returned when a lease token names no live lease.
	ErrLeaseNotHeld = errors.New("store: lease not held")
	// ErrTooManyConnections is returned when a report would create a
	// connection beyond the tenant's cap.
	ErrTooManyConnections = errors.New("store: too many connections for this tenant")
	// ErrUnavailable wraps every failure to reach Redis in time (see
	// unavailable in errors.go; other failures wrap [ErrInternal]).
	ErrUnavailable = errors.New("store: redis unavailable")
)

// Options configure a [Store]. The zero value is usable: default policy,
// 24 h idle expiry, 50 transitions of history.
type Options struct {
	// Policy is the breaker policy (zero: breaker.DefaultPolicy()).
	Policy *breaker.Policy
	// PolicyFor, when set, picks the policy of a tenant's connection by
	// its label (empty: the tenant's own); it overrides Policy. Every
	// policy it returns must be valid, and MaxProbes must not depend on
	// the label.
	PolicyFor func(tenant, label string) breaker.Policy
	// IdleTTL is how long an untouched connection's keys live (zero: 24 h):
	// at least this long after its last write. A healthy connection's
	// successes refresh it only when less than IdleTTL is left, to 9/8 of
	// it (report_fast.lua), so its keys may live up to 9/8 IdleTTL.
	IdleTTL time.Duration
	// History is how many transitions each connection keeps (zero: 50).
	History int
	// MaxConnsPerTenant caps each tenant's live connections (zero: no cap).
	MaxConnsPerTenant int
	// SweepInterval is how often [Store.Run] sweeps due timed transitions
	// (zero: [DefaultSweepInterval], 250 ms): an open or override that ends
	// is published at most about this late when nobody calls Admit.
	SweepInterval time.Duration
	// SweepLockTTL is the sweeper lock's time to live (zero:
	// [DefaultSweepLockTTL], 5 s): how long the replicas wait to take over
	// from a sweeper that died. It must exceed SweepInterval.
	SweepLockTTL time.Duration
	// Durability makes reports that open a connection wait for replicas
	// (zero: asynchronous replication; see durable.go).
	Durability Durability
	// ReportKeyTTL is how long a report's idempotency key remembers its
	// answer (zero: [DefaultReportKeyTTL], 2 min; see [Conn.ReportKey]).
	ReportKeyTTL time.Duration
	// Clock, for tests only, replaces Redis TIME as the scripts' clock.
	Clock func() time.Time
	// Nonce, for tests only, replaces the random lease-token nonce.
	Nonce func() string
	// Jitter, for tests only, replaces the random jitter (millionths).
	Jitter func() int64
	// Draw, for tests only, replaces the adaptive throttle's uniform draw
	// (millionths, one per Admit candidate).
	Draw func() int64
}

// Store is cooldownd's Redis state. It is safe for concurrent use.
type Store struct {
	rdb       RedisClient
	cluster   clusterClient // rdb as a Cluster client; nil on one master (see RedisClient)
	locks     *redislock.Client
	policy    breaker.Policy
	policyFor func(tenant, label string) breaker.Policy
	idle      time.Duration
	history   int
	clock     func() time.Time
	nonce     func() string
	jitter    func() int64
	draw      func() int64
	maxConns  int
	// sweepEvery and sweepTTL drive Run (see Options).
	sweepEvery, sweepTTL time.Duration
	durable              Durability      // see durable.go
	shortUntil           shortOfReplicas // durable.go: until when (unix ns) reports do not wait for replicas
	reportKeyTTL         string          // ms, see Options.ReportKeyTTL
	argCache             sync.Map        // breaker.Policy → string, see policyArg
	hub                  hub             // shared watch subscriptions, one per tenant
}

// New returns a Store on rdb: a *redis.Client (single, or a Sentinel
// failover client), a *redis.ClusterClient, or anything else with the
// [RedisClient] commands. It validates the policy, and that a client given
// Options.Durability can hold a connection for WAIT (see [RedisClient]).
func New(rdb RedisClient, o Options) (*Store, error) {
	cluster, _ := rdb.(clusterClient)
	s := &Store{rdb: rdb, cluster: cluster, locks: redislock.New(rdb), policy: breaker.DefaultPolicy(), policyFor: o.PolicyFor,
		idle: o.IdleTTL, history: o.History, clock: o.Clock, nonce: o.Nonce, jitter: o.Jitter, draw: o.Draw, maxConns: o.MaxConnsPerTenant,
		sweepEvery: o.SweepInterval, sweepTTL: o.SweepLockTTL, durable: o.Durability}
	if o.Policy != nil {
		s.policy = *o.Policy
	}
	if err := s.policy.Validate(); err != nil {
		return nil, err
	}
	if s.idle <= 0 {
		s.idle = 24 * time.Hour
	}
	if s.history <= 0 {
		s.history = 50
	}
	if s.sweepEvery <= 0 {
		s.sweepEvery = DefaultSweepInterval
	}
	if s.sweepTTL <= 0 {
		s.sweepTTL = DefaultSweepLockTTL
	}
	keyTTL := o.ReportKeyTTL
	if keyTTL <= 0 {
		keyTTL = DefaultReportKeyTTL
	}
	s.reportKeyTTL = strconv.FormatInt(max(keyTTL.Milliseconds(), 1), 10)
	if _, ok := rdb.(connClient); s.durable.Replicas > 0 && cluster == nil && !ok {
		return nil, fmt.Errorf("store: durability waits on a connection of the client's own (a *redis.Client's Conn, or a *redis.ClusterClient's MasterForKey), which %T has not", rdb)
	}
	if s.sweepTTL <= s.sweepEvery {
		return nil, fmt.Errorf("store: sweep lock TTL (%s) must exceed the sweep interval (%s)", s.sweepTTL, s.sweepEvery)
	}
	if s.nonce == nil {
		s.nonce = randomNonce
	}
	if s.jitter == nil {
		s.jitter = randomJitter
	}
	if s.draw == nil {
		s.draw = func() int64 { return mrand.Int64N(1_000_000) }
	}
	return s, nil
}

// Policy returns a tenant's policy.
func (s *Store) Policy(tenant string) breaker.Policy {
	if s.policyFor != nil {
		return s.policyFor(tenant, "")
	}
	return s.policy
}

// connPolicy returns the policy of one connection, by its label.
func (s *Store) connPolicy(c Conn) breaker.Policy {
	if s.policyFor != nil {
		return s.policyFor(c.Tenant, c.Label)
	}
	return s.policy
}

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return unavailable("ping", err)
	}
	return nil
}

func randomNonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func randomJitter() int64 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return int64(uint32(b[0])|uint32(b[1])<<8|uint32(b[2])<<16|uint32(b[3])<<24) % 1_000_000
}

// tokenGranted reads the grant time out of a lease token.
func tokenGranted(tok string) int64 {
	parts := strings.SplitN(tok, ".", 4)
	if len(parts) != 4 {
		return 0
	}
	n, _ := strconv.ParseInt(parts[2], 10, 64)
	return n
}

// tokenSlot reads the slot out of a lease token, -1 when malformed.
func tokenSlot(tok string, maxProbes int) int {
	parts := strings.SplitN(tok, ".", 4)
	if len(parts) != 4 {
		return -1
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n < 0 || n >= maxProbes {
		return -1
	}
	return n
}
