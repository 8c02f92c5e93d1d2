package server_test

import (
	"testing"

	"connectrpc.com/connect"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/servertest"
)

// BenchmarkAdmitRPC is one healthy Admit through the whole server: Connect
// over HTTP/2 (h2c), validation, the store's script on a real Redis.
func BenchmarkAdmitRPC(b *testing.B) {
	ts := servertest.Start(b, servertest.WithRedis(redistest.Real(b)), servertest.WithProtocol(servertest.TLS))
	hs := ts.HTTP()
	c := cooldownv1connect.NewCooldownServiceClient(hs.Client(), hs.URL, connect.WithProtoJSON())
	cb := cooldownv1connect.NewCooldownServiceClient(hs.Client(), hs.URL)
	req := &cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{{Id: make([]byte, 32), Label: "bench"}}}
	for _, bc := range []struct {
		name string
		c    cooldownv1connect.CooldownServiceClient
	}{{"proto", cb}, {"json", c}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := bc.c.Admit(b.Context(), connect.NewRequest(req)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
