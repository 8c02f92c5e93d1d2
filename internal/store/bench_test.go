package store_test

import (
	"context"
	"testing"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// BenchmarkAdmitHealthy is the hot path: a closed connection's Admit, one
// EVALSHA against a real Redis. Run with -cpu 1,2 to see parallel figures.
func BenchmarkAdmitHealthy(b *testing.B) {
	rdb := redistest.Real(b)
	st, err := store.New(rdb, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	c := store.Conn{Tenant: "bench", ID: keys.ID{1}}
	if _, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := st.Admit(ctx, c); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkReportSuccess is a healthy connection's Report (a write).
func BenchmarkReportSuccess(b *testing.B) {
	rdb := redistest.Real(b)
	st, err := store.New(rdb, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	c := store.Conn{Tenant: "bench", ID: keys.ID{2}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkAdmitOpen is the storm path: every caller is denied.
func BenchmarkAdmitOpen(b *testing.B) {
	rdb := redistest.Real(b)
	st, err := store.New(rdb, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	c := store.Conn{Tenant: "bench", ID: keys.ID{3}}
	if _, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeQuotaExhausted}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := st.Admit(ctx, c); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
