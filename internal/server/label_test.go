package server

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"
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
	{"hugging face model id", "together meta-llama/Meta-Llama-3.1-70B-Instruct"},
	{"qwen", "hf Qwen/Qwen2.5-72B-Instruct"},
	{"bedrock inference profile", "bedrock us.anthropic.claude-3-5-sonnet-20241022-v2:0"},
	{"dated claude", "claude-3-5-sonnet-20241022"},
	{"vertex asia region", "vertex asia-northeast1 gemini-1.5-flash"},
	{"word ending in sk", "risk-scoring gpt-4o"},
	{"task runner", "task-runner openai"},
	{"azure region and deployment", "azure eastus2 gpt-4o-mini prod"},
	{"openrouter", "openrouter openai/gpt-4o"},
	{"groq", "groq llama-3.1-8b-instant"},
	{"realtime preview", "gpt-4o-realtime-preview-2024-12-17"},
	{"embedding", "text-embedding-3-large"},
	{"key suffix with colon", "prod key: …9f3c"},
	{"camel case deployment", "azure MyCompanyGpt4oDeployment"},
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

// keyShapes are credentials in the shapes the major providers and clouds
// issue (fake values of the real length and alphabet). Labels are capped at
// 64 bytes, so each is screened whole by looksSecret and, cut to 64 bytes,
// after a provider word by checkLabel: the screen itself must catch them,
// not the length cap.
var keyShapes = []struct {
	name string
	key  string
}{
	{"openai legacy", "sk-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0fGh3iJk6l"},
	{"openai project", "sk-proj-" + strings.Repeat("Xq3_Lm-N8pR2sT5vW9yZ1bC4dF", 6)},
	{"openai service account", "sk-svcacct-" + strings.Repeat("aB3dE6gH9jK2mN5p", 8)},
	{"openai admin", "sk-admin-" + strings.Repeat("Qw3rTy7uI0pA", 10)},
	{"anthropic", "sk-ant-api03-" + strings.Repeat("Ab3-dE6_gH9jK2mN5pQ8", 5) + "AA"},
	{"anthropic admin", "sk-ant-admin01-" + strings.Repeat("Zx9cV8bN7m", 9) + "AA"},
	{"google api key", "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW"},
	{"google oauth access token", "ya29.a0AfH6SMBx3kLm9nPq2rSt5uVw8xYz1AbC4dEf7GhI0jKl"},
	{"google oauth client secret", "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"},
	{"aws access key id", "AKIAIOSFODNN7EXAMPLE"},
	{"aws temporary key id", "ASIAY34FZKBOKMUTVV7A"},
	{"aws secret access key", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
	{"aws secret with plus", "k7Hq+2mZ9xW4/pL8vN3cR6tY1bF5jD0sG+aE2uIo"},
	{"aws session token", "FwoGZXIvYXdzEJr//////////wEaDM3k+Lq9Xp2Rt5Vw8yZ1AbC4dEf7GhI0jKlMnOp"},
	{"github classic", "ghp_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"},
	{"github oauth", "gho_16C7e42F292c6912E7710c838347Ae178B4a"},
	{"github fine-grained", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUV"},
	{"gitlab", "glpat-xY3zA6bC9dE2fG5hJ8kL"},
	{"slack bot", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"},
	{"slack user", "xoxp-123456789012-123456789012-123456789012-0123456789abcdef0123456789abcdef"},
	{"slack app", "xapp-1-A0123456789-1234567890123-0123456789abcdef0123456789abcdef"},
	{"slack webhook", "https://hooks.slack.com/services/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"},
	{"stripe secret", "sk_live_51HqLmN8pR2sT5vW9yZ1bC4dF7gJ0kM3nP6qS9tV2wY5zA8cE1fH4jK7"},
	{"stripe restricted", "rk_live_51HqLmN8pR2sT5vW9yZ1bC4dF"},
	{"stripe webhook", "whsec_xY3zA6bC9dE2fG5hJ8kLmN1pQ4rS7tV0"},
	{"azure openai key", "4f8a2c9e1b7d4e6fa3c5b8d0e2f41a6c"},
	{"azure openai key 84", "7Xq3LmN8pR2sT5vW9yZ1bC4dF7gJ0kM3nP6qS9tV2wY5zA8cE1fH4jK7JQQJ99BAACYeBjFXJ3w3AAABACOGa1b2"},
	{"azure storage account key", "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="},
	{"azure storage connection string", "AccountName=acct;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSR=="},
	{"azure sas", "sv=2021-08-06&ss=b&srt=sco&sp=rwdlac&sig=abc%2Bdef%3D"},
	{"azure ad client secret", "abc8Q~dEfGhIjKlMnOpQrStUvWxYz0123456789_-"},
	{"jwt", "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVP"},
	{"bearer", "Authorization: Bearer abc"},
	{"url userinfo", "https://admin:hunter2@api.example.com/v1"},
	{"user and password at host", "admin:hunter2@cache.internal"},
	{"hugging face", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"},
	{"groq", "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"},
	{"mistral", "Zq3xT9vLm2Pa8RkW4nYc7HbJ5dFs1GeU"},
	{"cohere", "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6kL9m"},
	{"together", "4f8a2c9e1b7d4e6fa3c5b8d0e2f41a6c7d9e1f3a5b7c9d1e3f5a7b9c1d3e5f7a"},
	{"deepseek", "sk-4f8a2c9e1b7d4e6fa3c5b8d0e2f41a6c"},
	{"openrouter", "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"},
	{"xai", "xai-" + strings.Repeat("aB3dE6gH9jK2mN5pQ8sT", 4)},
	{"replicate", "r8_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6k"},
	{"perplexity", "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"},
	{"fireworks", "fw_3ZbQ8sT1vW4yZ7bC0eF3hJ6k"},
	{"cerebras", "csk-aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6kL9m"},
	{"pinecone", "pcsk_2Ab3dE_6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6kL9mN2pQ5sT8vW1yZ4"},
	{"digitalocean", "dop_v1_4f8a2c9e1b7d4e6fa3c5b8d0e2f41a6c7d9e1f3a5b7c9d1e3f5a7b9c1d3e5f7a"},
	{"sendgrid", "SG.aB3dE6gH9jK2mN5pQ8sT1v.W4yZ7bC0eF3hJ6kL9mN2pQ5sT8vW1yZ4aB3dE6gH9j"},
	{"twilio api key", "SK4f8a2c9e1b7d4e6fa3c5b8d0e2f41a6c"},
	{"databricks", "dapi4f8a2c9e1b7d4e6fa3c5b8d0e2f41a6c"},
	{"npm", "npm_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"},
	{"pem private key", "-----BEGIN RSA PRIVATE KEY-----"},
}

// TestKeyShapes: every provider's and cloud's key shape is refused, whole
// and as the tail of a label, in one piece or split on '/'.
func TestKeyShapes(t *testing.T) {
	t.Parallel()
	for _, tt := range keyShapes {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.True(t, looksSecret(tt.key), "whole key")
			label := "openai " + tt.key
			if len(label) > MaxLabelLen {
				label = label[:MaxLabelLen]
			}
			assert.ErrorIs(t, checkLabel(label), errSecretLabel, "label %q", label)
			if len(tt.key) >= 40 {
				// What a caller might paste: an id/… path with the key last.
				path := "proj/" + tt.key
				assert.ErrorIs(t, checkLabel(path[:min(len(path), MaxLabelLen)]), errSecretLabel)
			}
		})
	}
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

// Independent statements of two rules, for the fuzz target.
var (
	skAtWordStart = regexp.MustCompile(`(^|[^a-z0-9])sk-`)
	akia          = regexp.MustCompile(`(^|[^A-Za-z0-9])AKIA[A-Z0-9]{16}`)
)

// FuzzCheckLabel checks that checkLabel never panics and that whatever it
// accepts is short, printable text with none of the secret markers.
func FuzzCheckLabel(f *testing.F) {
	for _, tt := range humanLabels {
		f.Add(tt.label)
	}
	for _, tt := range secretLabels {
		f.Add(tt.label)
	}
	for _, tt := range keyShapes {
		f.Add(tt.key[:min(len(tt.key), MaxLabelLen)])
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
		if strings.Contains(low, "bearer ") {
			t.Fatalf("accepted %q, which contains a bearer token", label)
		}
		if skAtWordStart.MatchString(low) {
			t.Fatalf("accepted %q, which holds an sk- key", label)
		}
		if strings.Contains(label, "AKIA") && akia.MatchString(label) {
			t.Fatalf("accepted %q, which holds an AWS access key id", label)
		}
		if strings.Contains(label, "://") && strings.Contains(label, "@") {
			t.Fatalf("accepted URL credentials in %q", label)
		}
	})
}

// labelFixture is testdata/labels.json at the repository root: the screen's
// rule on obfuscated keys (its comment says it), specified once.
type labelFixture struct {
	Refuse []struct{ Name, Label string } `json:"refuse"`
	Accept []struct{ Name, Label string } `json:"accept"`
}

func loadLabelFixture(tb testing.TB) labelFixture {
	tb.Helper()
	raw, err := os.ReadFile("../../testdata/labels.json")
	require.NoError(tb, err)
	var fx labelFixture
	require.NoError(tb, json.Unmarshal(raw, &fx))
	require.NotEmpty(tb, fx.Refuse)
	require.NotEmpty(tb, fx.Accept)
	return fx
}

// TestLabelFixture: obfuscated keys of the major providers (full-width,
// spaced out, other dashes, doubled separators) are refused with the
// secret-label message, which never quotes them; clean labels, model names
// first, pass.
func TestLabelFixture(t *testing.T) {
	t.Parallel()
	fx := loadLabelFixture(t)
	for _, tt := range fx.Refuse {
		t.Run("refuse/"+tt.Name, func(t *testing.T) {
			t.Parallel()
			require.LessOrEqual(t, len(tt.Label), MaxLabelLen, "the length cap must not be what refuses it")
			err := screenLabel(tt.Label)
			require.ErrorIs(t, err, errSecretLabel)
			assert.NotContains(t, err.Error(), tt.Label)
			// The fuzz target's oracle states the providers' key shapes
			// independently: it must see these too.
			if slices.ContainsFunc(oracleProviders, func(p string) bool { return strings.HasPrefix(tt.Name, p) }) {
				assert.True(t, oracleKeyShape(tt.Label), "the fuzz oracle sees no key shape")
			}
		})
	}
	for _, tt := range fx.Accept {
		t.Run("accept/"+tt.Name, func(t *testing.T) {
			t.Parallel()
			assert.NoError(t, screenLabel(tt.Label))
			assert.False(t, oracleKeyShape(tt.Label), "the fuzz oracle would demand a clean label be refused")
		})
	}
}

// oracleProviders name the fixture's cases whose shapes oracleKeyShape
// states (a case's name starts with its provider).
var oracleProviders = []string{"openai", "anthropic", "google", "aws access key id", "azure openai key, in groups",
	"azure openai key, full-width", "groq", "hugging face", "xai", "github", "gitlab"}

// An independent statement of the normalisation and of the key shapes of
// the major providers, for FuzzLabelNormalised: NFKC, the look-alike
// letters of the shapes' own letters folded, dashes to '-'; from every word
// start, whitespace out, separator runs to their first and a mark between
// two single letters dropped; and a prefix without its separators at a
// word spelled out so.
var (
	oracleFold = strings.NewReplacer(
		"ѕ", "s", "Ѕ", "S", "к", "k", "К", "K", "κ", "k", "Κ", "K", "р", "p", "Р", "P", "ρ", "p", "Ρ", "P",
		"о", "o", "О", "O", "ο", "o", "Ο", "O", "ј", "j", "Ј", "J", "а", "a", "А", "A", "α", "a", "Α", "A",
		"і", "i", "І", "I", "ι", "i", "Ι", "I", "һ", "h", "Н", "H", "Η", "H", "х", "x", "Х", "X", "χ", "x", "Χ", "X",
		"ı", "i")
	oracleDash    = regexp.MustCompile(`[\p{Pd}\x{2212}]`)
	oracleSpace   = regexp.MustCompile(`\s+`)
	oracleSepRun  = regexp.MustCompile(`([-_.])[-_.]+`)
	oracleSpelled = regexp.MustCompile(`^[A-Za-z0-9][-_.·•*|/\\,:;+~'][A-Za-z0-9]($|[^A-Za-z0-9])`)
	oracleLower   = regexp.MustCompile(`^(sk-proj-|sk-ant-|sk-|aiza[0-9a-z_-]{8}|gsk_[a-z0-9]{8}|hf_[a-z0-9]{8}|xai-[a-z0-9]{8}|ghp_[a-z0-9]{4}|glpat-)`)
	oracleJoined  = regexp.MustCompile(`^sk(proj|ant)`)
	oracleCased   = regexp.MustCompile(`^(AKIA|ASIA)[A-Z0-9]{12}`)
	oracleAzure   = regexp.MustCompile(`[0-9a-f]{32}`)
	oracleAlnum   = regexp.MustCompile(`[A-Za-z0-9]+|.`)
)

// oracleJoin drops each mark that stands right between two single letters
// or digits ("s-k-proj" is "sk-proj", "s - k" stays).
func oracleJoin(s string) string {
	parts := oracleAlnum.FindAllString(s, -1)
	alone := func(i int) bool { return i >= 0 && i < len(parts) && isAlnum(rune(parts[i][0])) && len(parts[i]) == 1 }
	var b strings.Builder
	for i, p := range parts {
		if alone(i-1) && alone(i+1) && oracleSpelled.MatchString(parts[i-1]+p+parts[i+1]) {
			continue
		}
		b.WriteString(p)
	}
	return b.String()
}

func oracleKeyShape(label string) bool {
	n := oracleDash.ReplaceAllString(oracleFold.Replace(norm.NFKC.String(label)), "-")
	squeeze := func(s string) string {
		return oracleSepRun.ReplaceAllString(oracleSpace.ReplaceAllString(oracleJoin(s), ""), "$1")
	}
	for i := 0; i < len(n); i++ {
		wordStart := i == 0 || !isAlnum(rune(n[i-1]))
		if !wordStart || !isAlnum(rune(n[i])) {
			continue
		}
		sq := squeeze(n[i:])
		if oracleLower.MatchString(strings.ToLower(sq)) || oracleCased.MatchString(sq) {
			return true
		}
		if oracleSpelled.MatchString(n[i:]) && oracleJoined.MatchString(strings.ToLower(sq)) {
			return true
		}
	}
	sq := strings.ToLower(squeeze(n))
	for _, h := range oracleAzure.FindAllString(sq, -1) {
		if strings.ContainsAny(h, "0123456789") && strings.ContainsAny(h, "abcdef") {
			return true
		}
	}
	return false
}

// FuzzLabelNormalised: whatever holds a key shape of a major provider once
// normalised (oracleKeyShape) is refused, however it was written; the
// screen never panics.
func FuzzLabelNormalised(f *testing.F) {
	fx := loadLabelFixture(f)
	for _, tt := range fx.Refuse {
		f.Add(tt.Label)
	}
	for _, tt := range fx.Accept {
		f.Add(tt.Label)
	}
	for _, tt := range keyShapes {
		f.Add(tt.key[:min(len(tt.key), MaxLabelLen)])
	}
	// Obfuscations of the shapes the oracle states: a look-alike letter
	// from another script, the prefix's letters separated by punctuation.
	for _, key := range []string{"sk-proj-abcdEFGH1234ijkl", "sk-ant-api03-Ab3dE6gH9jK2", "AKIAIOSFODNN7EXAMPLE",
		"AIzaSyA1b2C3d4E5f6G7h8", "gsk_aB3dE6gH9jK2mN5p", "xai-aB3dE6gH9jK2mN5p"} {
		for _, swap := range [][2]string{{"s", "ѕ"}, {"k", "κ"}, {"A", "А"}, {"K", "К"}, {"a", "α"}, {"p", "р"}} {
			f.Add(strings.Replace(key, swap[0], swap[1], 1))
		}
		f.Add(key[:1] + "-" + key[1:])
		f.Add(key[:1] + "·" + key[1:2] + "." + key[2:])
		f.Add("prod " + strings.Join(strings.Split(key[:min(len(key), 16)], ""), "-"))
	}
	f.Fuzz(func(t *testing.T, label string) {
		err := screenLabel(label)
		if err == nil && oracleKeyShape(label) {
			t.Fatalf("accepted %q, which holds a key shape once normalised", label)
		}
		if len(label) <= 4*MaxLabelLen {
			checkSqueezeStarts(t, label)
		}
	})
}

// checkSqueezeStarts: squeeze's starts are the word starts of s, and the
// squeezed text from each is what squeezing from there gives, so
// squeezedSecret may read every word start from one pass.
func checkSqueezeStarts(t *testing.T, s string) {
	t.Helper()
	out, starts := squeeze(s)
	var want []int // the byte offsets of s's word starts
	for i := range len(s) {
		if isAlnum(rune(s[i])) && (i == 0 || !isAlnum(rune(s[i-1]))) {
			want = append(want, i)
		}
	}
	require.Len(t, starts, len(want), "word starts of %q", s)
	for k, i := range want {
		rest, _ := squeeze(s[i:])
		require.Equal(t, rest, out[starts[k].at:], "%q squeezed from byte %d", s, i)
	}
}

// TestSqueezeStarts: squeeze joins a spelled-out word ("s-k-proj" is
// "sk-proj") and not words spaced around a mark ("s - k"), and reports
// every word start where squeezing from it would begin.
func TestSqueezeStarts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, out string }{
		{"s-k-proj-abcd", "sk-proj-abcd"},
		{"s k - proj", "sk-proj"},
		{"s - k - proj", "s-k-proj"},
		{"s·k.p/r", "skpr"},
		{"s--k-proj", "s-k-proj"},
		{"openai s k - p r o j - a b c d", "openaisk-proj-abcd"},
		{"llama-3.1-70b", "llama-31-70b"},
		{"gpt-4o – mini", "gpt-4o–mini"},
		{"J. K. team", "J.K.team"},
	} {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			out, _ := squeeze(tt.in)
			assert.Equal(t, tt.out, out)
			checkSqueezeStarts(t, tt.in)
		})
	}
	for _, tt := range loadLabelFixture(t).Refuse {
		checkSqueezeStarts(t, tt.Label)
	}
}

