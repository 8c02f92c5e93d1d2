package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/keys"
)

// maxPrunedPages bounds how many pages in a row whose index entries had all
// expired one [Store.List] reads past.
const maxPrunedPages = 100

// List returns up to limit (at least 1) of a tenant's connections with ids
// after the given one (empty: from the start), ordered by id, and whether
// more follow; when more do, the page holds at least one connection, so
// the next page starts after its last id. It reads the tenant's index
// (never SCAN) and forgets index entries whose connection has expired (see
// forget in tenant.lua: never one whose create is on its way). A page
// whose entries had all expired is read past: its entries are forgotten,
// so the next read from the same place makes progress. After
// maxPrunedPages such pages in a row (tens of thousands of expired
// connections the sweeper has not caught up with) it fails with
// [ErrUnavailable]: a retry goes on where it stopped.
func (s *Store) List(ctx context.Context, tenant string, after string, limit int) ([]Snapshot, bool, error) {
	if limit < 1 {
		return nil, false, fmt.Errorf("store: list limit %d, want at least 1", limit)
	}
	for range maxPrunedPages {
		snaps, more, err := s.readPage(ctx, tenant, after, limit)
		if err != nil || len(snaps) > 0 || !more {
			return snaps, more, err
		}
	}
	return nil, false, fmt.Errorf("%w: list: more than %d pages of expired connections in a row; retry", ErrUnavailable, maxPrunedPages)
}

// readPage is one page of List: the entries it read that had expired are
// forgotten and left out, so it may come back short, or empty with more.
func (s *Store) readPage(ctx context.Context, tenant string, after string, limit int) ([]Snapshot, bool, error) {
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
	cmds, err := s.pipeGet(ctx, tenant, ids, false)
	if err != nil && strings.Contains(err.Error(), "NOSCRIPT") {
		cmds, err = s.pipeGet(ctx, tenant, ids, true)
	}
	if err != nil {
		return nil, false, unavailable("list", err)
	}
	out := make([]Snapshot, 0, len(ids))
	var gone []string
	for i, cmd := range cmds {
		id, perr := keys.ParseID(ids[i])
		if perr != nil {
			gone = append(gone, ids[i])
			continue
		}
		snap, _, wake, evs, err := decodeGet(tenant, id, newReply(cmd.Result()))
		if err != nil {
			return nil, false, err
		}
		if !snap.Exists {
			gone = append(gone, ids[i])
			continue
		}
		s.scheduled(ctx, tenant, keys.Layout{Tenant: tenant, ID: id}, len(evs), wake)
		out = append(out, snap)
	}
	for _, hex := range gone {
		if _, err := s.tenantDo(ctx, tenant, "forget", hex); err != nil {
			return nil, false, unavailable("list", err)
		}
	}
	return out, more, nil
}

func (s *Store) pipeGet(ctx context.Context, tenant string, ids []string, full bool) ([]*redis.Cmd, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(ids))
	p := s.Policy(tenant)
	for i, hex := range ids {
		id, _ := keys.ParseID(hex) // a bad entry reads an empty state and is forgotten
		l := keys.Layout{Tenant: tenant, ID: id}
		ks, args := connKeys(l), s.args(p, l, 0)
		if full {
			cmds[i] = scriptGet.Eval(ctx, pipe, ks, args...)
		} else {
			cmds[i] = scriptGet.EvalSha(ctx, pipe, ks, args...)
		}
	}
	_, err := pipe.Exec(ctx)
	return cmds, err
}

// Count returns how many connections a tenant's index holds: one ZCARD.
// Expired connections leave it when the sweeper (or a List, or a create at
// the cap) finds them gone.
func (s *Store) Count(ctx context.Context, tenant string) (int64, error) {
	n, err := s.rdb.ZCard(ctx, keys.Index(tenant)).Result()
	if err != nil {
		return 0, unavailable("count", err)
	}
	return n, nil
}
