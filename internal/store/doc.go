// Package store keeps connection state in Redis and applies the breaker's
// transitions there atomically: each Admit and each Report is one Lua
// script, run with EVALSHA (go-redis falls back to EVAL on NOSCRIPT, so a
// restarted Redis is handled transparently), touching the keys of one
// connection only (one Redis Cluster slot, see [keys.Layout]).
//
// The scripts mirror internal/breaker, the reference model; a differential
// test drives both with random operation sequences. Time is Redis's clock
// (TIME inside the script), the one clock every replica shares: opens,
// overrides and probe leases end by the expiries stored in the state hash,
// and key TTLs only collect garbage. Transitions are appended to a bounded
// per-connection history and published on the tenant's channel.
//
// Per tenant, in the tenant's own slot, an index lists the connections (a
// connection is indexed before its state is created, within the tenant's
// cap) and a wake set holds when each must be looked at next. [Store.Run]
// sweeps it on the one replica that holds a github.com/bsm/redislock lock,
// so a timed transition is applied, stamped with its instant, and
// published even when nobody calls Admit.
package store
