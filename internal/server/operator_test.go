package server_test

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/logtest"
	"github.com/cooldownd/cooldownd/internal/server"
)

// opTokens add an operator (bound to no tenant) to the tenant tokens, and
// a client of tenant-c, which has no connections until a test makes one.
var opTokens = func() fakeAuth {
	f := fakeAuth{"ops": {Role: server.RoleOperator, Name: "sre"}, "c-client": {Tenant: "tenant-c", Role: server.RoleClient, Name: "c"}}
	for k, v := range tokens {
		f[k] = v
	}
	return f
}()

// operatorEnv is a server with two tenants' connections: A holds aIDs,
// B holds bIDs (each sorted by hex).
type operatorEnv struct {
	*env
	aIDs, bIDs []string
}

func newOperatorEnv(t *testing.T, opts ...envOption) operatorEnv {
	t.Helper()
	e := newEnv(t, append([]envOption{withAuth(opTokens)}, opts...)...)
	oe := operatorEnv{env: e}
	for tok, n := range map[string]int{"a-client": 3, "b-client": 2} {
		c := oe.cooldownAs(tok)
		for range n {
			id := newID()
			rateLimit(t, c, id, time.Minute)
			if tok == "a-client" {
				oe.aIDs = append(oe.aIDs, hex.EncodeToString(id))
			} else {
				oe.bIDs = append(oe.bIDs, hex.EncodeToString(id))
			}
		}
	}
	slices.Sort(oe.aIDs)
	slices.Sort(oe.bIDs)
	return oe
}

func (e operatorEnv) cooldownAs(tok string, opts ...connect.ClientOption) cooldownv1connect.CooldownServiceClient {
	return cooldownv1connect.NewCooldownServiceClient(e.withToken(tok), e.http.URL, opts...)
}

// tenantIDs are "tenant/id" of each state, in order.
func tenantIDs(states []*cooldownv1.ConnectionState) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = s.GetTenant() + "/" + hex.EncodeToString(s.GetConnection().GetId())
	}
	return out
}

func prefixed(tenant string, ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = tenant + "/" + id
	}
	return out
}

// TestOperatorListsEveryTenant: the operator's listing spans the tenants in
// (tenant, id) order, names each connection's tenant, pages across the
// tenant boundary at any page size, and narrows to one tenant on request.
func TestOperatorListsEveryTenant(t *testing.T) {
	t.Parallel()
	e := newOperatorEnv(t)
	ops := e.cooldownAs("ops")
	want := append(prefixed("tenant-a", e.aIDs), prefixed("tenant-b", e.bIDs)...)
	for _, size := range []uint32{1, 2, 3, 5, 100} {
		t.Run(fmt.Sprint("page size ", size), func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, pg := range listAll(t, ops, size) {
				assert.LessOrEqual(t, len(pg), int(size))
				got = append(got, tenantIDs(pg)...)
			}
			assert.Equal(t, want, got)
		})
	}
	t.Run("one tenant", func(t *testing.T) {
		t.Parallel()
		res, err := ops.ListConnections(t.Context(), connect.NewRequest(&cooldownv1.ListConnectionsRequest{Tenant: "tenant-b"}))
		require.NoError(t, err)
		assert.Equal(t, prefixed("tenant-b", e.bIDs), tenantIDs(res.Msg.GetConnections()))
	})
	t.Run("a tenant's viewer sees no tenant field and only its own", func(t *testing.T) {
		t.Parallel()
		res, err := e.cooldownAs("a-viewer").ListConnections(t.Context(), connect.NewRequest(&cooldownv1.ListConnectionsRequest{}))
		require.NoError(t, err)
		assert.Equal(t, prefixed("", e.aIDs), tenantIDs(res.Msg.GetConnections()))
	})
}

