// Package keys computes connection identity: the 32-byte [ID] of a
// [Connection] (provider, endpoint, credential and optional scope).
//
// An ID is an HMAC-SHA256, keyed with an optional shared salt, over a
// versioned, length-prefixed encoding of the connection whose endpoint is
// first put in canonical form by [NormalizeEndpoint]. It is computed in the
// calling process, so the credential is never sent or stored; only the ID is.
// The exact layout is specified in docs/keys.md and pinned by the test
// vectors in testdata/vectors.json, so that a client written in another
// language derives the same ID for the same connection.
//
// Nothing in this package ever puts a credential, or an endpoint that failed
// validation, into an error message, a String result or a log value.
//
// The package imports only the standard library.
package keys
