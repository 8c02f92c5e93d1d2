package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"

	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/auth"
	"github.com/cooldownd/cooldownd/internal/keys"
)

// Role, Identity and Authenticator are those of internal/auth, aliased so
// that the server's callers need one import.
type (
	Role          = auth.Role
	Identity      = auth.Identity
	Authenticator = auth.Authenticator
)

// Roles (see [auth.Role]).
const (
	RoleClient   = auth.RoleClient
	RoleViewer   = auth.RoleViewer
	RoleAdmin    = auth.RoleAdmin
	RoleOperator = auth.RoleOperator
)

// procedureRoles is the one authorisation table: the grants that may call
// each procedure (any one suffices; see [auth.Role.Allows]). A procedure
// missing from it is refused.
var procedureRoles = map[string][]Role{
	cooldownv1connect.CooldownServiceAdmitProcedure:           {RoleClient},
	cooldownv1connect.CooldownServiceReportProcedure:          {RoleClient},
	cooldownv1connect.CooldownServiceReportBatchProcedure:     {RoleClient},
	cooldownv1connect.CooldownServiceExtendLeaseProcedure:     {RoleClient},
	cooldownv1connect.CooldownServiceGetConnectionProcedure:   {RoleViewer},
	cooldownv1connect.CooldownServiceListConnectionsProcedure: {RoleViewer},
	// Viewers watch for the dashboard; clients watch to keep the mirror of
	// the connections they admit locally (see client.WithMirror).
	cooldownv1connect.CooldownServiceWatchConnectionsProcedure: {RoleViewer, RoleClient},
	cooldownv1connect.AdminServiceResetConnectionProcedure:     {RoleAdmin},
	cooldownv1connect.AdminServiceForceConnectionProcedure:     {RoleAdmin},
}

// NeededRoles names the roles whose tokens may call procedure, for error
// messages ("needs a viewer, admin or operator token").
func NeededRoles(procedure string) []Role {
	var out []Role
	for _, r := range []Role{RoleClient, RoleViewer, RoleAdmin, RoleOperator} {
		if allowed(r, procedureRoles[procedure]) {
			out = append(out, r)
		}
	}
	return out
}

func allowed(r Role, grants []Role) bool {
	return slices.ContainsFunc(grants, r.Allows)
}

// errPermission says which roles a procedure needs.
func errPermission(procedure string, have Role) error {
	need := NeededRoles(procedure)
	names := make([]string, len(need))
	for i, r := range need {
		names[i] = r.String()
	}
	return connect.NewError(connect.CodePermissionDenied,
		fmt.Errorf("%s needs a token of role %s; this token's role is %s", shortProcedure(procedure), orList(names), have))
}

