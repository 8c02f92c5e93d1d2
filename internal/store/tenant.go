package store

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/cooldownd/cooldownd/internal/keys"
)

// registerGrace is how long a registration lets its connection's state be
// created (see may_create in lua/prelude/lease.lua): far longer than one request, so
// that no sweep or prune forgets a connection whose create is on its way.
const registerGrace = 10 * time.Second

// capSweep is how many due entries a create at the tenant's cap sweeps
// before it gives up: expired connections stop counting without walking
// the index.
const capSweep = 8

// tenantOp runs one op of tenant.lua on a tenant's index and wake set and
// returns its reply.
func (s *Store) tenantOp(ctx context.Context, tenant, op string, args ...any) *reply {
	a := make([]any, 0, 2+len(args))
	a = append(a, op, s.nowArg())
	a = append(a, args...)
	return newReply(scriptTenant.Run(ctx, s.rdb, []string{keys.Index(tenant), keys.Wake(tenant)}, a...).Result())
}

// tenantDo runs one op of tenant.lua and returns its first value.
func (s *Store) tenantDo(ctx context.Context, tenant, op string, args ...any) (int64, error) {
	r := s.tenantOp(ctx, tenant, op, args...)
	code := r.int()
	return code, r.err
}

// nowArg is ARGV's now: the test clock's Unix ms, or 0 for Redis TIME.
func (s *Store) nowArg() string {
	if s.clock != nil {
		return strconv.FormatInt(s.clock().UnixMilli(), 10)
	}
	return "0"
}

// create runs a writing connection script, try, that may create the state.
// try first runs with registeredAt 0; when the script answers that the
// connection does not exist and is not registered, create registers it in
// its tenant's index within the cap and runs try again with the
// registration's time. Index first, state second: a state never exists
// without its index entry. May return [ErrTooManyConnections].
func (s *Store) create(ctx context.Context, c Conn, try func(registeredAt int64) (status int64, err error)) error {
	status, err := try(0)
	for range 3 {
		if err != nil || status == statusApplied {
			return err
		}
		at, rerr := s.register(ctx, c)
		if rerr != nil {
			return rerr
		}
		status, err = try(at)
	}
	if err != nil || status == statusApplied {
		return err
	}
	return fmt.Errorf("%w: create: registered three times and still not created", ErrInternal)
}

// register indexes a connection before its state is created. At the cap it
// first sweeps a few due entries of the tenant (expired connections leave
// the index there), then tries once more.
func (s *Store) register(ctx context.Context, c Conn) (int64, error) {
	// The sweeper finds a tenant's wake set through this set.
	if err := s.rdb.SAdd(ctx, keys.Tenants, c.Tenant).Err(); err != nil {
		return 0, unavailable("register", err)
	}
	for attempt := 0; ; attempt++ {
		r := s.tenantOp(ctx, c.Tenant, "register", c.ID.String(), s.maxConns, registerGrace.Milliseconds())
		code, at := r.int(), r.int()
		if r.err != nil {
			return 0, unavailable("register", r.err)
		}
		if code == tenantOK {
			return at, nil
		}
		if attempt == 1 {
			return 0, ErrTooManyConnections
		}
		if _, err := s.sweepTenant(ctx, c.Tenant, capSweep); err != nil {
			return 0, err
		}
	}
}

// mayExist returns [ErrTooManyConnections] when c does not exist and its
// tenant is at its cap: Admit and Report agree on the cap.
func (s *Store) mayExist(ctx context.Context, c Conn) error {
	for attempt := 0; ; attempt++ {
		r := s.tenantOp(ctx, c.Tenant, "check", c.ID.String(), s.maxConns)
		code, _ := r.int(), r.int()
		if r.err != nil {
			return unavailable("admit", r.err)
		}
		if code == tenantOK {
			return nil
		}
		if attempt == 1 {
			return ErrTooManyConnections
		}
		if _, err := s.sweepTenant(ctx, c.Tenant, capSweep); err != nil {
			return err
		}
	}
}

// scheduled tells the tenant's wake set when a connection that just
// changed must be looked at next (its next deadline or expiry), so that
// its timed transitions are applied and published on time. It runs only
// after transitions; a failure is logged, not returned (the change itself
// was applied; the connection's previous wake entry still brings the
// sweeper to it, later).
func (s *Store) scheduled(ctx context.Context, tenant string, l keys.Layout, events int, wake int64) {
	if events == 0 || wake <= 0 {
		return
	}
	if _, err := s.tenantDo(ctx, tenant, "wake", l.ID.String(), wake); err != nil {
		slog.Warn("store: could not schedule a connection's next deadline; the sweeper will see it late",
			"tenant", tenant, "err", err)
	}
}
