package store

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/keys"
)

func zmember(id keys.ID) redis.Z { return redis.Z{Score: 0, Member: id.String()} }

// List returns up to limit of a tenant's connections with ids after the
// given one (zero ID: from the start), ordered by id, and whether more
// follow. It reads the tenant's index (never SCAN) and drops index entries
// whose connection has expired.
func (s *Store) List(ctx context.Context, tenant string, after string, limit int) ([]Snapshot, bool, error) {
	idx := keys.Index(tenant)
	lo := "-"
	if after != "" {
		lo = "(" + after
	}
	ids, err := s.rdb.ZRangeByLex(ctx, idx, &redis.ZRangeBy{Min: lo, Max: "+", Count: int64(limit + 1)}).Result()
	if err != nil {
		return nil, false, unavailable("list", err)
	}
	more := len(ids) > limit
	if more {
		ids = ids[:limit]
	}
	p := s.Policy(tenant)
	cmds, err := s.pipeGet(ctx, tenant, ids, p.MaxProbes, false)
	if err != nil && strings.Contains(err.Error(), "NOSCRIPT") {
		cmds, err = s.pipeGet(ctx, tenant, ids, p.MaxProbes, true)
	}
	if err != nil {
		return nil, false, unavailable("list", err)
	}
	out := make([]Snapshot, 0, len(ids))
	var gone []any
	for i, cmd := range cmds {
		id, perr := keys.ParseID(ids[i])
		if perr != nil {
			gone = append(gone, ids[i])
			continue
		}
		r := newReply(cmd.Result())
		exists := r.int() == 1
		_ = r.int() // no history requested
		st, now, label := r.state()
		if r.err != nil {
			return nil, false, unavailable("list", r.err)
		}
		if !exists {
			gone = append(gone, ids[i])
			continue
		}
		out = append(out, Snapshot{Tenant: tenant, ID: id, Label: label, State: st, Now: time.UnixMilli(now), Exists: true})
	}
	if err := s.prune(ctx, tenant, gone); err != nil {
		return nil, false, err
	}
	return out, more, nil
}

// prune removes index entries whose connection state has expired. A
// Report may recreate one of them meanwhile (its index insert finds the
// entry still there and does nothing); so after removing, prune checks
// the states again and puts back any that exist. Together with Report's
// create-then-insert order, one side always sees the other.
func (s *Store) prune(ctx context.Context, tenant string, ids []any) error {
	if len(ids) == 0 {
		return nil
	}
	idx := keys.Index(tenant)
	if err := s.rdb.ZRem(ctx, idx, ids...).Err(); err != nil {
		return unavailable("prune index", err)
	}
	pipe := s.rdb.Pipeline()
	exists := make([]*redis.IntCmd, len(ids))
	for i, v := range ids {
		hex, _ := v.(string)
		id, err := keys.ParseID(hex)
		if err != nil {
			continue // a malformed entry has no state
		}
		exists[i] = pipe.Exists(ctx, keys.Layout{Tenant: tenant, ID: id}.State())
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return unavailable("prune index", err)
	}
	var back []redis.Z
	for i, cmd := range exists {
		if cmd != nil && cmd.Val() == 1 {
			hex, _ := ids[i].(string)
			back = append(back, redis.Z{Member: hex})
		}
	}
	if len(back) > 0 {
		if err := s.rdb.ZAdd(ctx, idx, back...).Err(); err != nil {
			return unavailable("prune index", err)
		}
	}
	return nil
}

// pruneAll walks a tenant's whole index in pages and prunes the entries
// whose connection has expired. It runs when the tenant's cap is reached,
// so that expired connections never count against it.
func (s *Store) pruneAll(ctx context.Context, tenant string) error {
	const page = 500
	idx := keys.Index(tenant)
	lo := "-"
	for {
		ids, err := s.rdb.ZRangeByLex(ctx, idx, &redis.ZRangeBy{Min: lo, Max: "+", Count: page}).Result()
		if err != nil {
			return unavailable("prune index", err)
		}
		if len(ids) == 0 {
			return nil
		}
		pipe := s.rdb.Pipeline()
		exists := make([]*redis.IntCmd, len(ids))
		for i, hex := range ids {
			id, _ := keys.ParseID(hex) // a malformed entry reads as missing
			exists[i] = pipe.Exists(ctx, keys.Layout{Tenant: tenant, ID: id}.State())
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return unavailable("prune index", err)
		}
		var gone []any
		for i, cmd := range exists {
			if cmd.Val() == 0 {
				gone = append(gone, ids[i])
			}
		}
		if err := s.prune(ctx, tenant, gone); err != nil {
			return err
		}
		if len(ids) < page {
			return nil
		}
		lo = "(" + ids[len(ids)-1]
	}
}

func (s *Store) pipeGet(ctx context.Context, tenant string, ids []string, maxProbes int, full bool) ([]*redis.Cmd, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(ids))
	for i, hex := range ids {
		id, _ := keys.ParseID(hex) // a bad entry reads an empty state and is pruned
		l := keys.Layout{Tenant: tenant, ID: id}
		ks, args := connKeys(l, maxProbes), s.args(s.Policy(tenant), l, 0)
		if full {
			cmds[i] = scriptGet.Eval(ctx, pipe, ks, args...)
		} else {
			cmds[i] = scriptGet.EvalSha(ctx, pipe, ks, args...)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	_, err := pipe.Exec(ctx)
	return cmds, err
}

// Count returns how many connections a tenant's index holds (including
// recently expired ones that a List has not pruned yet).
func (s *Store) Count(ctx context.Context, tenant string) (int64, error) {
	n, err := s.rdb.ZCard(ctx, keys.Index(tenant)).Result()
	if err != nil {
		return 0, unavailable("count", err)
	}
	return n, nil
}
