// Package store keeps connection state in Redis and applies the breaker's
// transitions there atomically: each Admit and each Report is one Lua
// script, run with EVALSHA (go-redis falls back to EVAL on NOSCRIPT, so a
// restarted Redis is handled transparently), touching the keys of one
// connection only (one Redis Cluster slot, see [keys.Layout]).
//
// The scripts mirror internal/breaker, the reference model; a differential
// test drives both with random operation sequences. Time is Redis's clock
// (TIME inside the script), the one clock every replica shares. Probe
// leases are github.com/bsm/redislock locks. Transitions are appended to a
// bounded per-connection history and published on the tenant's channel.
package store
