package store

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/bsm/redislock"

	"github.com/cooldownd/cooldownd/internal/keys"
)

// Sweep defaults (see [Options]).
const (
	DefaultSweepInterval = 250 * time.Millisecond
	DefaultSweepLockTTL  = 5 * time.Second
	// sweepBatch is how many due connections of a tenant one round reads.
	sweepBatch = 100
	// sweepRounds bounds the rounds per tenant in one Sweep, so that one
	// tenant's backlog cannot starve the others.
	sweepRounds = 10
)

// Run sweeps on a schedule until ctx ends: every Options.SweepInterval,
// the replica that holds the sweeper lock (a redislock lock with
// Options.SweepLockTTL, kept each round) runs [Store.Sweep]; the others
// wait to take over when it lapses. Run it once per replica:
// `go st.Run(ctx)`. It returns nil when ctx ends, releasing the lock.
func (s *Store) Run(ctx context.Context) error {
	go s.watchReplicas(ctx) // with Durability: see durable.go
	tick := time.NewTicker(s.sweepEvery)
	defer tick.Stop()
	lock := s.newSweepLock()
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		lock.release(rctx)
	}()
	trouble := sweepTrouble{log: slog.Default()}
	for {
		held, err := lock.hold(ctx)
		if held {
			err = s.Sweep(ctx)
		}
		if ctx.Err() == nil {
			trouble.note(time.Now(), err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// sweepTrouble logs a failing sweeper once when it starts failing and
// once when it works again, with how long it failed — not every round
// (twice a second during a Redis outage).
type sweepTrouble struct {
	log   *slog.Logger
	since time.Time // zero: working
	count int
}

func (t *sweepTrouble) note(now time.Time, err error) {
	switch {
	case err != nil && t.since.IsZero():
		t.since, t.count = now, 1
		t.log.Warn("store: the sweeper cannot run; timed transitions wait until it can", "err", err)
	case err != nil:
		t.count++
	case !t.since.IsZero():
		t.log.Info("store: the sweeper runs again", "failed_for", now.Sub(t.since).Round(time.Millisecond).String(), "failed_rounds", t.count)
		t.since, t.count = time.Time{}, 0
	}
}

// sweepLock is one replica's claim on the sweeper lock. It has one token
// for the replica's life, and every round takes the lock with it: redislock
// takes a key that is free, and re-takes (with a fresh TTL) a key that
// holds the same token. So a round whose Redis call failed in transit (an
// i/o timeout: the refresh or take may or may not have been applied) is
// followed by one that keeps the lock, and the lock is lost only when its
// TTL ran out and another replica took it: never on one failed call, which
// with a new token would be refused by the key, still holding the old one,
// until it expired (docs/decisions/0036-the-store-answers-what-it-wrote.md).
type sweepLock struct {
	locks *redislock.Client
	ttl   time.Duration
	token string
	lock  *redislock.Lock // the last one taken, to release; nil: none
}

func (s *Store) newSweepLock() *sweepLock {
	return &sweepLock{locks: s.locks, ttl: s.sweepTTL, token: randomNonce()}
}

// hold takes or keeps the lock for another TTL and reports whether this
// replica holds it; another replica holding it is no error.
func (l *sweepLock) hold(ctx context.Context) (bool, error) {
	lock, err := l.locks.Obtain(ctx, keys.SweepLock, l.ttl, &redislock.Options{Token: l.token})
	switch {
	case errors.Is(err, redislock.ErrNotObtained):
		l.lock = nil
		return false, nil
	case err != nil:
		// Unknown: the lock may still be ours; the next round says.
		return false, err
	}
	l.lock = lock
	return true, nil
}

// release gives the lock up (when it is still this replica's).
func (l *sweepLock) release(ctx context.Context) {
	if l.lock != nil {
		_ = l.lock.Release(ctx)
	}
}

// Sweep looks once at every connection whose wake time has come, in every
// tenant: due timed transitions (an open or an override that ended) are
// applied, stamped with the instant they became due, recorded and
// published; connections whose state expired leave their tenant's index.
// Safe to run on several replicas at once (every step is idempotent); Run
// elects one.
func (s *Store) Sweep(ctx context.Context) error {
	tenants, err := s.rdb.SMembers(ctx, keys.Tenants).Result()
	if err != nil {
		return unavailable("sweep", err)
	}
	for _, t := range tenants {
		for range sweepRounds {
			n, err := s.sweepTenant(ctx, t, sweepBatch)
			if err != nil {
				return err
			}
			if n < sweepBatch {
				break
			}
		}
	}
	return nil
}

// sweepTenant looks at up to limit due connections of a tenant and
// returns how many it found.
func (s *Store) sweepTenant(ctx context.Context, tenant string, limit int) (int, error) {
	r := s.tenantOp(ctx, tenant, "due", limit)
	_ = r.int() // now
	var ids []string
	for r.err == nil && r.i < len(r.v) {
		ids = append(ids, r.str())
	}
	if r.err != nil {
		return 0, unavailable("sweep", r.err)
	}
	for _, hex := range ids {
		if err := s.look(ctx, tenant, hex); err != nil {
			return 0, err
		}
	}
	return len(ids), nil
}

// look applies what time did to one connection (get.lua) and moves its
// wake entry to its next deadline or expiry, or forgets it when its state
// is gone.
func (s *Store) look(ctx context.Context, tenant, hex string) error {
	id, err := keys.ParseID(hex)
	if err != nil {
		return s.forget(ctx, tenant, hex)
	}
	snap, _, wake, err := s.get(ctx, tenant, id, 0)
	if err != nil {
		return err
	}
	if !snap.Exists {
		return s.forget(ctx, tenant, hex)
	}
	if _, err := s.tenantDo(ctx, tenant, "resched", hex, wake); err != nil {
		return unavailable("sweep", err)
	}
	// A write between the look and the resched that set an earlier
	// deadline had its own wake entry overwritten: look again (a write
	// after this look schedules itself after the resched).
	again, _, wake2, err := s.get(ctx, tenant, id, 0)
	if err != nil {
		return err
	}
	if again.Exists && wake2 > 0 && (wake == 0 || wake2 < wake) {
		if _, err := s.tenantDo(ctx, tenant, "wake", hex, wake2); err != nil {
			return unavailable("sweep", err)
		}
	}
	return nil
}

// forget drops a gone connection from its tenant's index and wake set,
// unless a registration holds it (a create is on its way).
func (s *Store) forget(ctx context.Context, tenant, hex string) error {
	if _, err := s.tenantDo(ctx, tenant, "forget", hex); err != nil {
		return unavailable("sweep", err)
	}
	return nil
}
