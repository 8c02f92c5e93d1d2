package server_test

import (
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/server"
)

// fakeAuth is a token table. (A real Authenticator compares in constant
// time; a test does not need to.)
type fakeAuth map[string]server.Identity

func (f fakeAuth) Authenticate(tok string) (server.Identity, bool) {
	id, ok := f[tok]
	return id, ok
}

var tokens = fakeAuth{
	"a-client": {Tenant: "tenant-a", Role: server.RoleClient, Name: "a-client"},
	"a-viewer": {Tenant: "tenant-a", Role: server.RoleViewer, Name: "a-viewer"},
	"a-admin":  {Tenant: "tenant-a", Role: server.RoleAdmin, Name: "a-admin"},
	"b-client": {Tenant: "tenant-b", Role: server.RoleClient, Name: "b-client"},
	"b-viewer": {Tenant: "tenant-b", Role: server.RoleViewer, Name: "b-viewer"},
}

func TestAuthRoles(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, withAuth(tokens))
			cooldownAs := func(tok string) cooldownv1connect.CooldownServiceClient {
				return cooldownv1connect.NewCooldownServiceClient(e.withToken(tok), e.http.URL, p.opts...)
			}
			adminAs := func(tok string) cooldownv1connect.AdminServiceClient {
				return cooldownv1connect.NewAdminServiceClient(e.withToken(tok), e.http.URL, p.opts...)
			}
			id := newID()
			// A connect.Request is not safe to share between concurrent calls.
			reset := func() *connect.Request[cooldownv1.ResetConnectionRequest] {
				return connect.NewRequest(&cooldownv1.ResetConnectionRequest{Id: id})
			}
			get := func() *connect.Request[cooldownv1.GetConnectionRequest] {
				return connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id})
			}

			tests := []struct {
				name string
				call func() error
				code connect.Code // 0: allowed
			}{
				{"no token", func() error { _, err := e.cooldown(p.opts...).Admit(t.Context(), admitReq(id)); return err }, connect.CodeUnauthenticated},
				{"unknown token", func() error { _, err := cooldownAs("nope").Admit(t.Context(), admitReq(id)); return err }, connect.CodeUnauthenticated},
				{"client admits", func() error { _, err := cooldownAs("a-client").Admit(t.Context(), admitReq(id)); return err }, 0},
				{"viewer admits", func() error { _, err := cooldownAs("a-viewer").Admit(t.Context(), admitReq(id)); return err }, connect.CodePermissionDenied},
				{"client reads", func() error { _, err := cooldownAs("a-client").GetConnection(t.Context(), get()); return err }, connect.CodePermissionDenied},
				{"viewer reads", func() error { _, err := cooldownAs("a-viewer").GetConnection(t.Context(), get()); return err }, 0},
				{"client resets", func() error { _, err := adminAs("a-client").ResetConnection(t.Context(), reset()); return err }, connect.CodePermissionDenied},
				{"viewer resets", func() error { _, err := adminAs("a-viewer").ResetConnection(t.Context(), reset()); return err }, connect.CodePermissionDenied},
				{"admin resets", func() error { _, err := adminAs("a-admin").ResetConnection(t.Context(), reset()); return err }, 0},
				{"admin admits", func() error { _, err := cooldownAs("a-admin").Admit(t.Context(), admitReq(id)); return err }, 0},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					t.Parallel()
					err := tt.call()
					if tt.code == 0 {
						assert.NoError(t, err)
						return
					}
					requireCode(t, err, tt.code)
				})
			}
		})
	}
}

