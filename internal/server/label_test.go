package server

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var humanLabels = []struct {
	name  string
	label string
}{
	{"empty", ""},
	{"openai with key suffix", "openai gpt-4o …a1b2"},
	{"anthropic region", "anthropic claude-sonnet-4 eu"},
	{"azure deployment", "azure/my-deployment"},
	{"vertex", "vertex gemini-2.5-pro us-central1"},
	{"bedrock model id", "bedrock anthropic.claude-3-haiku"},
	{"host and model", "api.mistral.ai mistral-large-latest"},
	{"unicode", "déploiement prod 東京"},
	{"exactly 64 bytes", strings.Repeat("a", 64)},
	{"short hex suffix", "openai key …9f3c"},
	{"dated model", "gpt-4o-2024-08-06"},
}

var secretLabels = []struct {
	name  string
	label string
}{
	{"openai key", "sk-proj-abc123"},
	{"openai key upper", "SK-ABC"},
	{"anthropic key", "anthropic sk-ant-api03-xyz"},
	{"stripe-like key", "sk_live_abc"},
	{"bearer", "Bearer x"},
	{"bearer lower", "bearer abc.def"},
	{"basic auth", "Basic dXNlcjpwdw=="},
	{"jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"},
	{"jwt after text", "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln"},
	{"url userinfo", "https://user:pw@host"},
	{"redis url password", "redis://:hunter2@cache:6379"},
	{"random key 40 chars", "Zq3xT9vLm2Pa8RkW4nYc7HbJ5dFs1GeU6tAo0iXw"},
	{"hex key 40 chars", "a8f5f167f44f4964e6c998dee827110c3b1a9c7d"},
	{"random key after provider", "openai Zq3xT9vLm2Pa8RkW4nYc7Hb"},
	{"google api key", "AIzaSyD-abcdefghijklmnop"},
	{"aws access key", "AKIAIOSFODNN7EXAMPLE"},
	{"github token", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"},
	{"slack token", "xoxb-123-456"},
	{"api_key param", "x?api_key=abc"},
	{"pem", "-----BEGIN PRIVATE KEY-----"},
	{"too long", strings.Repeat("a", 65)},
	{"newline", "openai\ngpt-4o"},
	{"nul", "openai\x00"},
	{"invalid utf-8", "openai \xff"},
}

func TestCheckLabel(t *testing.T) {
	t.Parallel()
	for _, tt := range humanLabels {
		t.Run("accept/"+tt.name, func(t *testing.T) {
			t.Parallel()
			assert.NoError(t, checkLabel(tt.label))
		})
	}
	for _, tt := range secretLabels {
		t.Run("reject/"+tt.name, func(t *testing.T) {
			t.Parallel()
			err := checkLabel(tt.label)
			require.Error(t, err)
			// The message explains the rule and never echoes the label.
			if len(tt.label) >= 4 {
				assert.NotContains(t, err.Error(), tt.label)
			}
		})
	}
}

// FuzzCheckLabel checks that checkLabel never panics and that whatever it
// accepts is short, printable text with none of the secret markers.
func FuzzCheckLabel(f *testing.F) {
	for _, tt := range humanLabels {
		f.Add(tt.label)
	}
	for _, tt := range secretLabels {
		f.Add(tt.label)
	}
	f.Fuzz(func(t *testing.T, label string) {
		if checkLabel(label) != nil {
			return
		}
		if len(label) > MaxLabelLen {
			t.Fatalf("accepted a %d-byte label", len(label))
		}
		if !utf8.ValidString(label) {
			t.Fatalf("accepted invalid UTF-8 %q", label)
		}
		for _, r := range label {
			if !unicode.IsPrint(r) {
				t.Fatalf("accepted unprintable %U in %q", r, label)
			}
		}
		low := strings.ToLower(label)
		for _, marker := range []string{"sk-", "bearer "} {
			if strings.Contains(low, marker) {
				t.Fatalf("accepted %q, which contains %q", label, marker)
			}
		}
		if strings.Contains(label, "://") && strings.Contains(label, "@") {
			t.Fatalf("accepted URL credentials in %q", label)
		}
	})
}