// TestConfusables: every look-alike folds to an ASCII letter, and
// confusable's range check does not skip one; the letters of the key
// prefixes in Cyrillic and Greek fold, Cyrillic с (read "c") does not
// become s.
func TestConfusables(t *testing.T) {
	t.Parallel()
	for from, to := range confusables {
		assert.True(t, to >= 'a' && to <= 'z' || to >= 'A' && to <= 'Z', "%q folds to %q", from, to)
		assert.Equal(t, to, confusable(from), "%q", from)
		assert.Equal(t, string(from), norm.NFKC.String(string(from)), "%q is changed by NFKC before the fold sees it", from)
	}
	assert.Equal(t, "sk-proj AKIA", normalise("ѕк-рrој АКІА"))
	assert.Equal(t, "skproj", normalise("ѕκрroϳ"))
	assert.Equal(t, "ck", normalise("ск"), "Cyrillic es reads c")
	assert.Zero(t, confusable('s'))
	assert.Zero(t, confusable('é'))
}

// BenchmarkScreenLabel is the screen's cost per label, a clean one and
// the slowest shapes: 64 bytes of single letters (every one a word start)
// and of look-alikes.
func BenchmarkScreenLabel(b *testing.B) {
	for _, l := range []string{
		"openai gpt-4o-mini eu prod",
		strings.Repeat("a ", 32),
		strings.Repeat("a-", 32),
		strings.Repeat("ѕк", 16),
	} {
		b.Run(strings.ReplaceAll(l[:min(len(l), 12)], " ", "_"), func(b *testing.B) {
			for b.Loop() {
				_ = screenLabel(l)
			}
		})
	}
}
