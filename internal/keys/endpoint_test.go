package keys_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/keys"
)

func TestNormalizeEndpoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "already canonical", in: "https://api.openai.com/v1", want: "https://api.openai.com/v1"},
		{name: "trailing slash", in: "https://api.openai.com/v1/", want: "https://api.openai.com/v1"},
		{name: "many trailing slashes", in: "https://api.openai.com/v1///", want: "https://api.openai.com/v1"},
		{name: "root slash", in: "https://api.openai.com/", want: "https://api.openai.com"},
		{name: "upper-case scheme and host", in: "HTTPS://API.OpenAI.COM/v1", want: "https://api.openai.com/v1"},
		{name: "path case kept", in: "https://h/V1/Chat", want: "https://h/V1/Chat"},
		{name: "default https port", in: "https://api.openai.com:443/v1", want: "https://api.openai.com/v1"},
		{name: "default http port", in: "http://localhost:80", want: "http://localhost"},
		{name: "https on port 80 kept", in: "https://h:80", want: "https://h:80"},
		{name: "other port kept", in: "http://localhost:8080/", want: "http://localhost:8080"},
		{name: "port leading zeros", in: "http://h:08080", want: "http://h:8080"},
		{name: "empty port", in: "https://h:/v1", want: "https://h/v1"},
		{name: "fragment dropped", in: "https://h/v1#frag", want: "https://h/v1"},
		{name: "empty fragment dropped", in: "https://h/v1/#", want: "https://h/v1"},
		{name: "surrounding whitespace", in: " \thttps://h/v1\r\n", want: "https://h/v1"},
		{name: "ipv4", in: "http://127.0.0.1:11434", want: "http://127.0.0.1:11434"},
		{name: "ipv6 keeps brackets", in: "http://[::1]:8080/", want: "http://[::1]:8080"},
		{name: "ipv6 canonical form", in: "https://[2001:0DB8:0:0::1]:443/v1", want: "https://[2001:db8::1]/v1"},
		{name: "percent-escape upper-cased", in: "https://h/a%2fb/%e2%82%ac", want: "https://h/a%2Fb/%E2%82%AC"},
		{name: "sub-delims in path", in: "https://h/a:b@c!$&'()*+,;=~", want: "https://h/a:b@c!$&'()*+,;=~"},
		{name: "underscore host", in: "http://my_llm.internal", want: "http://my_llm.internal"},
		{name: "dots inside segment", in: "https://h/v1.0/..x", want: "https://h/v1.0/..x"},
		{name: "double slash kept", in: "https://h//v1", want: "https://h//v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := keys.NormalizeEndpoint(tt.in)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			again, err := keys.NormalizeEndpoint(got)
			require.NoError(t, err)
			assert.Equal(t, got, again, "not idempotent")
		})
	}
}

func TestNormalizeEndpointInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		in     string
		reason string
	}{
		{name: "empty", in: "", reason: "empty"},
		{name: "blank", in: " \t ", reason: "empty"},
		{name: "too long", in: "https://h/" + strings.Repeat("a", keys.MaxEndpointLen), reason: "longer than"},
		{name: "relative", in: "api.openai.com/v1", reason: "scheme"},
		{name: "ftp scheme", in: "ftp://h/v1", reason: "scheme"},
		{name: "opaque", in: "https:h", reason: "host is missing"},
		{name: "no host", in: "https:///v1", reason: "host is missing"},
		{name: "userinfo password", in: "https://user:sk-secret@h/v1", reason: "userinfo"},
		{name: "userinfo empty", in: "https://@h/v1", reason: "userinfo"},
		{name: "query", in: "https://h/v1?key=sk-secret", reason: "query"},
		{name: "empty query", in: "https://h/v1?", reason: "query"},
		{name: "unicode host", in: "https://bücher.example/v1", reason: "host"},
		{name: "percent-encoded host", in: "https://%C3%BC.example", reason: "host"},
		{name: "ipv6 zone", in: "http://[fe80::1%25en0]/", reason: "IPv6"},
		{name: "ipv4 in brackets", in: "http://[127.0.0.1]/", reason: "not a valid"},
		{name: "port zero", in: "http://h:0", reason: "port"},
		{name: "port too big", in: "http://h:65536", reason: "port"},
		{name: "port huge", in: "http://h:99999999999999999999999", reason: "port"},
		{name: "space in path", in: "https://h/a b", reason: "path"},
		{name: "bad escape", in: "https://h/a%zz", reason: "not a valid"},
		{name: "truncated escape", in: "https://h/a%2", reason: "not a valid"},
		{name: "bracket in path", in: "https://h/a[b]", reason: "path"},
		{name: "dot segment", in: "https://h/v1/./x", reason: "segments"},
		{name: "dot-dot segment", in: "https://h/v1/..", reason: "segments"},
		{name: "encoded dot-dot", in: "https://h/v1/%2e%2E/x", reason: "segments"},
		{name: "control character", in: "https://h/v1\x00", reason: "not a valid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := keys.NormalizeEndpoint(tt.in)
			require.ErrorIs(t, err, keys.ErrInvalidEndpoint)
			assert.Empty(t, got)
			assert.Contains(t, err.Error(), tt.reason)
			assert.NotContains(t, err.Error(), "secret")
			if len(tt.in) >= 4 {
				assert.NotContains(t, err.Error(), tt.in)
			}
		})
	}
}
