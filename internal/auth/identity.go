package auth

import "strconv"

// Role is what an identity may do.
//
// Roles are separate grants, not a ladder: a client token cannot read the
// dashboard and a viewer token cannot admit calls. Two roles hold more
// than one grant:
//
//   - admin holds every grant within its own tenant (client, viewer and
//     the overrides);
//   - operator holds viewer's grant in every tenant: it reads every
//     tenant's connections and changes none.
//
// [Role.Allows] is the one definition of these rules.
type Role int

// Roles.
const (
	RoleClient   Role = 1 // Admit, Report, ExtendLease, Watch (for the client's mirror)
	RoleViewer   Role = 2 // Get, List, Watch, the dashboard
	RoleAdmin    Role = 3 // overrides and reset, and everything else, in its tenant
	RoleOperator Role = 4 // Get, List, Watch and the dashboard across every tenant
)

var roleNames = map[Role]string{RoleClient: "client", RoleViewer: "viewer", RoleAdmin: "admin", RoleOperator: "operator"}

// String returns the role's name as the tokens file spells it.
func (r Role) String() string {
	if n, ok := roleNames[r]; ok {
		return n
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// ParseRole reads a role name of the tokens file.
func ParseRole(s string) (Role, bool) {
	for r, n := range roleNames {
		if n == s {
			return r, true
		}
	}
	return 0, false
}

// Allows reports whether an identity with role r holds want's grant.
func (r Role) Allows(want Role) bool {
	switch r {
	case RoleAdmin:
		return want != RoleOperator // its own tenant's grants, not every tenant's
	case RoleOperator:
		return want == RoleViewer || want == RoleOperator
	}
	return r == want
}

// Identity is an authenticated caller.
type Identity struct {
	// Tenant is the caller's tenant; empty for the operator role, which is
	// bound to none.
	Tenant string
	Role   Role
	// Name is the token's name, recorded as the actor of overrides.
	Name string
}

// AllTenants reports whether the identity reads every tenant.
func (id Identity) AllTenants() bool { return id.Role == RoleOperator }

// Authenticator maps a bearer token to an identity. It must compare tokens
// in constant time and never log them.
type Authenticator interface {
	Authenticate(token string) (Identity, bool)
}
