package keys

import (
	"errors"
	"fmt"
	"strconv"
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
//	cd:{t:id}:s      state hash
//	cd:{t:id}:h      recent transitions (list, newest first)
//	cd:{t:id}:l:<n>  probe lease slot n (a redislock lock; value = token)
//
// Per tenant (own hash tag {t}):
//
//	cd:{t}:idx       index of the tenant's connections (sorted set by id)
//	cd:ev:t          pub/sub channel of the tenant's transitions
type Layout struct {
	Tenant string
	ID     ID
}

func (l Layout) prefix() string { return "cd:{" + l.Tenant + ":" + l.ID.String() + "}:" }

// State is the state hash key.
func (l Layout) State() string { return l.prefix() + "s" }

// History is the transition list key.
func (l Layout) History() string { return l.prefix() + "h" }

// Lease is the key of probe lease slot n.
func (l Layout) Lease(n int) string { return l.prefix() + "l:" + strconv.Itoa(n) }

// Script returns the keys a connection script declares, in its order:
// state, history, then lease slots 0 to leases-1 (one hex encoding of the
// id for all of them: this runs on every Admit and Report).
func (l Layout) Script(leases int) []string {
	p := l.prefix()
	ks := make([]string, 0, 2+leases)
	ks = append(ks, p+"s", p+"h")
	for i := range leases {
		ks = append(ks, p+"l:"+strconv.Itoa(i))
	}
	return ks
}

// Index is the key of a tenant's connection index.
func Index(tenant string) string { return "cd:{" + tenant + "}:idx" }

// Channel is the pub/sub channel of a tenant's transitions.
func Channel(tenant string) string { return "cd:ev:" + tenant }
