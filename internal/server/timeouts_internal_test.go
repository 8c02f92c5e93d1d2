package server

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
)

// TestTimeoutInterceptorBounds: a call without a deadline, or with one
// past the bound, runs under the bound; a caller's sooner deadline is
// kept, and a context cancelled by the caller stays cancelled.
func TestTimeoutInterceptorBounds(t *testing.T) {
	s := &Server{requestTO: 10 * time.Second}
	var got context.Context
	call := s.timeoutInterceptor().WrapUnary(func(ctx context.Context, _ connect.AnyRequest) (connect.AnyResponse, error) {
		got = ctx
		return nil, nil
	})
	for _, tc := range []struct {
		name   string
		caller time.Duration // 0: no deadline
		want   time.Duration
	}{
		{"no deadline", 0, 10 * time.Second},
		{"a later deadline", time.Hour, 10 * time.Second},
		{"a sooner deadline", time.Second, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.caller > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.caller)
				defer cancel()
			}
			_, _ = call(ctx, nil)
			d, ok := got.Deadline()
			if assert.True(t, ok, "bounded") {
				assert.InDelta(t, tc.want.Seconds(), time.Until(d).Seconds(), 0.5)
			}
		})
	}
}

// BenchmarkTimeoutInterceptor is the bound's cost per call, with the
// caller's deadline the clients send (within the bound) and without one.
func BenchmarkTimeoutInterceptor(b *testing.B) {
	s := &Server{requestTO: 10 * time.Second}
	call := s.timeoutInterceptor().WrapUnary(func(ctx context.Context, _ connect.AnyRequest) (connect.AnyResponse, error) {
		return nil, ctx.Err()
	})
	for _, bc := range []struct {
		name   string
		caller time.Duration
	}{{"caller_deadline", 2 * time.Second}, {"no_deadline", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			// The request's context, as net/http and connect make it.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if bc.caller > 0 {
				ctx, cancel = context.WithTimeout(ctx, bc.caller)
				defer cancel()
			}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = call(ctx, nil)
			}
		})
	}
}
