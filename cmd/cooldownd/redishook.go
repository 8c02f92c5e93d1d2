package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// latencyHook times every Redis round trip (a command or a pipeline) for
// the cooldownd_redis_* histogram.
type latencyHook struct {
	observe func(op string, d time.Duration)
}

func (h latencyHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h latencyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		h.observe(cmd.Name(), time.Since(start))
		return err
	}
}

func (h latencyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		h.observe("pipeline", time.Since(start))
		return err
	}
}

// timeoutHook bounds every Redis round trip (a command with its retries, or
// a pipeline) by d unless the caller's deadline is sooner. With the
// clients' ContextTimeoutEnabled the deadline reaches the socket, so a
// slow or blackholed Redis costs a request at most d, not go-redis's
// multi-second read timeouts and retries.
type timeoutHook struct{ d time.Duration }

func (h timeoutHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h timeoutHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ctx, cancel := context.WithTimeout(ctx, h.d)
		defer cancel()
		return next(ctx, cmd)
	}
}

func (h timeoutHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ctx, cancel := context.WithTimeout(ctx, h.d)
		defer cancel()
		return next(ctx, cmds)
	}
}
