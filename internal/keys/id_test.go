package keys_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/keys"
)

// secret is a credential that no output may contain.
const secret = "sk-test-SECRET-0123456789"

// conn returns a valid connection that uses secret.
func conn() keys.Connection {
	return keys.Connection{
		Provider:   "openai",
		Endpoint:   "https://api.openai.com/v1",
		Credential: secret,
		Scope:      "gpt-4o",
	}
}

func TestParseID(t *testing.T) {
	t.Parallel()
	const valid = "00112233445566778899aabbccddeeff00112233445566778899aabbccdda1b2"
	id, err := keys.ParseID(valid)
	require.NoError(t, err)
	assert.Equal(t, valid, id.String())
	assert.Equal(t, "00112233", id.Short())
	assert.False(t, id.IsZero())
	assert.True(t, keys.ID{}.IsZero())

	tests := []struct {
		name string
		in   string
	}{
		{name: "empty", in: ""},
		{name: "too short", in: valid[:63]},
		{name: "too long", in: valid + "0"},
		{name: "upper case", in: strings.ToUpper(valid)},
		{name: "not hex", in: "zz" + valid[2:]},
		{name: "bytes not hex", in: string(id[:]) + string(id[:])},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := keys.ParseID(tt.in)
			require.ErrorIs(t, err, keys.ErrInvalidID)
			assert.True(t, got.IsZero())
		})
	}
}

func TestIDFromBytes(t *testing.T) {
	t.Parallel()
	b := bytes.Repeat([]byte{0xab}, 32)
	id, err := keys.IDFromBytes(b)
	require.NoError(t, err)
	assert.Equal(t, b, id.Bytes())
	id.Bytes()[0] = 0 // Bytes returns a copy.
	assert.Equal(t, b, id.Bytes())

	for _, n := range []int{0, 31, 33} {
		_, err := keys.IDFromBytes(make([]byte, n))
		require.ErrorIs(t, err, keys.ErrInvalidID, "length %d", n)
	}
}

// derive calls [keys.Derive] and requires success.
func derive(t *testing.T, salt []byte, c keys.Connection) keys.ID {
	t.Helper()
	id, err := keys.Derive(salt, c)
	require.NoError(t, err)
	return id
}

func TestDerive(t *testing.T) {
	t.Parallel()
	salt := bytes.Repeat([]byte{7}, keys.MinSaltLen)
	base := derive(t, salt, conn())
	assert.Equal(t, base, derive(t, salt, conn()), "not deterministic")

	same := map[string]func(*keys.Connection){
		"trailing slash":       func(c *keys.Connection) { c.Endpoint += "/" },
		"upper-case host":      func(c *keys.Connection) { c.Endpoint = "HTTPS://API.OPENAI.COM/v1" },
		"default port":         func(c *keys.Connection) { c.Endpoint = "https://api.openai.com:443/v1" },
		"fragment":             func(c *keys.Connection) { c.Endpoint += "#x" },
		"provider case, space": func(c *keys.Connection) { c.Provider = " OpenAI " },
	}
	for name, edit := range same {
		c := conn()
		edit(&c)
		assert.Equal(t, base, derive(t, salt, c), name)
	}

	differ := map[string]func(*keys.Connection){
		"provider":   func(c *keys.Connection) { c.Provider = "azure" },
		"path case":  func(c *keys.Connection) { c.Endpoint = "https://api.openai.com/V1" },
		"port":       func(c *keys.Connection) { c.Endpoint = "https://api.openai.com:8443/v1" },
		"credential": func(c *keys.Connection) { c.Credential += "x" },
		"scope":      func(c *keys.Connection) { c.Scope = "gpt-4o-mini" },
		"no scope":   func(c *keys.Connection) { c.Scope = "" },
		"scope case": func(c *keys.Connection) { c.Scope = "GPT-4o" },
	}
	for name, edit := range differ {
		c := conn()
		edit(&c)
		assert.NotEqual(t, base, derive(t, salt, c), name)
	}

	assert.NotEqual(t, base, derive(t, nil, conn()), "salt must change the id")
	assert.NotEqual(t, base, derive(t, bytes.Repeat([]byte{8}, keys.MinSaltLen), conn()))
	assert.Equal(t, derive(t, nil, conn()), derive(t, []byte{}, conn()), "nil and empty salt")
}

func TestDeriveLengthPrefix(t *testing.T) {
	t.Parallel()
	ab, a := conn(), conn()
	ab.Credential, ab.Scope = "ab", "c"
	a.Credential, a.Scope = "a", "bc"
	assert.NotEqual(t, derive(t, nil, ab), derive(t, nil, a))
}

func TestDeriveInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		salt []byte
		edit func(*keys.Connection)
		is   error
	}{
		{name: "salt 1 byte", salt: []byte{1}, is: keys.ErrInvalidSalt},
		{name: "salt 15 bytes", salt: make([]byte, keys.MinSaltLen-1), is: keys.ErrInvalidSalt},
		{name: "salt too long", salt: make([]byte, keys.MaxSaltLen+1), is: keys.ErrInvalidSalt},
		{name: "empty provider", edit: func(c *keys.Connection) { c.Provider = " " }},
		{name: "long provider", edit: func(c *keys.Connection) { c.Provider = strings.Repeat("p", 65) }},
		{name: "provider with slash", edit: func(c *keys.Connection) { c.Provider = "open/ai" }},
		{name: "provider kelvin sign", edit: func(c *keys.Connection) { c.Provider = "\u212aey" }},
		{name: "empty endpoint", edit: func(c *keys.Connection) { c.Endpoint = "" }, is: keys.ErrInvalidEndpoint},
		{
			name: "endpoint with credential",
			edit: func(c *keys.Connection) { c.Endpoint = "https://u:" + secret + "@h/v1" },
			is:   keys.ErrInvalidEndpoint,
		},
		{name: "empty credential", edit: func(c *keys.Connection) { c.Credential = "" }},
		{
			name: "long credential",
			edit: func(c *keys.Connection) { c.Credential = strings.Repeat(secret, keys.MaxCredentialLen) },
		},
		{name: "long scope", edit: func(c *keys.Connection) { c.Scope = strings.Repeat("s", keys.MaxScopeLen+1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := conn()
			if tt.edit != nil {
				tt.edit(&c)
			}
			id, err := keys.Derive(tt.salt, c)
			require.ErrorIs(t, err, keys.ErrInvalidConnection)
			if tt.is != nil {
				require.ErrorIs(t, err, tt.is)
			}
			assert.True(t, id.IsZero())
			assert.NotContains(t, err.Error(), secret)
		})
	}
}

func TestDeriveLimits(t *testing.T) {
	t.Parallel()
	c := conn()
	c.Provider = strings.Repeat("p", keys.MaxProviderLen)
	c.Credential = strings.Repeat("c", keys.MaxCredentialLen)
	c.Scope = strings.Repeat("s", keys.MaxScopeLen)
	derive(t, make([]byte, keys.MaxSaltLen), c)
	c.Credential = "\x00\xff not UTF-8"
	derive(t, make([]byte, keys.MinSaltLen), c)
}

// Connection redacts itself for slog.
var _ slog.LogValuer = keys.Connection{}

func TestConnectionRedaction(t *testing.T) {
	t.Parallel()
	c := conn()
	c.Endpoint = "HTTPS://api.openai.com/v1/"
	const want = `openai https://api.openai.com/v1 scope="gpt-4o"`
	assert.Equal(t, want, c.String())

	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d", "%10.3v"} {
		for _, arg := range []any{c, &c, []keys.Connection{c}, struct{ C keys.Connection }{c}} {
			got := fmt.Sprintf(verb, arg)
			assert.NotContains(t, got, secret, verb)
			assert.Contains(t, got, want, verb)
		}
	}

	for name, h := range map[string]func(*bytes.Buffer) slog.Handler{
		"json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		var buf bytes.Buffer
		slog.New(h(&buf)).Info("call", "conn", c, "ptr", &c)
		assert.NotContains(t, buf.String(), secret, name)
		assert.Contains(t, buf.String(), "https://api.openai.com/v1", name)
	}

	b, err := json.Marshal(c)
	require.NoError(t, err)
	assert.NotContains(t, string(b), secret)
}

func TestConnectionRedactionInvalid(t *testing.T) {
	t.Parallel()
	c := keys.Connection{Provider: secret + "/", Endpoint: "https://u:" + secret + "@h", Credential: secret}
	assert.Equal(t, "<invalid provider> <invalid endpoint>", c.String())
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("call", "conn", c)
	assert.NotContains(t, buf.String(), secret)
}

// vector is one entry of testdata/vectors.json.
type vector struct {
	Name               string `json:"name"`
	Provider           string `json:"provider"`
	Endpoint           string `json:"endpoint"`
	Credential         string `json:"credential"`
	Scope              string `json:"scope"`
	SaltHex            string `json:"salt_hex"`
	NormalizedEndpoint string `json:"normalized_endpoint"`
	IDHex              string `json:"id_hex"`
}

// loadVectors reads testdata/vectors.json.
func loadVectors(t *testing.T) []vector {
	t.Helper()
	b, err := os.ReadFile("testdata/vectors.json")
	require.NoError(t, err)
	var vs []vector
	require.NoError(t, json.Unmarshal(b, &vs))
	require.GreaterOrEqual(t, len(vs), 12)
	return vs
}

func TestVectors(t *testing.T) {
	t.Parallel()
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			salt, err := hex.DecodeString(v.SaltHex)
			require.NoError(t, err)
			endpoint, err := keys.NormalizeEndpoint(v.Endpoint)
			require.NoError(t, err)
			assert.Equal(t, v.NormalizedEndpoint, endpoint)
			id := derive(t, salt, keys.Connection{
				Provider: v.Provider, Endpoint: v.Endpoint, Credential: v.Credential, Scope: v.Scope,
			})
			assert.Equal(t, v.IDHex, id.String())
			parsed, err := keys.ParseID(v.IDHex)
			require.NoError(t, err)
			assert.Equal(t, id, parsed)
		})
	}
}

// TestVectorIndependent recomputes a vector with crypto/hmac directly, from
// the layout in docs/keys.md, to prove that Derive implements the document.
func TestVectorIndependent(t *testing.T) {
	t.Parallel()
	var v vector
	for _, x := range loadVectors(t) {
		if x.Name == "basic-with-salt-and-scope" {
			v = x
		}
	}
	require.NotEmpty(t, v.Name)
	salt, err := hex.DecodeString(v.SaltHex)
	require.NoError(t, err)

	msg := []byte("cooldown/v1")
	for _, f := range []string{"openai", "https://api.openai.com/v1", v.Credential, "gpt-4o"} {
		msg = binary.BigEndian.AppendUint32(msg, uint32(len(f)))
		msg = append(msg, f...)
	}
	mac := hmac.New(sha256.New, salt)
	mac.Write(msg)
	assert.Equal(t, v.IDHex, hex.EncodeToString(mac.Sum(nil)))
}
