package store

import (
	"context"
	"slices"

	"github.com/cooldownd/cooldownd/internal/keys"
)

// Tenants returns the tenants that hold (or held) connections, sorted: the
// set the sweeper walks. A tenant whose connections all expired may still
// be listed; its listing is then empty.
func (s *Store) Tenants(ctx context.Context) ([]string, error) {
	ts, err := s.rdb.SMembers(ctx, keys.Tenants).Result()
	if err != nil {
		return nil, unavailable("tenants", err)
	}
	slices.Sort(ts)
	return ts, nil
}
