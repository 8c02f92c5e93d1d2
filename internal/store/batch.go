package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/keys"
)

// scriptClaimBatch remembers a batch's claim for the report key TTL unless
// a claim of the same key is remembered, and answers that one (false when
// none was).
var scriptClaimBatch = redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'GET', 'PX', ARGV[2])`)

// MaxBatchClaim bounds a batch's claim: its digest and what it held.
const MaxBatchClaim = 512

// ClaimBatch remembers claim, what a replica decided for the tenant's
// batch of successes with idempotency key key (ReportBatch, decision
// 0065), for [Options.ReportKeyTTL]: one command in the key's own slot.
// When the key was claimed already, it returns the first claim and found
// true, and remembers nothing: the batch is a resend.
func (s *Store) ClaimBatch(ctx context.Context, tenant, key, claim string) (first string, found bool, err error) {
	if err := keys.ValidateTenant(tenant); err != nil {
		return "", false, fmt.Errorf("store: claim batch: %w", err)
	}
	if key == "" || claim == "" || len(claim) > MaxBatchClaim {
		return "", false, fmt.Errorf("store: claim batch: want a key and a claim of 1 to %d bytes", MaxBatchClaim)
	}
	first, err = scriptClaimBatch.Run(ctx, s.rdb, []string{keys.BatchClaim(tenant, key)}, claim, s.reportKeyTTL).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return "", false, nil
	case err != nil:
		return "", false, unavailable("claim batch", err)
	}
	return first, true, nil
}
