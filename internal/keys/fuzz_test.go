package keys_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/keys"
)

// msgAlphabet holds every byte that the fixed error messages use. An input
// with a byte outside it cannot be quoted by an error message.
const msgAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 :.,'-_[]"

// quotable reports whether an error message could contain s by accident.
func quotable(s string) bool {
	return len(s) < 8 || strings.Trim(s, msgAlphabet) == ""
}

func FuzzNormalizeEndpoint(f *testing.F) {
	for _, s := range []string{
		"https://api.openai.com/v1",
		"HTTP://LOCALHOST:80/",
		"https://user:sk-secret@h/v1",
		"http://[fe80::1%25en0]:8080/",
		"https://h/a%2fb/?q#f",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := keys.NormalizeEndpoint(in)
		if err != nil {
			require.ErrorIs(t, err, keys.ErrInvalidEndpoint)
			assert.Empty(t, out)
			if !quotable(in) {
				assert.NotContains(t, err.Error(), in, "error echoes the input")
			}
			return
		}
		again, err := keys.NormalizeEndpoint(out)
		require.NoError(t, err, "output rejected: %q", out)
		assert.Equal(t, out, again, "not idempotent")
		assert.LessOrEqual(t, len(out), keys.MaxEndpointLen)
		assert.False(t, strings.HasSuffix(out, "/"))
		assert.NotContains(t, out, "?")
		assert.NotContains(t, out, "#")

		u, err := url.Parse(out)
		require.NoError(t, err)
		assert.Nil(t, u.User, "userinfo in %q", out)
		assert.NotContains(t, u.Host, "@")
		assert.Contains(t, []string{"http", "https"}, u.Scheme)
		assert.Equal(t, u.Scheme+"://"+u.Host+u.EscapedPath(), out)
	})
}

func FuzzDerive(f *testing.F) {
	f.Add([]byte(nil), "openai", "https://api.openai.com/v1", "sk-test-0123456789", "gpt-4o")
	f.Add([]byte("0123456789abcdef"), " OpenAI ", "HTTPS://API.OPENAI.COM:443/v1/", "sk-test-0123456789", "")
	f.Add([]byte("short"), "x", "http://[::1]:8080", "ab", "c")
	f.Add([]byte(nil), "p", "https://u:sk-in-userinfo-1@h", "sk-in-userinfo-1", "sk-in-userinfo-1")
	f.Fuzz(func(t *testing.T, salt []byte, provider, endpoint, credential, scope string) {
		c := keys.Connection{Provider: provider, Endpoint: endpoint, Credential: credential, Scope: scope}
		// other differs from c in the credential bytes only, so the same
		// checks pass or fail, and nothing printed may differ.
		other := c
		other.Credential = strings.Repeat("\x00", len(credential))
		if other.Credential == credential {
			other.Credential = strings.Repeat("\x01", len(credential))
		}

		assert.Equal(t, other.String(), c.String(), "String depends on the credential")
		assert.Equal(t, other.LogValue().String(), c.LogValue().String(), "LogValue depends on the credential")
		if len(credential) >= 8 && !strings.Contains(other.String(), credential) {
			assert.NotContains(t, c.String(), credential)
		}

		id, err := keys.Derive(salt, c)
		_, otherErr := keys.Derive(salt, other)
		if err != nil {
			require.ErrorIs(t, err, keys.ErrInvalidConnection)
			require.Error(t, otherErr)
			assert.Equal(t, otherErr.Error(), err.Error(), "error depends on the credential")
			assert.True(t, id.IsZero())
			return
		}
		require.NoError(t, otherErr)
		again, err := keys.Derive(salt, c)
		require.NoError(t, err)
		assert.Equal(t, id, again, "not deterministic")
		assert.Len(t, id.Bytes(), 32)
		assert.Len(t, id.String(), 64)
		parsed, err := keys.ParseID(id.String())
		require.NoError(t, err)
		assert.Equal(t, id, parsed)

		n, err := c.Normalize()
		require.NoError(t, err)
		assert.Equal(t, id, derive(t, salt, n), "normalised connection hashes differently")
	})
}
