package client

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/cooldownd/cooldownd/internal/keys"
)

// ID is a connection id: the 32-byte keyed hash of a provider endpoint, a
// credential and an optional scope (see docs/keys.md). The zero ID names
// no connection.
type ID [32]byte

// ParseID parses an id in the form of [ID.String]: exactly 64 lower-case
// hex characters. Other input returns an error wrapping [ErrInvalidConn].
func ParseID(s string) (ID, error) {
	id, err := keys.ParseID(s)
	if err != nil {
		return ID{}, fmt.Errorf("%w: %w", ErrInvalidConn, err)
	}
	return ID(id), nil
}

// idFromBytes returns the ID whose bytes are b (32 of them, as on the wire).
func idFromBytes(b []byte) (ID, error) {
	id, err := keys.IDFromBytes(b)
	return ID(id), err
}

// String returns id as 64 lower-case hex characters.
func (id ID) String() string { return keys.ID(id).String() }

// Bytes returns a copy of the 32 bytes of id.
func (id ID) Bytes() []byte { return keys.ID(id).Bytes() }

// Short returns the first 8 hex digits of id, the form people see in
// logs, the dashboard and default labels ("openai gpt-4o 0a1b2c3d…"). It
// is not unique: among 1,000 ids two share it with a chance of about 1 in
// 8,600.
func (id ID) Short() string { return keys.ID(id).Short() }

// IsZero reports whether id is the zero ID.
func (id ID) IsZero() bool { return id == ID{} }

// ErrInvalidConn is wrapped by the errors of [Client.Connection] and of the
// calls given a zero [Conn].
var ErrInvalidConn = errors.New("client: invalid connection")

// MaxLabelLen is the longest label, in bytes, that cooldownd accepts.
const MaxLabelLen = 64

// Conn names one connection: its id and a short human label for the
// dashboard. It never holds the credential, so it may be logged and
// copied freely. The zero Conn is invalid.
type Conn struct {
	id    ID
	label string
}

// NewConn returns the Conn with an id derived elsewhere (for example by a
// client in another language, see docs/keys.md) and a label.
func NewConn(id ID, label string) Conn { return Conn{id: id, label: label} }

// ID returns the connection id.
func (c Conn) ID() ID { return c.id }

// Label returns the label.
func (c Conn) Label() string { return c.label }

// IsZero reports whether c is the zero Conn.
func (c Conn) IsZero() bool { return c.id.IsZero() }

// String returns the label and the short id, e.g. "openai gpt-4o 0a1b2c3d…".
func (c Conn) String() string {
	short := c.id.Short() + "…"
	switch {
	case strings.HasSuffix(c.label, short):
		return c.label
	case c.label == "":
		return short
	}
	return c.label + " " + short
}

// LogValue implements [slog.LogValuer]: the label and the short id.
func (c Conn) LogValue() slog.Value {
	return slog.GroupValue(slog.String("label", c.label), slog.String("id", c.id.Short()))
}

// Connection returns the Conn of one provider connection: the endpoint
// (e.g. "https://api.openai.com/v1") used with one credential (the API
// key), optionally narrowed by a scope (a model, region or deployment).
// The id is derived in this process with the client's salt (see
// [WithSalt]); the credential is hashed, never kept or sent.
//
// An empty label becomes "<provider> <scope> …<short id>". A label must be
// valid UTF-8 of at most [MaxLabelLen] bytes and must not contain the
// credential; cooldownd also rejects labels that look like secrets. Errors
// wrap [ErrInvalidConn] and never contain the credential.
func (c *Client) Connection(provider, endpoint, credential, scope, label string) (Conn, error) {
	kid, err := keys.Derive(c.cfg.salt, keys.Connection{
		Provider: provider, Endpoint: endpoint, Credential: credential, Scope: scope,
	})
	id := ID(kid)
	if err != nil {
		return Conn{}, fmt.Errorf("%w: %w", ErrInvalidConn, err)
	}
	label = strings.TrimSpace(label)
	switch {
	case label == "":
		label = defaultLabel(provider, scope, id)
	case len(label) > MaxLabelLen || !utf8.ValidString(label) || strings.IndexFunc(label, notPrint) >= 0:
		return Conn{}, fmt.Errorf("%w: label must be printable UTF-8 of at most %d bytes", ErrInvalidConn, MaxLabelLen)
	case len(credential) >= 4 && strings.Contains(label, credential):
		return Conn{}, fmt.Errorf("%w: label contains the credential", ErrInvalidConn)
	}
	return Conn{id: id, label: label}, nil
}

// defaultLabel builds "<provider> <scope> <short id>…", cut to MaxLabelLen.
func defaultLabel(provider, scope string, id ID) string {
	parts := []string{strings.ToLower(strings.TrimSpace(provider))}
	if s := strings.TrimSpace(scope); s != "" && utf8.ValidString(s) && strings.IndexFunc(s, notPrint) < 0 {
		parts = append(parts, s)
	}
	suffix := " " + id.Short() + "…"
	l := strings.Join(parts, " ")
	for len(l)+len(suffix) > MaxLabelLen {
		_, size := utf8.DecodeLastRuneInString(l)
		l = l[:len(l)-size]
	}
	return l + suffix
}

func notPrint(r rune) bool { return !unicode.IsPrint(r) }

// validConns checks the candidates of one Admit.
func validConns(cands []Conn) error {
	if len(cands) == 0 || len(cands) > MaxCandidates {
		return fmt.Errorf("%w: need 1 to %d candidates, got %d", ErrInvalidConn, MaxCandidates, len(cands))
	}
	for i, c := range cands {
		if c.IsZero() {
			return fmt.Errorf("%w: candidate %d is the zero Conn", ErrInvalidConn, i)
		}
	}
	return nil
}
