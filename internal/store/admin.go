package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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
	// Events are the transitions an override or reset applied.
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
	// State is the script's encode(s), on published events only.
	State []any `json:"state"`
}

// decodeEvent reads a history entry or a published event. A published
// event carries the state after its change; the result's State is set then.
func decodeEvent(tenant, js string) (Transition, error) {
	var e eventJSON
	dec := json.NewDecoder(strings.NewReader(js))
	dec.UseNumber()
	if err := dec.Decode(&e); err != nil {
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
		// The same values a script reply carries, with JSON's number type.
		v := make([]any, len(e.State))
		for i, x := range e.State {
			v[i] = x
			if n, ok := x.(json.Number); ok {
				if v[i], err = n.Int64(); err != nil {
					return Transition{}, fmt.Errorf("store: decode event state: %w", err)
				}
			}
		}
		r := &reply{v: v}
		st, now, label := r.state()
		if r.err != nil {
			return Transition{}, fmt.Errorf("store: decode event state: %w", r.err)
		}
		t.State = &Snapshot{Tenant: tenant, ID: id, Label: label, State: st, Now: time.UnixMilli(now), Exists: true}
	}
	return t, nil
}

// Get returns a connection's state and up to history recent transitions,
// newest first. It writes nothing.
func (s *Store) Get(ctx context.Context, tenant string, id keys.ID, history int) (Snapshot, []Transition, error) {
	c := Conn{Tenant: tenant, ID: id}
	p := s.Policy(tenant)
	l := c.layout()
	r := newReply(scriptGet.Run(ctx, s.rdb, connKeys(l, p.MaxProbes), s.args(p, l, min(max(history, 0), s.history))...).Result())
	exists := r.int() == 1
	n := r.int()
	hist := make([]Transition, 0, n)
	for range n {
		js := r.str()
		if r.err != nil {
			break
		}
		t, err := decodeEvent(tenant, js)
		if err != nil {
			return Snapshot{}, nil, err
		}
		hist = append(hist, t)
	}
	st, now, label := r.state()
	if r.err != nil {
		return Snapshot{}, nil, unavailable("get", r.err)
	}
	return Snapshot{Tenant: tenant, ID: id, Label: label, State: st, Now: time.UnixMilli(now), Exists: exists}, hist, nil
}

// Force sets an operator override on a connection for d from the server
// clock's now (zero: until changed); breaker.NoOverride clears it.
func (s *Store) Force(ctx context.Context, tenant string, id keys.ID, o breaker.Override, d time.Duration, actor, reason string) (Snapshot, error) {
	return s.force(ctx, tenant, id, int(o), d.Milliseconds(), actor, reason)
}

// Reset clears a connection back to closed (a new revision, so reports
// from before stay stale).
func (s *Store) Reset(ctx context.Context, tenant string, id keys.ID, actor, reason string) (Snapshot, error) {
	return s.force(ctx, tenant, id, forceReset, 0, actor, reason)
}

func (s *Store) force(ctx context.Context, tenant string, id keys.ID, code int, d int64, actor, reason string) (Snapshot, error) {
	c := Conn{Tenant: tenant, ID: id}
	p := s.Policy(tenant)
	l := c.layout()
	r := newReply(scriptForce.Run(ctx, s.rdb, connKeys(l, p.MaxProbes), s.args(p, l, code, d, actor, reason)...).Result())
	st, now, label := r.state()
	evs := r.events()
	if r.err != nil {
		return Snapshot{}, unavailable("force", r.err)
	}
	if err := s.rdb.ZAdd(ctx, keys.Index(tenant), zmember(id)).Err(); err != nil {
		return Snapshot{}, unavailable("index", err)
	}
	return Snapshot{Tenant: tenant, ID: id, Label: label, State: st, Now: time.UnixMilli(now), Exists: true, Events: evs}, nil
}
