package client

import (
	"context"
	"net/http"
)

// DoFallback guards one provider call over a list of candidates in order of
// preference: the primary first, then its fallbacks (for example the same
// model on another provider, or a smaller model). It works as [Client.Do]
// with these differences:
//
//   - every Admit names all remaining candidates, and cooldownd admits the
//     first one that may go, so a candidate in cooldown, open, out of quota
//     or with a rejected credential is skipped at once, without a call;
//   - when a call fails because of the provider or the credential (quota,
//     auth, a delay above [Rules.MaxServerDelay], a failure that is not
//     retryable, or retries used up), the guard moves on to the next
//     candidate at once; a caller error (4xx) or cancellation ends it;
//   - a retryable failure that opened its connection (a 429 with a shared
//     cooldown, a tripped breaker) moves on to the next candidate at once,
//     without a backoff.
//
// Every Admit marks as a retry exactly the candidates this call was already
// sent to: a fallback not tried yet gets a first attempt. The guard waits
// (see [WithMaxWait]) only when every remaining candidate is denied, and
// never for a candidate denied with [ReasonRetryBudget] or
// [ReasonThrottled]: that one is dropped and the rest admitted at once. call receives the chosen candidate and must build the request for
// it. At most 16 candidates; retries are counted over all of them.
func (c *Client) DoFallback(ctx context.Context, conns []Conn, call func(ctx context.Context, conn Conn) (*http.Response, error)) (*http.Response, error) {
	return c.guard(ctx, "fallback", conns, c.cfg.maxRetries, func(ctx context.Context, conn Conn, _ int) (*http.Response, error) {
		return call(ctx, conn)
	})
}
