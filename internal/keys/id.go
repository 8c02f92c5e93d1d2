package keys

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"strconv"
	"strings"
)

// Sentinel errors. Match them with [errors.Is]; messages never contain a
// credential or a rejected endpoint.
var (
	// ErrInvalidID is wrapped by [ParseID] and [IDFromBytes].
	ErrInvalidID = errors.New("keys: invalid id")
	// ErrInvalidEndpoint is wrapped by [NormalizeEndpoint], and by [Derive]
	// and [Connection.Normalize] when the endpoint is rejected.
	ErrInvalidEndpoint = errors.New("keys: invalid endpoint")
	// ErrInvalidConnection is wrapped by every error of [Derive] and
	// [Connection.Normalize].
	ErrInvalidConnection = errors.New("keys: invalid connection")
	// ErrInvalidSalt is wrapped by [Derive] when the salt has a bad length.
	ErrInvalidSalt = errors.New("keys: invalid salt")
)

// Limits on the inputs of [Derive].
const (
	// MinSaltLen is the shortest non-empty salt.
	MinSaltLen = 16
	// MaxSaltLen is the longest salt.
	MaxSaltLen = 1024
	// MaxProviderLen is the longest provider name.
	MaxProviderLen = 64
	// MaxCredentialLen is the longest credential, in bytes.
	MaxCredentialLen = 64 << 10
	// MaxScopeLen is the longest scope, in bytes.
	MaxScopeLen = 256
)

// Domain is the ASCII prefix of every message that [Derive] hashes. It
// separates these ids from any other use of the salt and versions the layout.
const Domain = "cooldown/v1"

// ID identifies a connection: the HMAC-SHA256 computed by [Derive]. The zero
// ID is never the result of Derive in practice.
type ID [32]byte

// ParseID parses the form returned by [ID.String]: exactly 64 lower-case hex
// characters. Other input returns an error wrapping [ErrInvalidID].
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 2*len(id) {
		return ID{}, fmt.Errorf("%w: length %d, want 64 hex characters", ErrInvalidID, len(s))
	}
	if !allBytes(s, func(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }) {
		return ID{}, fmt.Errorf("%w: not lower-case hex", ErrInvalidID)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return ID{}, fmt.Errorf("%w: not lower-case hex", ErrInvalidID)
	}
	return id, nil
}

// IDFromBytes returns the ID whose bytes are b. It returns an error wrapping
// [ErrInvalidID] unless len(b) is 32.
func IDFromBytes(b []byte) (ID, error) {
	var id ID
	if len(b) != len(id) {
		return ID{}, fmt.Errorf("%w: length %d, want 32 bytes", ErrInvalidID, len(b))
	}
	copy(id[:], b)
	return id, nil
}

// String returns id as 64 lower-case hex characters (one allocation: the
// string).
func (id ID) String() string {
	var b [2 * len(ID{})]byte
	hex.Encode(b[:], id[:])
	return string(b[:])
}

// Bytes returns a copy of the 32 bytes of id.
func (id ID) Bytes() []byte { return append([]byte(nil), id[:]...) }

// ShortLen is how many hex digits of an id people see: the first 8, in
// logs, the dashboard, cooldownctl and default labels alike.
const ShortLen = 8

// Short returns the first [ShortLen] hex digits of id, the form people
// see, as in the label "openai gpt-4o 0a1b2c3d…". It is not unique: among
// 1,000 ids two share it with a chance of about 1 in 8,600.
func (id ID) Short() string { return hex.EncodeToString(id[:ShortLen/2]) }

// IsZero reports whether id is the zero ID.
func (id ID) IsZero() bool { return id == ID{} }

// Connection is what fails together: one provider endpoint used with one
// credential, optionally narrowed by a scope. [Derive] turns it into an [ID].
//
// String, Format and LogValue never print the credential, so a Connection can
// be logged. fmt cannot call them on a Connection kept in an unexported field
// of another struct, so do not print such a struct with %v.
type Connection struct {
	// Provider names the API, e.g. "openai". It is trimmed and lower-cased,
	// then must be 1..64 characters of [a-z0-9._-].
	Provider string
	// Endpoint is the base URL, e.g. "https://api.openai.com/v1". It is
	// hashed in the form returned by [NormalizeEndpoint].
	Endpoint string
	// Credential is the API key. It is required and may hold any bytes, up to
	// [MaxCredentialLen].
	Credential string `json:"-"`
	// Scope optionally narrows the connection: a model, region or
	// deployment, e.g. "gpt-4o". It is kept verbatim, up to [MaxScopeLen] bytes.
	Scope string
}

