package client

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkGuardHealthy measures the guard's healthy path (a no-op
// provider call on a closed connection) against a real cooldownd process
// over loopback h2c, with and without the mirror. It prints
// calls/s; nothing asserts a figure.
func BenchmarkGuardHealthy(b *testing.B) {
	for _, mirror := range []bool{false, true} {
		b.Run(fmt.Sprintf("mirror=%t", mirror), func(b *testing.B) {
			cd := startCooldownd(b, fastPolicy())
			opts := []Option{WithAdmitTimeout(5 * time.Second), WithoutMirror()}
			if mirror {
				opts = append(opts, WithMirror(time.Second))
			}
			c, err := New(cd.URL, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			cn, err := c.Connection("openai", "https://api.example.com/v1", "key-bench", "", "")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Admit(b.Context(), cn); err != nil { // the stream opens at the first answer
				b.Fatal(err)
			}
			for mirror && !c.Stats().Mirror.Live {
				time.Sleep(time.Millisecond)
			}
			b.SetParallelism(16)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := c.Do(b.Context(), cn, noop)
					if err != nil {
						b.Error(err)
						return
					}
					_ = resp.Body.Close()
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
		})
	}
}
