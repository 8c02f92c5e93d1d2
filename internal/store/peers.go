package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/keys"
)

// scriptPeers registers one replica among the live coalescing replicas
// (keys.Peers: address → when its registration lapses) and answers them
// all, by Redis's clock: one clock for every replica, so that they agree
// on who is live (decision 0064).
var scriptPeers = redis.NewScript(`
local now = tonumber(ARGV[3])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ttl * 2)
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZRANGE', KEYS[1], 0, -1)
`)

// MaxPeerAddress bounds a peer's address (host:port).
const MaxPeerAddress = 256

// Peers registers self, a coalescing replica's address as its peers reach
// it, as live for ttl, and returns every live replica's address, sorted
// (self among them). ttl 0 deregisters self (on a clean stop).
func (s *Store) Peers(ctx context.Context, self string, ttl time.Duration) ([]string, error) {
	if self == "" || len(self) > MaxPeerAddress {
		return nil, fmt.Errorf("store: peer address %q: want 1 to %d bytes", self, MaxPeerAddress)
	}
	if ttl < 0 {
		return nil, errors.New("store: peer ttl below 0")
	}
	out, err := scriptPeers.Run(ctx, s.rdb, []string{keys.Peers}, self, strconv.FormatInt(ttl.Milliseconds(), 10), s.nowArg()).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("store: peers: %w", err)
	}
	slices.Sort(out) // by address: the set is ordered by expiry
	return out, nil
}
