// Package client is the Go client of cooldownd: it guards calls to LLM
// providers with cooldown and circuit-breaker decisions shared by every
// process that calls the same provider connection.
//
// Create one [Client] per process with [New] and name each provider
// connection with [Client.Connection]: the id is a keyed hash of the
// endpoint, the API key and an optional scope, computed here, so the key
// never leaves the process (see docs/keys.md). Then use one of:
//
//   - [Client.Do] around one provider call: admit → call → classify
//     ([Classify]) → report → retry with backoff, or a typed [*DeniedError] /
//     [*Error];
//   - [Client.DoFallback] over a list of candidates (primary first), which
//     moves on to the next at once when one is cooling down, out of quota,
//     rejected or failing;
//   - [Client.RoundTripper] to guard every request of an [net/http.Client],
//     for SDKs that accept one (set the SDK's own retries to 0);
//   - [Client.Admit] (or [Client.AdmitAttempt] for a retry), [Client.Report]
//     and [Client.ExtendLease] to drive the protocol by hand.
//
// A 2xx response is reported as a success when its headers arrive and is
// returned with its body unread, so streams work and are never replayed.
//
// When cooldownd is unreachable or slow (see [WithAdmitTimeout]), the client
// never blocks provider calls on it: with [FailOpen] (the default) an
// in-process breaker (internal/breaker, with [WithLocalPolicy]) decides and
// learns from the outcomes, the outage is logged once, and cooldownd is
// tried again about once a second until it answers; with [FailClosed]
// calls are denied with [ErrUnavailable].
//
// Nothing the client sends or logs holds a credential: only ids, short
// labels ([MaxLabelLen], never containing the key), outcomes, HTTP statuses
// and short machine error codes. docs/client.md is the guide.
package client
