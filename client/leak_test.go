package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoCredentialLeaves checks property 5 of the design on the client's
// side: a canary API key never reaches cooldownd's wire or the client's log,
// and the bearer token is never logged.
func TestNoCredentialLeaves(t *testing.T) {
	t.Parallel()
	const canary = "sk-canary-7Hq2XbV9pLr4TzW8nKc1"
	const token = "cdt-token-canary-Yw3Nf8Qa"
	cd := startCooldownd(t, fastPolicy())
	prov := newProvider(t,
		reply{status: 500}, reply{status: 200},
		reply{status: 429, headers: map[string]string{"Retry-After": "1"}}, reply{status: 200},
		reply{status: 401, body: `{"error":{"type":"invalid_api_key"}}`})
	log, logs := newLogger()
	c := newClient(t, cd.URL, WithLogger(log), WithToken(token), WithSalt([]byte("0123456789abcdef")), WithServiceRetry(0))

	cn, err := c.Connection("openai", prov.URL, canary, "gpt-4o", "")
	require.NoError(t, err)
	_, err = c.Connection("openai", prov.URL, canary, "", "key "+canary)
	require.ErrorIs(t, err, ErrInvalidConn, "a label holding the credential is refused")
	assert.NotContains(t, err.Error(), canary)
	_, err = c.Connection("openai", "ftp://"+canary, canary, "", "")
	require.Error(t, err)
	assert.NotContains(t, err.Error(), canary)

	for range 3 {
		resp, err := c.Do(t.Context(), cn, prov.get())
		if err == nil {
			_ = resp.Body.Close()
		}
	}
	fb := conn(t, c, prov.URL, canary+"-fallback", "")
	_, _ = c.DoFallback(t.Context(), []Conn{cn, fb}, func(ctx context.Context, _ Conn) (*http.Response, error) {
		return prov.get()(ctx)
	})
	cd.Stop() // the degradation notice is logged too
	for range DefaultDegradeAfter {
		_, _ = c.Do(t.Context(), cn, prov.get())
	}
	require.Contains(t, logs.String(), "cooldownd unreachable")

	wire := cd.Wire()
	require.True(t, bytes.Contains(wire, cn.ID().Bytes()), "the capture holds the connection id")
	require.Contains(t, string(wire), "Bearer "+token, "the capture holds the token header")
	forms := []string{canary, hex.EncodeToString([]byte(canary)), base64.StdEncoding.EncodeToString([]byte(canary)),
		base64.RawURLEncoding.EncodeToString([]byte(canary))}
	for _, f := range forms {
		assert.NotContains(t, string(wire), f, "a form of the credential reached cooldownd")
		assert.NotContains(t, logs.String(), f, "a form of the credential was logged")
	}
	assert.NotContains(t, logs.String(), token, "the token was logged")
	assert.NotContains(t, logs.String(), cn.ID().String(), "a full id was logged")
}