// TestOperatorIsolation: what each role may read and change across
// tenants. Tenant roles are unchanged: they read their own tenant only,
// even when they name another; the operator reads any tenant and changes
// none.
func TestOperatorIsolation(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newOperatorEnv(t)
			bID, err := hex.DecodeString(e.bIDs[0])
			require.NoError(t, err)
			get := func(tok, tenant string) (*cooldownv1.GetConnectionResponse, error) {
				res, err := e.cooldownAs(tok, p.opts...).GetConnection(t.Context(),
					connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: bID, Tenant: tenant, HistoryLimit: 5}))
				if err != nil {
					return nil, err
				}
				return res.Msg, nil
			}
			list := func(tok, tenant string) error {
				_, err := e.cooldownAs(tok, p.opts...).ListConnections(t.Context(),
					connect.NewRequest(&cooldownv1.ListConnectionsRequest{Tenant: tenant}))
				return err
			}
			adminAs := func(tok string) cooldownv1connect.AdminServiceClient {
				return cooldownv1connect.NewAdminServiceClient(e.withToken(tok), e.http.URL, p.opts...)
			}
			tests := []struct {
				name     string
				call     func() error
				code     connect.Code // 0: allowed
				contains string
			}{
				{"operator gets B's connection", func() error {
					m, err := get("ops", "tenant-b")
					if err == nil {
						assert.True(t, m.GetFound())
						assert.Equal(t, "tenant-b", m.GetConnection().GetTenant())
						assert.Equal(t, cooldownv1.State_STATE_OPEN, m.GetConnection().GetState())
						assert.NotEmpty(t, m.GetHistory())
					}
					return err
				}, 0, ""},
				{"operator in A does not find B's connection", func() error {
					m, err := get("ops", "tenant-a")
					if err == nil {
						assert.False(t, m.GetFound())
					}
					return err
				}, 0, ""},
				{"operator must name the tenant to get", func() error { _, err := get("ops", ""); return err }, connect.CodeInvalidArgument, "tenant"},
				{"operator names an invalid tenant", func() error { _, err := get("ops", "Tenant{B}"); return err }, connect.CodeInvalidArgument, "tenant"},
				{"B's viewer gets its own", func() error {
					m, err := get("b-viewer", "")
					if err == nil {
						assert.True(t, m.GetFound())
						assert.Empty(t, m.GetConnection().GetTenant())
					}
					return err
				}, 0, ""},
				{"B's viewer may name its own tenant", func() error { _, err := get("b-viewer", "tenant-b"); return err }, 0, ""},
				{"A's viewer cannot name B", func() error { _, err := get("a-viewer", "tenant-b"); return err }, connect.CodePermissionDenied, "operator"},
				{"A's admin cannot name B", func() error { _, err := get("a-admin", "tenant-b"); return err }, connect.CodePermissionDenied, "operator"},
				{"A's viewer does not find B's connection", func() error {
					m, err := get("a-viewer", "")
					if err == nil {
						assert.False(t, m.GetFound())
					}
					return err
				}, 0, ""},
				{"A's viewer cannot list B", func() error { return list("a-viewer", "tenant-b") }, connect.CodePermissionDenied, "operator"},
				{"B's client cannot read", func() error { _, err := get("b-client", ""); return err }, connect.CodePermissionDenied, "viewer, admin or operator"},
				{"operator cannot admit", func() error {
					_, err := e.cooldownAs("ops", p.opts...).Admit(t.Context(), admitReq(bID))
					return err
				}, connect.CodePermissionDenied, "client or admin"},
				{"operator cannot reset", func() error {
					_, err := adminAs("ops").ResetConnection(t.Context(), connect.NewRequest(&cooldownv1.ResetConnectionRequest{Id: bID}))
					return err
				}, connect.CodePermissionDenied, "admin"},
				{"operator cannot force", func() error {
					_, err := adminAs("ops").ForceConnection(t.Context(), connect.NewRequest(&cooldownv1.ForceConnectionRequest{Id: bID, Override: cooldownv1.Override_OVERRIDE_FORCED_CLOSED}))
					return err
				}, connect.CodePermissionDenied, "admin"},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					err := tt.call()
					if tt.code == 0 {
						assert.NoError(t, err)
						return
					}
					requireCode(t, err, tt.code, tt.contains)
				})
			}
			// Nothing above changed B's connection.
			m, err := get("b-viewer", "")
			require.NoError(t, err)
			assert.Equal(t, cooldownv1.State_STATE_OPEN, m.GetConnection().GetState())
			assert.Equal(t, cooldownv1.Override_OVERRIDE_UNSPECIFIED, m.GetConnection().GetOverride())
		})
	}
}

