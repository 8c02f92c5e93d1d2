package store_test

import (
	"context"
	"testing"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// BenchmarkStore measures one operation per iteration against a real Redis
// (RunParallel; use -cpu 1,2 for figures per core count):
//
//   - admit_healthy: the hot path, a closed connection's Admit (one EVALSHA, no write);
//   - admit_open: the storm path, every caller denied;
//   - report_success: a healthy connection's Report (a write).
func BenchmarkStore(b *testing.B) {
	rdb := redistest.Real(b)
	st, err := store.New(rdb, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	healthy := store.Conn{Tenant: "bench", ID: keys.ID{1}}
	open := store.Conn{Tenant: "bench", ID: keys.ID{3}}
	for c, o := range map[store.Conn]breaker.Outcome{healthy: breaker.OutcomeSuccess, open: breaker.OutcomeQuotaExhausted} {
		if _, err := st.Report(ctx, c, breaker.Report{Outcome: o}); err != nil {
			b.Fatal(err)
		}
	}
	admit := func(c store.Conn) func() error {
		return func() error { _, err := st.Admit(ctx, c); return err }
	}
	cases := []struct {
		name string
		op   func() error
	}{
		{"admit_healthy", admit(healthy)},
		{"admit_open", admit(open)},
		{"report_success", func() error {
			_, err := st.Report(ctx, healthy, breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200})
			return err
		}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := bc.op(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
