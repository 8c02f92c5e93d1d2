// Package auth loads cooldownd's bearer tokens from a file and checks them:
// each token is bound to a tenant and a role, held in memory only as its
// SHA-256, compared in constant time, and never logged.
//
// The file is YAML (or JSON, which is YAML):
//
//	tokens:
//	  - name: checkout-prod      # recorded as the actor of admin actions
//	    tenant: team-a           # [a-z0-9_-]{1,64}
//	    role: client             # client | viewer | admin | operator
//	    sha256: 9f86d08...       # hex SHA-256 of the token (preferred), or
//	  - name: ops
//	    tenant: team-a
//	    role: admin
//	    token: "a long random string, at least 16 bytes"
//	  - name: sre-on-call        # operator: reads every tenant, changes none
//	    role: operator           # (no tenant)
//	    sha256: 2c26b46...
//
// A [Watcher] reloads the file when it changes (Kubernetes Secret volumes
// swap it atomically) or on demand (SIGHUP) without dropping connections.
package auth

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"

	"github.com/cooldownd/cooldownd/internal/keys"
)

// ErrInvalidTokens wraps every error of [Parse].
var ErrInvalidTokens = errors.New("auth: invalid tokens file")

// Limits of a tokens file.
const (
	MaxFileBytes   = 1 << 20
	MaxTokens      = 10000
	MinTokenLength = 16
)

type fileEntry struct {
	Name   string `yaml:"name"`
	Tenant string `yaml:"tenant"`
	Role   string `yaml:"role"`
	Token  string `yaml:"token"`
	SHA256 string `yaml:"sha256"`
}

type file struct {
	Tokens []fileEntry `yaml:"tokens"`
}

type entry struct {
	hash [sha256.Size]byte
	who  Identity
}

// Table is a parsed tokens file. It implements [Authenticator].
type Table struct {
	entries []entry
}

// Parse reads a tokens file. Errors name the entry and field, never a token.
func Parse(data []byte) (*Table, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidTokens, MaxFileBytes)
	}
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: not a tokens document (%s)", ErrInvalidTokens, yamlProblem(err))
	}
	if len(f.Tokens) == 0 {
		return nil, fmt.Errorf("%w: no tokens", ErrInvalidTokens)
	}
	if len(f.Tokens) > MaxTokens {
		return nil, fmt.Errorf("%w: more than %d tokens", ErrInvalidTokens, MaxTokens)
	}
	t := &Table{}
	seen := map[[sha256.Size]byte]int{}
	for i, e := range f.Tokens {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: tokens[%d]: %s", ErrInvalidTokens, i, fmt.Sprintf(format, args...))
		}
		if e.Name == "" || len(e.Name) > 64 {
			return nil, bad("name must be 1 to 64 bytes")
		}
		role, ok := ParseRole(e.Role)
		if !ok {
			return nil, bad("role must be client, viewer, admin or operator")
		}
		if role == RoleOperator {
			if e.Tenant != "" {
				return nil, bad("an operator token reads every tenant: leave tenant out")
			}
		} else if err := keys.ValidateTenant(e.Tenant); err != nil {
			return nil, bad("tenant: %v", err)
		}
		var h [sha256.Size]byte
		switch {
		case e.Token != "" && e.SHA256 != "":
			return nil, bad("give token or sha256, not both")
		case e.Token != "":
			if len(e.Token) < MinTokenLength {
				return nil, bad("token must be at least %d bytes", MinTokenLength)
			}
			h = sha256.Sum256([]byte(e.Token))
		case e.SHA256 != "":
			b, err := hex.DecodeString(e.SHA256)
			if err != nil || len(b) != sha256.Size {
				return nil, bad("sha256 must be 64 hex characters")
			}
			copy(h[:], b)
		default:
			return nil, bad("token or sha256 is required")
		}
		if j, dup := seen[h]; dup {
			return nil, bad("same token as tokens[%d]", j)
		}
		seen[h] = i
		t.entries = append(t.entries, entry{hash: h, who: Identity{Tenant: e.Tenant, Role: role, Name: e.Name}})
	}
	return t, nil
}

// yamlProblem keeps a decoder error short and free of the file's content.
func yamlProblem(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("%d field errors, e.g. unknown or mistyped fields", len(te.Errors))
	}
	return "YAML syntax error"
}

// Len returns how many tokens the table holds.
func (t *Table) Len() int { return len(t.entries) }

// Authenticate returns the identity a token is bound to. It hashes the
// token and compares the hash with every entry in constant time.
func (t *Table) Authenticate(token string) (Identity, bool) {
	h := sha256.Sum256([]byte(token))
	var who Identity
	found := 0
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(h[:], e.hash[:]) == 1 {
			who = e.who
			found = 1
		}
	}
	return who, found == 1
}
