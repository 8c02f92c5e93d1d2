package store

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// RedisClient is the part of a go-redis client the store uses, and all it
// uses: the scripts (run with EVALSHA, and EVAL after a NOSCRIPT, through
// Process; redis.Scripter for redis.Script and the redislock sweeper
// lock), pipelines (List reads a page in one; AdmitFirst's rounds on a
// Cluster), the tenant set and index, and pub/sub for Watch.
// *redis.Client (single, and a Sentinel failover client) and
// *redis.ClusterClient satisfy it, as does any [redis.UniversalClient] or
// a test wrapper that embeds one of them.
//
// A client that also has MasterForKey (a *redis.ClusterClient, or a type
// that embeds one) is treated as a Cluster: AdmitFirst keeps each script
// to one hash slot and a durable report waits on the master of its slot.
// Otherwise the client is one master, and a durable report waits on a
// connection it takes with Conn (a *redis.Client has it; [New] refuses
// Options.Durability for a client with neither). A wrapper of a Cluster
// client must therefore keep MasterForKey (embed the *redis.ClusterClient).
// A redis.Ring is not supported (its shards do not share a tenant's
// index).
type RedisClient interface {
	redis.Scripter
	// Process runs one command: the scripts the store sends itself, so
	// that one that must not be resent is marked so (see luaScript).
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	Ping(ctx context.Context) *redis.StatusCmd
	SAdd(ctx context.Context, key string, members ...any) *redis.IntCmd
	SMembers(ctx context.Context, key string) *redis.StringSliceCmd
	ZCard(ctx context.Context, key string) *redis.IntCmd
	ZRangeByLex(ctx context.Context, key string, opt *redis.ZRangeBy) *redis.StringSliceCmd
}

// clusterClient is what makes a [RedisClient] a Cluster's: the master
// that serves a key's slot.
type clusterClient interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
}

// connClient is a one-master client that hands out a connection of its
// own (for WAIT after a script on the same connection, see durable.go).
type connClient interface {
	Conn() *redis.Conn
}

var (
	_ RedisClient   = (*redis.Client)(nil)
	_ RedisClient   = (*redis.ClusterClient)(nil)
	_ RedisClient   = redis.UniversalClient(nil)
	_ clusterClient = (*redis.ClusterClient)(nil)
	_ connClient    = (*redis.Client)(nil)
	_ processor     = redis.Pipeliner(nil)
)