// TestOperatorWatchesEveryTenant: the operator's watch snapshot spans the
// tenants (tenant named), ends with the empty marker, then carries changes
// of every tenant, including a tenant that appears after the watch began.
func TestOperatorWatchesEveryTenant(t *testing.T) {
	t.Parallel()
	e := newOperatorEnv(t, withHeartbeat(50*time.Millisecond))
	ops := e.cooldownAs("ops")
	stream, err := ops.WatchConnections(t.Context(), connect.NewRequest(&cooldownv1.WatchConnectionsRequest{Snapshot: true}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = stream.Close() })
	recv := make(chan *cooldownv1.WatchConnectionsResponse, 64)
	var streamErr error // set before recv closes
	go func() {
		defer close(recv)
		for stream.Receive() {
			recv <- stream.Msg()
		}
		streamErr = stream.Err()
	}()
	next := func(skipHeartbeats bool) *cooldownv1.WatchConnectionsResponse {
		t.Helper()
		for {
			select {
			case m, ok := <-recv:
				require.True(t, ok, "the watch ended: %v", streamErr)
				if skipHeartbeats && m.GetConnection() == nil {
					continue
				}
				return m
			case <-time.After(10 * time.Second):
				require.FailNow(t, "the watch saw nothing")
				return nil
			}
		}
	}
	var snap []*cooldownv1.ConnectionState
	for {
		m := next(false)
		if m.GetConnection() == nil {
			break // the end-of-snapshot marker
		}
		assert.True(t, m.GetSnapshot())
		snap = append(snap, m.GetConnection())
	}
	assert.Equal(t, append(prefixed("tenant-a", e.aIDs), prefixed("tenant-b", e.bIDs)...), tenantIDs(snap))

	id := newID()
	rateLimit(t, e.cooldownAs("b-client"), id, 5*time.Second)
	m := next(true)
	assert.False(t, m.GetSnapshot())
	assert.Equal(t, "tenant-b/"+hex.EncodeToString(id), tenantIDs([]*cooldownv1.ConnectionState{m.GetConnection()})[0])
	assert.Equal(t, id, m.GetTransition().GetConnection().GetId())

	// A tenant with no connections when the watch began: its first
	// connection arrives (as a state, or a transition once joined).
	cID := newID()
	rateLimit(t, e.cooldownAs("c-client"), cID, 5*time.Second)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-recv:
			if m.GetConnection().GetTenant() == "tenant-c" {
				assert.Equal(t, cID, m.GetConnection().GetConnection().GetId())
				return
			}
		case <-deadline:
			require.FailNow(t, "the late tenant's connection never reached the operator's watch")
		}
	}
}

// TestBadRequestDetails: invalid_argument errors carry a google.rpc.BadRequest
// naming the field, besides the message.
func TestBadRequestDetails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, a := e.cooldown(), e.admin()
	tests := []struct {
		name  string
		call  func() error
		field string
	}{
		{"no candidates", func() error { _, err := c.Admit(t.Context(), admitReq()); return err }, "candidates"},
		{"short id", func() error { _, err := c.Admit(t.Context(), admitReq([]byte{1, 2})); return err }, "candidates[0].id"},
		{"second candidate's label", func() error {
			req := admitReq(newID(), newID())
			req.Msg.Candidates[1].Label = "Bearer sk-abcdefghijklmnopqrstuvwxyz0123456789"
			_, err := c.Admit(t.Context(), req)
			return err
		}, "candidates[1].label"},
		{"retry longer than candidates", func() error {
			req := admitReq(newID())
			req.Msg.Retry = []bool{false, true}
			_, err := c.Admit(t.Context(), req)
			return err
		}, "retry"},
		{"reporter", func() error {
			_, err := c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
				Connection: conn(newID()), Outcome: cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE, Reporter: "host:8080",
			}))
			return err
		}, "reporter"},
		{"history limit", func() error {
			_, err := c.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: newID(), HistoryLimit: 51}))
			return err
		}, "history_limit"},
		{"page token", func() error {
			_, err := c.ListConnections(t.Context(), connect.NewRequest(&cooldownv1.ListConnectionsRequest{PageToken: "zz"}))
			return err
		}, "page_token"},
		{"override duration", func() error {
			_, err := a.ForceConnection(t.Context(), connect.NewRequest(&cooldownv1.ForceConnectionRequest{Id: newID(),
				Override: cooldownv1.Override_OVERRIDE_FORCED_OPEN, Duration: durationpb.New(31 * 24 * time.Hour)}))
			return err
		}, "duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.call()
			requireCode(t, err, connect.CodeInvalidArgument, tt.field)
			var ce *connect.Error
			require.ErrorAs(t, err, &ce)
			var violations []*errdetails.BadRequest_FieldViolation
			for _, d := range ce.Details() {
				v, derr := d.Value()
				require.NoError(t, derr)
				if br, ok := v.(*errdetails.BadRequest); ok {
					violations = append(violations, br.GetFieldViolations()...)
				}
			}
			require.Len(t, violations, 1, "one BadRequest field violation")
			assert.Equal(t, tt.field, violations[0].GetField())
			assert.NotEmpty(t, violations[0].GetDescription())
			assert.Contains(t, ce.Message(), violations[0].GetDescription())
		})
	}
}

