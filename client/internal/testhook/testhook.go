// Package testhook carries package client's test options to package
// clienttest, so that they are not part of client's own API. Package
// client sets the variables when it is initialised; clienttest, which
// imports client, reads them. Both are in the client module, so nothing
// outside it can import this package.
package testhook

import (
	"context"
	"time"
)

// The constructors of client's test options. Each returns a client.Option
// (typed any, since this package cannot import client).
var (
	WithClock func(now func() time.Time) any
	WithSleep func(sleep func(ctx context.Context, d time.Duration) error) any
)
