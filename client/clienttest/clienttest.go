// Package clienttest holds the options of package client that exist for
// tests: a clock and a sleep that the test controls, so that a test of
// code that calls the guards ([client.Client.Do] and the others) checks
// their backoff and waits without waiting on wall time.
//
// A program never needs them; they are not in package client so that its
// API is what a program uses (docs/decisions/0043). They follow the client
// module's versioning like package client.
//
// Code that runs under [testing/synctest] needs neither: the guards' timers
// and time.Now already run on the bubble's fake clock there.
package clienttest

import (
	"context"
	"time"

	"github.com/cooldownd/cooldownd/client"
	"github.com/cooldownd/cooldownd/client/internal/testhook"
)

// WithClock sets the client's clock: the guards' deadlines and the
// degradation window, the in-process breaker, the report queue's ages.
// With [WithSleep], a test checks the guards' backoff and waits without
// real sleeps. A nil clock keeps [time.Now].
func WithClock(now func() time.Time) client.Option {
	return testhook.WithClock(now).(client.Option)
}

// WithSleep sets how the guards wait: their retry backoff and their waits
// for a denied connection. (The report queue's background retries keep
// real timers.) sleep must return ctx's error when ctx ends first, and nil
// after d. A nil sleep keeps the default (a timer).
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) client.Option {
	return testhook.WithSleep(sleep).(client.Option)
}
