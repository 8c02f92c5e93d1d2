// Package breaker is cooldownd's state machine for one provider connection,
// as pure Go: no I/O, no clock, no locks.
//
// It is the reference model. The Redis scripts in internal/store implement
// the same transitions and a differential test holds them to it; the Go
// client runs it in-process as its local fallback when cooldownd is
// unreachable.
//
// Time is a parameter of every operation, in Unix milliseconds from one
// clock (the server's), so that Go and Lua compute with the same integers.
// Randomness (breaker jitter) is a parameter too.
//
// A connection is closed (calls flow), open (calls are denied until
// OpenUntil, for a [Cause]) or half-open (open ended; up to
// [Policy.MaxProbes] probe leases decide whether it closes). Every state
// change increments the revision and yields an [Event]. A report changes
// breaker state only when it carries the current revision or a live lease
// token; server hints (Retry-After, rate limits, overload, quota, auth)
// always apply and merge by max.
package breaker