// TestGetConnectionPolicy: GetConnection shows the policy in effect for
// the connection: the store's, or the one PolicyFor picks by its label.
func TestGetConnectionPolicy(t *testing.T) {
	t.Parallel()
	special := fastPolicy()
	special.ConsecutiveFailures, special.RateLimitCooldown, special.QuotaBlock = 0, 0, 90*time.Second
	e := newEnv(t, withServer(func(o *server.Options) {
		o.PolicyFor = func(tenant, label string) breaker.Policy {
			if label == "special" {
				return special
			}
			return fastPolicy()
		}
	}))
	plain := newEnv(t)
	tests := []struct {
		name  string
		e     *env
		label string
		want  *cooldownv1.Policy
	}{
		{"the store's policy", plain, "", &cooldownv1.Policy{
			ConsecutiveFailures: 3, FailureRate: 0.5, MinCalls: 4, Window: durationpb.New(time.Second),
			OpenBase: durationpb.New(100 * time.Millisecond), OpenMax: durationpb.New(1600 * time.Millisecond),
			RateLimitCooldown: durationpb.New(50 * time.Millisecond), OverloadFloor: durationpb.New(200 * time.Millisecond),
			QuotaBlock: durationpb.New(1500 * time.Millisecond), AuthBlock: durationpb.New(time.Second), MaxProbes: 1,
			LeaseTtl: durationpb.New(300 * time.Millisecond),
		}},
		{"by label; rules that are off are unset", e, "special", &cooldownv1.Policy{
			FailureRate: 0.5, MinCalls: 4, Window: durationpb.New(time.Second),
			OpenBase: durationpb.New(100 * time.Millisecond), OpenMax: durationpb.New(1600 * time.Millisecond),
			OverloadFloor: durationpb.New(200 * time.Millisecond), QuotaBlock: durationpb.New(90 * time.Second),
			AuthBlock: durationpb.New(time.Second), MaxProbes: 1, LeaseTtl: durationpb.New(300 * time.Millisecond),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id := newID()
			c := tt.e.cooldown()
			_, err := c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
				Connection: &cooldownv1.Connection{Id: id, Label: tt.label}, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS,
			}))
			require.NoError(t, err)
			res, err := c.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id}))
			require.NoError(t, err)
			assert.True(t, res.Msg.GetFound())
			assert.Empty(t, res.Msg.GetConnection().GetTenant(), "auth off: one tenant, not named")
			assert.True(t, proto.Equal(tt.want, res.Msg.GetPolicy()), "got %v", res.Msg.GetPolicy())
		})
	}
}

// TestAccessLogNamesTheTenant: the debug access line names the tenant a
// call read: the caller's, the one an operator named, or * for every
// tenant; refused calls are logged with their code.
func TestAccessLogNamesTheTenant(t *testing.T) {
	t.Parallel()
	var logs logtest.Buffer
	e := newOperatorEnv(t, withServer(func(o *server.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}))
	ops := e.cooldownAs("ops")
	_, err := ops.ListConnections(t.Context(), connect.NewRequest(&cooldownv1.ListConnectionsRequest{}))
	require.NoError(t, err)
	_, err = ops.ListConnections(t.Context(), connect.NewRequest(&cooldownv1.ListConnectionsRequest{Tenant: "tenant-b"}))
	require.NoError(t, err)
	_, err = e.cooldownAs("a-viewer").ListConnections(t.Context(), connect.NewRequest(&cooldownv1.ListConnectionsRequest{}))
	require.NoError(t, err)
	_, err = ops.Admit(t.Context(), admitReq(newID()))
	require.Error(t, err)
	var got []string
	for _, r := range logs.Find("rpc") {
		if strings.HasSuffix(r.Str("procedure"), "/ListConnections") || r.Str("code") != "ok" {
			got = append(got, r.Str("tenant")+" "+r.Str("actor")+" "+r.Str("code"))
		}
	}
	assert.Equal(t, []string{"* sre ok", "tenant-b sre ok", "tenant-a a-viewer ok", "* sre permission_denied"}, got)
}