// Normalize validates c and returns it with Provider and Endpoint in the
// canonical form that [Derive] hashes. Errors wrap [ErrInvalidConnection],
// and also [ErrInvalidEndpoint] when the endpoint is the problem.
func (c Connection) Normalize() (Connection, error) {
	provider, ok := normalizeProvider(c.Provider)
	if !ok {
		return Connection{}, invalid("keys: invalid connection: provider must be 1..64 characters of [a-z0-9._-]",
			ErrInvalidConnection)
	}
	endpoint, reason := normalizeEndpoint(c.Endpoint)
	if reason != "" {
		return Connection{}, invalid("keys: invalid connection: endpoint: "+reason,
			ErrInvalidConnection, ErrInvalidEndpoint)
	}
	switch {
	case c.Credential == "":
		return Connection{}, invalid("keys: invalid connection: credential is empty", ErrInvalidConnection)
	case len(c.Credential) > MaxCredentialLen:
		return Connection{}, invalid("keys: invalid connection: credential is longer than 65536 bytes",
			ErrInvalidConnection)
	case len(c.Scope) > MaxScopeLen:
		return Connection{}, invalid("keys: invalid connection: scope is longer than 256 bytes",
			ErrInvalidConnection)
	}
	return Connection{Provider: provider, Endpoint: endpoint, Credential: c.Credential, Scope: c.Scope}, nil
}

// Derive returns the ID of c: HMAC-SHA256 keyed with salt over [Domain]
// followed by the normalised provider, endpoint, credential and scope, each
// preceded by its length as a 4-byte big-endian integer. docs/keys.md
// specifies the layout.
//
// The salt may be empty (HMAC with an empty key) or 16..1024 bytes; otherwise
// the error wraps [ErrInvalidSalt] and [ErrInvalidConnection]. An invalid
// connection returns the error of [Connection.Normalize].
func Derive(salt []byte, c Connection) (ID, error) {
	if n := len(salt); n != 0 && (n < MinSaltLen || n > MaxSaltLen) {
		return ID{}, invalid("keys: invalid salt: length must be 0 or 16..1024 bytes",
			ErrInvalidSalt, ErrInvalidConnection)
	}
	n, err := c.Normalize()
	if err != nil {
		return ID{}, err
	}
	mac := hmac.New(sha256.New, salt)
	mac.Write([]byte(Domain))
	for _, field := range []string{n.Provider, n.Endpoint, n.Credential, n.Scope} {
		writeField(mac, field)
	}
	var id ID
	mac.Sum(id[:0])
	return id, nil
}

// writeField writes len(s) as a 4-byte big-endian integer, then s. The
// callers bound len(s) far below 2^32.
func writeField(h hash.Hash, s string) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(s))) //nolint:gosec // bounded by the limits above
	h.Write(n[:])
	io.WriteString(h, s)
}

// String describes c without its credential: the normalised provider and
// endpoint and the quoted scope, e.g. `openai https://api.openai.com/v1
// scope="gpt-4o"`. A field that fails validation prints as a placeholder,
// never as its value.
func (c Connection) String() string {
	provider, endpoint, scope := c.redacted()
	var b strings.Builder
	b.WriteString(provider)
	b.WriteByte(' ')
	b.WriteString(endpoint)
	if scope != "" {
		b.WriteString(" scope=")
		b.WriteString(strconv.Quote(scope))
	}
	return b.String()
}

// Format implements [fmt.Formatter] so that every verb, %#v and %d included,
// prints [Connection.String] and never the credential.
func (c Connection) Format(f fmt.State, _ rune) {
	io.WriteString(f, c.String())
}

// LogValue implements [slog.LogValuer]: a group of provider, endpoint and
// (when set) scope, as [Connection.String] prints them, without the
// credential.
func (c Connection) LogValue() slog.Value {
	provider, endpoint, scope := c.redacted()
	attrs := []slog.Attr{slog.String("provider", provider), slog.String("endpoint", endpoint)}
	if scope != "" {
		attrs = append(attrs, slog.String("scope", scope))
	}
	return slog.GroupValue(attrs...)
}

// redacted returns the printable fields of c, with placeholders for invalid
// ones.
func (c Connection) redacted() (provider, endpoint, scope string) {
	provider, ok := normalizeProvider(c.Provider)
	if !ok {
		provider = "<invalid provider>"
	}
	endpoint, reason := normalizeEndpoint(c.Endpoint)
	if reason != "" {
		endpoint = "<invalid endpoint>"
	}
	scope = c.Scope
	if len(scope) > MaxScopeLen {
		scope = "<invalid scope>"
	}
	return provider, endpoint, scope
}

// normalizeProvider trims and lower-cases p (ASCII only) and reports whether
// the result is a valid provider name.
func normalizeProvider(p string) (string, bool) {
	p = asciiLower(strings.Trim(p, asciiSpace))
	ok := p != "" && len(p) <= MaxProviderLen && allBytes(p, isNameByte)
	return p, ok
}

// invalidError is a validation failure. Its message names the part that was
// wrong, never the value; it matches each of its sentinels.
type invalidError struct {
	msg       string
	sentinels []error
}

// invalid returns an [invalidError].
func invalid(msg string, sentinels ...error) error {
	return &invalidError{msg: msg, sentinels: sentinels}
}

// Error returns the message.
func (e *invalidError) Error() string { return e.msg }

// Unwrap returns the sentinels, for [errors.Is].
func (e *invalidError) Unwrap() []error { return e.sentinels }