// TestAuthSchemeCaseInsensitive: "bearer" and "BEARER" are the same scheme
// (RFC 9110, section 11.1); other schemes and empty tokens are refused.
func TestAuthSchemeCaseInsensitive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth(tokens))
	tests := []struct {
		name   string
		header string
		code   connect.Code
	}{
		{"canonical", "Bearer a-client", 0},
		{"lower", "bearer a-client", 0},
		{"upper", "BEARER a-client", 0},
		{"basic", "Basic a-client", connect.CodeUnauthenticated},
		{"empty token", "Bearer ", connect.CodeUnauthenticated},
		{"no scheme", "a-client", connect.CodeUnauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := admitReq(newID())
			req.Header().Set("Authorization", tt.header)
			_, err := e.cooldown().Admit(t.Context(), req)
			if tt.code == 0 {
				assert.NoError(t, err)
				return
			}
			requireCode(t, err, tt.code)
		})
	}
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, withAuth(tokens))
			client := func(tok string) cooldownv1connect.CooldownServiceClient {
				return cooldownv1connect.NewCooldownServiceClient(e.withToken(tok), e.http.URL, p.opts...)
			}
			a, b := client("a-client"), client("b-client")
			av, bv := client("a-viewer"), client("b-viewer")
			id := newID()    // the same id in both tenants
			bOnly := newID() // a connection of B's alone

			rateLimit(t, a, id, time.Minute)
			rateLimit(t, b, bOnly, time.Minute)
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, admit(t, a, id).GetDenyReason())
			assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, admit(t, b, id).GetDecision(), "A's cooldown must not reach B")

			list := func(c cooldownv1connect.CooldownServiceClient) []string {
				res, err := c.ListConnections(t.Context(), connect.NewRequest(&cooldownv1.ListConnectionsRequest{}))
				require.NoError(t, err)
				return ids(res.Msg.GetConnections())
			}
			assert.Equal(t, []string{hex.EncodeToString(id)}, list(av))
			assert.Equal(t, []string{hex.EncodeToString(bOnly)}, list(bv), "B's list must not show A's connection")
			got, err := bv.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id, HistoryLimit: 10}))
			require.NoError(t, err)
			assert.Equal(t, cooldownv1.State_STATE_CLOSED, got.Msg.GetConnection().GetState())
			assert.Empty(t, got.Msg.GetHistory())

			// B's watch: its snapshot holds B's connection only (and, as the
			// server subscribes before the snapshot, it is live once the
			// snapshot arrives).
			stream, err := bv.WatchConnections(t.Context(), connect.NewRequest(&cooldownv1.WatchConnectionsRequest{Snapshot: true}))
			require.NoError(t, err)
			t.Cleanup(func() { _ = stream.Close() })
			recv := make(chan *cooldownv1.WatchConnectionsResponse, 4)
			go func() {
				defer close(recv)
				for stream.Receive() {
					if stream.Msg().GetConnection() == nil {
						continue // a heartbeat
					}
					recv <- stream.Msg()
				}
			}()
			next := func() *cooldownv1.WatchConnectionsResponse {
				t.Helper()
				select {
				case m, ok := <-recv:
					require.True(t, ok, "B's watch ended")
					return m
				case <-time.After(5 * time.Second):
					require.FailNow(t, "B's watch saw nothing")
					return nil
				}
			}
			snap := next()
			assert.True(t, snap.GetSnapshot())
			assert.Equal(t, bOnly, snap.GetConnection().GetConnection().GetId())

			// A's transitions do not reach B's watch; B's own do.
			rateLimit(t, a, newID(), time.Minute)
			rateLimit(t, b, id, 5*time.Second)
			m := next()
			assert.False(t, m.GetSnapshot())
			assert.Equal(t, id, m.GetTransition().GetConnection().GetId())
			assert.Equal(t, 5*time.Second, m.GetConnection().GetRetryAfter().AsDuration(), "B's own state, not A's")

			// B's report on the same id is B's own, and A's state is untouched.
			assert.Equal(t, 5*time.Second, admit(t, b, id).GetRetryAfter().AsDuration())
			assert.Equal(t, time.Minute, admit(t, a, id).GetRetryAfter().AsDuration())
		})
	}
}

// TestAuthHTTPEndpointsOpen: health needs no token (probes) and carries no
// tenant data; /metrics, which names tenants, is closed on the API port
// without a metrics token (TestMetricsExposure).
func TestAuthHTTPEndpointsOpen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth(tokens))
	code, _ := e.get(t, "/healthz")
	assert.Equal(t, http.StatusOK, code)
	code, _ = e.get(t, "/livez")
	assert.Equal(t, http.StatusOK, code)
	code, _ = e.get(t, "/metrics")
	assert.Equal(t, http.StatusForbidden, code)
}