// orList joins names as "a", "a or b", "a, b or c".
func orList(names []string) string {
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// shortProcedure turns /cooldown.v1.CooldownService/Admit into Admit.
func shortProcedure(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

type identityKey struct{}

// callInfo is what the outer (observing) interceptor learns from the inner
// ones about one call: who made it and which connection it was about.
type callInfo struct {
	who   Identity
	authd bool
}

type callInfoKey struct{}

func withCallInfo(ctx context.Context) (context.Context, *callInfo) {
	ci := &callInfo{}
	return context.WithValue(ctx, callInfoKey{}, ci), ci
}

// identity returns the caller that the auth interceptor authenticated. Every
// handler runs behind it, so a missing identity is a wiring bug.
func identity(ctx context.Context) Identity {
	if ci, ok := ctx.Value(callInfoKey{}).(*callInfo); ok && ci.authd {
		return ci.who
	}
	who, _ := ctx.Value(identityKey{}).(Identity)
	return who
}

// authInterceptor authenticates every RPC and checks procedureRoles before
// its handler runs; handlers read the caller with identity(ctx).
func (s *Server) authInterceptor() connect.Interceptor { return authInterceptor{s} }

type authInterceptor struct{ s *Server }

func (i authInterceptor) check(ctx context.Context, procedure string, h http.Header) (context.Context, error) {
	who, err := i.s.authenticate(h)
	if err != nil {
		return ctx, err
	}
	ci, hasCI := ctx.Value(callInfoKey{}).(*callInfo)
	if hasCI {
		ci.who, ci.authd = who, true
	}
	grants, known := procedureRoles[procedure]
	if !known {
		return ctx, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s is not open to any role", shortProcedure(procedure)))
	}
	if !allowed(who.Role, grants) {
		return ctx, errPermission(procedure, who.Role)
	}
	if !who.AllTenants() {
		i.s.metrics.noteTenant(who.Tenant)
	}
	if hasCI {
		// The call's info holds it already (identity reads it there): no
		// context (and no boxed Identity) per call.
		return ctx, nil
	}
	return context.WithValue(ctx, identityKey{}, who), nil
}

func (i authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, err := i.check(ctx, req.Spec().Procedure, req.Header())
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (i authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := i.check(ctx, conn.Spec().Procedure, conn.RequestHeader())
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// anonymous is every caller when auth is off.
var anonymous = Identity{Tenant: keys.DefaultTenant, Role: RoleAdmin, Name: "anonymous"}

// authenticate maps the request's bearer token to an identity. With auth
// off every caller is an admin of the default tenant.
func (s *Server) authenticate(h http.Header) (Identity, error) {
	if s.auth == nil {
		return anonymous, nil
	}
	tok := bearer(h)
	if tok == "" {
		return Identity{}, connect.NewError(connect.CodeUnauthenticated, errors.New("a bearer token is required"))
	}
	who, ok := s.auth.Authenticate(tok)
	if !ok {
		return Identity{}, connect.NewError(connect.CodeUnauthenticated, errors.New("unknown token"))
	}
	if who.AllTenants() != (who.Tenant == "") || !who.AllTenants() && keys.ValidateTenant(who.Tenant) != nil {
		s.log.Error("authenticator returned an invalid tenant; refusing the request", "token_name", who.Name)
		return Identity{}, connect.NewError(connect.CodeInternal, errors.New("misconfigured tenant"))
	}
	return who, nil
}

// bearer returns the request's bearer token, empty when it sent none.
func bearer(h http.Header) string {
	// The auth scheme is case-insensitive (RFC 9110, section 11.1).
	const scheme = "bearer "
	hv := h.Get("Authorization")
	if len(hv) > len(scheme) && strings.EqualFold(hv[:len(scheme)], scheme) {
		return strings.TrimSpace(hv[len(scheme):])
	}
	return ""
}

// bearerIs says whether the request's bearer token hashes to want
// (sha256), compared in constant time: both sides are hashed, so the
// comparison takes the same time whatever the length of what was sent.
func bearerIs(h http.Header, want [sha256.Size]byte) bool {
	got := sha256.Sum256([]byte(bearer(h)))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// Identify authenticates a request's bearer token for the dashboard and
// returns the caller when its role may read connections (viewer, admin or
// operator). With auth off every caller is an admin of the default tenant.
// Its errors are Connect errors: CodeUnauthenticated for a missing or
// unknown token, CodePermissionDenied for a client token.
func (s *Server) Identify(h http.Header) (Identity, error) {
	who, err := s.authenticate(h)
	if err != nil {
		return Identity{}, err
	}
	if !who.Role.Allows(RoleViewer) {
		return Identity{}, connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("the dashboard needs a token of role viewer, admin or operator; this token's role is %s", who.Role))
	}
	if !who.AllTenants() {
		s.metrics.noteTenant(who.Tenant)
	}
	return who, nil
}

// scope is the tenants one read may see: the caller's own, one named
// tenant (operator), or every tenant (operator, all=true).
type scope struct {
	tenant string
	all    bool
}

// readScope resolves the tenant a read names against the caller. A
// tenant-scoped caller may name only its own tenant; the operator may name
// any, or none for every tenant when every is allowed.
func readScope(who Identity, field, tenant string, every bool) (scope, error) {
	if !who.AllTenants() {
		if tenant != "" && tenant != who.Tenant {
			return scope{}, connect.NewError(connect.CodePermissionDenied,
				fmt.Errorf("%s: this token reads its own tenant only; another tenant needs an operator token", field))
		}
		return scope{tenant: who.Tenant}, nil
	}
	if tenant == "" {
		if !every {
			return scope{}, errInvalid(field, "is required with an operator token (which tenant's connection?)")
		}
		return scope{all: true}, nil
	}
	if err := keys.ValidateTenant(tenant); err != nil {
		return scope{}, errInvalid(field, "%v", err)
	}
	return scope{tenant: tenant}, nil
}
