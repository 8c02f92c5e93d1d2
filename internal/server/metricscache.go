package server

import (
	"sync"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// children caches the children of a Prometheus vector by a comparable key
// of the caller's (enum values, a procedure and a code), so that the hot
// path looks one up in a map under a read lock instead of hashing its
// label strings (and allocating their slice) on every call.
type children[K comparable, V any] struct {
	mu   sync.RWMutex
	m    map[K]V
	make func(K) V
}

func newChildren[K comparable, V any](make func(K) V) *children[K, V] {
	return &children[K, V]{m: map[K]V{}, make: make}
}

// get returns the child of k, made on first use.
func (c *children[K, V]) get(k K) V {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.m[k]; ok {
		return v
	}
	v = c.make(k)
	c.m[k] = v
	return v
}

// rpcKey names a child of cooldownd_rpc_duration_seconds.
type rpcKey struct{ procedure, code string }

// admitKey names a child of cooldownd_admits_total.
type admitKey struct {
	decision breaker.Decision
	reason   breaker.DenyReason
}

// reportKey names a child of cooldownd_reports_total.
type reportKey struct {
	outcome  breaker.Outcome
	accepted bool
}
