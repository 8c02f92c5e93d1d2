package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/server"
)

func TestNewRequiresStore(t *testing.T) {
	t.Parallel()
	_, err := server.New(server.Options{Logger: slog.New(slog.DiscardHandler)})
	require.Error(t, err)
}

func TestHealth(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			hc := grpchealth.NewClient(e.http.Client(), e.http.URL, p.opts...)
			for _, svc := range []string{"", cooldownv1connect.CooldownServiceName, cooldownv1connect.AdminServiceName} {
				res, err := hc.Check(t.Context(), &grpchealth.CheckRequest{Service: svc})
				require.NoError(t, err, "service %q", svc)
				assert.Equal(t, grpchealth.StatusServing, res.Status, "service %q", svc)
			}
			_, err := hc.Check(t.Context(), &grpchealth.CheckRequest{Service: "no.such.Service"})
			assert.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
		})
	}
}

// TestReflection: grpcurl and buf curl can discover the API without the
// .proto files.
func TestReflection(t *testing.T) {
	t.Parallel()
	for _, p := range protocols[:2] { // the reflection stream is bidirectional: Connect and gRPC only
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			rc := grpcreflect.NewClient(e.http.Client(), e.http.URL, p.opts...)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // never hang the suite
			defer cancel()
			stream := rc.NewStream(ctx)
			t.Cleanup(func() { _, _ = stream.Close() })
			names, err := stream.ListServices()
			require.NoError(t, err)
			var got []string
			for _, n := range names {
				got = append(got, string(n))
			}
			assert.Contains(t, got, cooldownv1connect.CooldownServiceName)
			assert.Contains(t, got, cooldownv1connect.AdminServiceName)

			for _, sym := range []string{cooldownv1connect.CooldownServiceName, grpchealth.HealthV1ServiceName} {
				files, err := stream.FileContainingSymbol(protoreflect.FullName(sym))
				require.NoError(t, err, "symbol %s", sym)
				var services []string // the file and its dependencies
				for _, f := range files {
					for _, s := range f.GetService() {
						services = append(services, f.GetPackage()+"."+s.GetName())
					}
				}
				assert.Contains(t, services, sym)
			}
		})
	}
}

func TestHTTPEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	admit(t, e.cooldown(), newID())
	rateLimit(t, e.cooldown(), newID(), time.Second)

	code, body := e.get(t, "/healthz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok\n", body)

	code, body = e.get(t, "/metrics")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `cooldownd_admits_total{decision="allow",reason=""} 1`)
	assert.Contains(t, body, `cooldownd_reports_total{accepted="true",outcome="rate_limited"} 1`)
	assert.Contains(t, body, `cooldownd_rpc_duration_seconds_count{code="ok",procedure="/cooldown.v1.CooldownService/Admit"} 1`)
	for _, line := range strings.Split(body, "\n") {
		assert.NotContains(t, line, "id=", "no metric label carries a connection id")
	}
}

// TestStoreUnavailable: with Redis gone every RPC answers unavailable, the
// health checks say so, and nothing panics.
func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, a := e.cooldown(connect.WithGRPC()), e.admin()
	id := newID()
	admit(t, c, id)
	e.mini.Close()

	_, err := c.Admit(t.Context(), admitReq(id))
	requireCode(t, err, connect.CodeUnavailable, "state store unavailable")
	_, err = c.Admit(t.Context(), admitReq(id, newID()))
	requireCode(t, err, connect.CodeUnavailable)
	_, err = c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{Connection: conn(id), Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS}))
	requireCode(t, err, connect.CodeUnavailable)
	_, err = c.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id}))
	requireCode(t, err, connect.CodeUnavailable)
	_, err = c.ListConnections(t.Context(), connect.NewRequest(&cooldownv1.ListConnectionsRequest{}))
	requireCode(t, err, connect.CodeUnavailable)
	_, err = a.ResetConnection(t.Context(), connect.NewRequest(&cooldownv1.ResetConnectionRequest{Id: id}))
	requireCode(t, err, connect.CodeUnavailable)
	stream, err := c.WatchConnections(t.Context(), connect.NewRequest(&cooldownv1.WatchConnectionsRequest{Snapshot: true}))
	require.NoError(t, err)
	assert.False(t, stream.Receive())
	assert.Equal(t, connect.CodeUnavailable, connect.CodeOf(stream.Err()))
	_ = stream.Close()

	code, _ := e.get(t, "/healthz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	res, err := grpchealth.NewClient(e.http.Client(), e.http.URL, connect.WithGRPC()).Check(t.Context(), &grpchealth.CheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, grpchealth.StatusNotServing, res.Status)
}
