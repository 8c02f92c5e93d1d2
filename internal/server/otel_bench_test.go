package server_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/extra/redisotel/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/servertest"
)

// discard is a span exporter that drops what it is given: the benchmark
// measures making, recording and batching spans, not a collector.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkAdmitTracing is BenchmarkAdmitRPC/proto with tracing off (no
// TracerProvider: what cooldownd runs without OTEL_* configuration) and on
// at 100 % sampling (the server span, its attributes, the Redis script's
// span, batched to an exporter that drops them), cmd/cooldownd's wiring.
// The difference per op is the CPU tracing adds to one Admit
// (docs/benchmarks.md); client and server run in one process.
func BenchmarkAdmitTracing(b *testing.B) {
	req := &cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{{Id: make([]byte, 32), Label: "bench"}}}
	for _, on := range []bool{false, true} {
		name := "tracing=off"
		if on {
			name = "tracing=on"
		}
		b.Run(name, func(b *testing.B) {
			rdb := redistest.Real(b)
			opts := []servertest.Option{servertest.WithRedis(rdb), servertest.WithProtocol(servertest.TLS)}
			if on {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discard{}))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				if err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(tp), redisotel.WithDBStatement(false),
					redisotel.WithCallerEnabled(false)); err != nil {
					b.Fatal(err)
				}
				opts = append(opts, servertest.WithServerOptions(func(o *server.Options) { o.TracerProvider = tp }))
			}
			hs := servertest.Start(b, opts...).HTTP()
			c := cooldownv1connect.NewCooldownServiceClient(hs.Client(), hs.URL)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime(b)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Admit(b.Context(), connect.NewRequest(req)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			// The process's CPU per op (client and server), steadier than
			// the wall time on a shared machine.
			b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the CPU time (user and system) this process used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
