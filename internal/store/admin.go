package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
)

// Snapshot is a connection's state as of Now, with what time alone does
// (expired opens, leases and overrides) applied.
type Snapshot struct {
	Tenant string
	ID     keys.ID
	Label  string
	State  breaker.State
	Now    time.Time
	// Exists is false for a connection never reported on.
	Exists bool
	// Events are the transitions the call applied (an override or reset,
	// or a timed transition a reader found due).
	Events []breaker.Event
}

// Transition is one recorded state change.
type Transition struct {
	Tenant string
	ID     keys.ID
	breaker.Event
	// State is the connection's state just after the change, on
	// transitions from Watch (nil on history entries).
	State *Snapshot
}

type eventJSON struct {
	ID     string `json:"id"`
	At     int64  `json:"at"`
	From   int    `json:"from"`
	To     int    `json:"to"`
	Cause  int    `json:"cause"`
	Rev    uint64 `json:"rev"`
	Actor  string `json:"actor"`
	Reason string `json:"reason"`
	// State is the script's state_table(s), on published events only.
	State *stateJSON `json:"state"`
}

// decodeEvent reads a history entry or a published event. A published
// event carries the state after its change; the result's State is set then.
func decodeEvent(tenant, js string) (Transition, error) {
	var e eventJSON
	if err := json.Unmarshal([]byte(js), &e); err != nil {
		return Transition{}, fmt.Errorf("store: decode event: %w", err)
	}
	id, err := keys.ParseID(e.ID)
	if err != nil {
		return Transition{}, fmt.Errorf("store: decode event: %w", err)
	}
	t := Transition{Tenant: tenant, ID: id, Event: breaker.Event{
		At: e.At, From: breaker.Phase(e.From), To: breaker.Phase(e.To), Cause: breaker.Cause(e.Cause),
		Revision: e.Rev, Actor: e.Actor, Reason: e.Reason,
	}}
	if e.State != nil {
		st, now, label := e.State.state()
		t.State = &Snapshot{Tenant: tenant, ID: id, Label: label, State: st, Now: time.UnixMilli(now), Exists: true}
	}
	return t, nil
}

// Get returns a connection's state and up to history recent transitions,
// newest first. It applies a timed transition that is due (stamped with
// the instant it became due, recorded and published), so that the state
// it shows is always one the history holds; otherwise it writes nothing.
func (s *Store) Get(ctx context.Context, tenant string, id keys.ID, history int) (Snapshot, []Transition, error) {
	snap, hist, _, err := s.get(ctx, tenant, id, min(max(history, 0), s.history))
	return snap, hist, err
}

// get runs get.lua; wake is when the connection needs looking at next (0
// when it does not exist or never will).
func (s *Store) get(ctx context.Context, tenant string, id keys.ID, history int) (Snapshot, []Transition, int64, error) {
	c := Conn{Tenant: tenant, ID: id}
	p := s.Policy(tenant)
	l := c.layout()
	r := newReply(scriptGet.Run(ctx, s.rdb, connKeys(l), s.args(p, l, history)...).Result())
	snap, hist, wake, evs, err := decodeGet(tenant, id, r)
	if err != nil {
		return Snapshot{}, nil, 0, err
	}
	s.scheduled(ctx, tenant, l, len(evs), wake)
	return snap, hist, wake, nil
}

// decodeGet reads GET_REPLY (get.lua).
func decodeGet(tenant string, id keys.ID, r *reply) (Snapshot, []Transition, int64, []breaker.Event, error) {
	g := r.getReply()
	if r.err != nil {
		return Snapshot{}, nil, 0, nil, unavailable("get", r.err)
	}
	hist := make([]Transition, 0, len(g.History))
	for _, js := range g.History {
		t, err := decodeEvent(tenant, js)
		if err != nil {
			return Snapshot{}, nil, 0, nil, fmt.Errorf("%w: get: %w", ErrInternal, err)
		}
		hist = append(hist, t)
	}
	snap := Snapshot{Tenant: tenant, ID: id, Label: g.State.Label, State: g.State.State, Now: time.UnixMilli(g.State.Now),
		Exists: g.Exists, Events: g.Events}
	return snap, hist, g.Wake, g.Events, nil
}

// Force sets an operator override on a connection for d from the server
// clock's now (zero: until changed); breaker.NoOverride clears it, and
// changes nothing when there is none (no transition, no new revision; a
// connection that does not exist stays so, Snapshot.Exists false). Forcing
// a connection that does not exist creates it within the tenant's cap
// (may return [ErrTooManyConnections]).
func (s *Store) Force(ctx context.Context, tenant string, id keys.ID, o breaker.Override, d time.Duration, actor, reason string) (Snapshot, error) {
	return s.force(ctx, tenant, id, int(o), d.Milliseconds(), actor, reason)
}

// Reset clears a connection back to closed (a new revision, so reports
// from before stay stale). May return [ErrTooManyConnections].
func (s *Store) Reset(ctx context.Context, tenant string, id keys.ID, actor, reason string) (Snapshot, error) {
	return s.force(ctx, tenant, id, forceReset, 0, actor, reason)
}

func (s *Store) force(ctx context.Context, tenant string, id keys.ID, code int, d int64, actor, reason string) (Snapshot, error) {
	c := Conn{Tenant: tenant, ID: id}
	p := s.Policy(tenant)
	l := c.layout()
	var snap Snapshot
	var wake int64
	err := s.create(ctx, c, func(registeredAt int64) (int64, error) {
		r := newReply(scriptForce.run(ctx, s.rdb, connKeys(l), s.args(p, l, code, d, actor, reason,
			registeredAt, registerGrace.Milliseconds())...).Result())
		f := r.forceReply()
		if r.err != nil {
			return 0, unavailable("force", r.err)
		}
		wake = f.Wake
		snap = Snapshot{Tenant: tenant, ID: id, Label: f.State.Label, State: f.State.State, Now: time.UnixMilli(f.State.Now),
			Exists: f.Exists, Events: f.Events}
		return f.Status, nil
	})
	if err != nil {
		return Snapshot{}, err
	}
	s.scheduled(ctx, tenant, l, len(snap.Events), wake)
	return snap, nil
}
