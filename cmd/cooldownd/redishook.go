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
