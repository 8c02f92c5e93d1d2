package keys

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidTenant is wrapped when a tenant name is not acceptable.
var ErrInvalidTenant = errors.New("keys: invalid tenant")

// DefaultTenant is the tenant of callers when auth is off.
const DefaultTenant = "default"

// ValidateTenant accepts 1 to 64 characters of [a-z0-9_-]: no braces, so a
// tenant can never break out of its Redis Cluster hash tag.
func ValidateTenant(t string) error {
	if len(t) == 0 || len(t) > 64 {
		return fmt.Errorf("%w: length must be 1 to 64, got %d", ErrInvalidTenant, len(t))
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: character %d must be one of [a-z0-9_-]", ErrInvalidTenant, i)
		}
	}
	return nil
}

// Layout names the Redis keys of one connection. Every key of a connection
// shares the hash tag {<tenant>:<id hex>}, so one script touches one Redis
// Cluster slot:
//
//	cd:{t:id}:s      state hash (probe leases are fields of it)
//	cd:{t:id}:h      recent transitions (list, newest first)
//	cd:{t:id}:r:k    the first answer to the report with idempotency key
//	                 k (a string that expires; see report_fast.lua)
//
// Per tenant (own hash tag {t}):
//
//	cd:{t}:idx       index of the tenant's connections (sorted set by id)
//	cd:{t}:wake      when the sweeper must look at each connection next
//	cd:ev:t          pub/sub channel of the tenant's transitions
//
// Per batch of successes (ReportBatch, own hash tag):
//
//	cd:b:{t:k}       the claim of the tenant's batch with idempotency key k
//	                 (a string that expires; see [BatchClaim])
//
// Shared: cd:tenants (the tenants with connections, for the sweeper) and
// cd:sweeper (the sweeper's lock, a redislock lock).
type Layout struct {
	Tenant string
	ID     ID
}

// key is the connection key that ends in suffix: one allocation.
func (l Layout) key(suffix string) string {
	var b strings.Builder
	b.Grow(l.keyLen(suffix))
	l.writeKey(&b, suffix)
	return b.String()
}

// keyLen is the length of key(suffix).
func (l Layout) keyLen(suffix string) int {
	return len("cd:{:}:") + len(l.Tenant) + hex.EncodedLen(len(l.ID)) + len(suffix)
}

// writeKey writes cd:{<tenant>:<id hex>}:<suffix> to b.
func (l Layout) writeKey(b *strings.Builder, suffix string) {
	var h [2 * len(ID{})]byte
	hex.Encode(h[:], l.ID[:])
	b.WriteString("cd:{")
	b.WriteString(l.Tenant)
	b.WriteByte(':')
	b.Write(h[:])
	b.WriteString("}:")
	b.WriteString(suffix)
}

// State is the state hash key.
func (l Layout) State() string { return l.key("s") }

// History is the transition list key.
func (l Layout) History() string { return l.key("h") }

// Report is the key that remembers the answer to the connection's report
// with idempotency key k (one of [A-Za-z0-9_-], so it cannot leave the
// hash tag).
func (l Layout) Report(k string) string { return l.key("r:" + k) }

// Script returns the keys a connection script declares, in its order:
// state, history. This runs on every Admit and Report: both keys share
// one string, so it allocates that string and the slice.
func (l Layout) Script() []string {
	n := l.keyLen("s")
	var b strings.Builder
	b.Grow(2 * n)
	l.writeKey(&b, "s")
	l.writeKey(&b, "h")
	both := b.String()
	return []string{both[:n], both[n:]}
}

// BatchClaim is the key that remembers the claim of the tenant's batch of
// successes with idempotency key k (one of [A-Za-z0-9_-]): its own hash
// tag, so the fleet's batches spread over the Cluster's slots.
func BatchClaim(tenant, k string) string { return "cd:b:{" + tenant + ":" + k + "}" }

// Index is the key of a tenant's connection index.
func Index(tenant string) string { return "cd:{" + tenant + "}:idx" }

// Wake is the key of a tenant's wake set (see [Layout]).
func Wake(tenant string) string { return "cd:{" + tenant + "}:wake" }

// Tenants is the key of the set of tenants that have connections.
const Tenants = "cd:tenants"

// SweepLock is the key of the sweeper's lock.
const SweepLock = "cd:sweeper"

// Peers is the key of the live coalescing replicas that route each
// connection's batches to one of them (a sorted set: address → when its
// registration lapses, Unix ms).
const Peers = "cd:peers"

// Channel is the pub/sub channel of a tenant's transitions.
func Channel(tenant string) string { return "cd:ev:" + tenant }
