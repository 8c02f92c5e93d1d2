package client

import (
	"context"
	"time"

	"github.com/cooldownd/cooldownd/client/internal/testhook"
)

// The test options are exported by package clienttest only (decision
// 0043): a program never needs to replace the client's clock, and the
// production API stays what a program uses.
func init() {
	testhook.WithClock = func(now func() time.Time) any { return withClock(now) }
	testhook.WithSleep = func(sleep func(context.Context, time.Duration) error) any { return withSleep(sleep) }
}

// withClock sets the clock of the client: the guards' deadlines and the
// degradation window, the in-process breaker, the report queue's ages. A
// nil clock keeps [time.Now]. (clienttest.WithClock.)
func withClock(now func() time.Time) Option {
	return optionFunc(func(c *config) {
		if now != nil {
			c.now = now
		}
	})
}

// withSleep sets how the guards wait: their retry backoff and their waits
// for a denied connection. A nil sleep keeps the default (a timer).
// (clienttest.WithSleep.)
func withSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return optionFunc(func(c *config) {
		if sleep != nil {
			c.sleep = sleep
		}
	})
}
