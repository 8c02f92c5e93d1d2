// Package proxy is the handler of cmd/cooldown-proxy: a reverse proxy that
// guards every request to an LLM provider with the Go client of cooldownd,
// so that an application in any language gets the fleet's cooldowns by
// changing its SDK's base URL.
//
// A request to a configured prefix ("/openai/v1/chat/completions") goes to
// the route's upstream ("https://api.openai.com/v1/chat/completions")
// through [client.Client.DoFallback] over the request's candidates: the
// connection of (upstream, the request's credential, its model), then the
// model's fallbacks. The rules (admission, classification, reports,
// retries, fallback, fail mode) are the client's; this package only maps
// HTTP requests to connections and denials to answers the SDKs read. See
// docs/proxy.md.
package proxy
