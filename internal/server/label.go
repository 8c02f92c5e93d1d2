package server

import (
	"errors"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// errSecretLabel is why a label that looks like a credential is refused.
var errSecretLabel = errors.New("looks like a secret (API key, bearer token, JWT, URL credentials or a long random string); use a short human label such as \"openai gpt-4o 0a1b2c3d…\"")

// checkLabel accepts short human labels and refuses anything that looks
// like a secret, so credentials never reach Redis or the dashboard.
func checkLabel(l string) error {
	if l == "" {
		return nil
	}
	if _, ok := okLabels.m.Load(l); ok {
		return nil
	}
	if err := screenLabel(l); err != nil {
		return err
	}
	okLabels.add(l)
	return nil
}

// maxOKLabels bounds the labels okLabels remembers.
const maxOKLabels = 4096

// okLabels remembers labels that passed screening. Clients send the same
// few labels on every call, and screening one (regular expressions) took
// about a fifth of the handler's CPU per Admit in a profile
// (docs/decisions/0019-compression-threshold.md).
// Only accepted labels are kept, so nothing that looks like a secret stays
// in memory; past maxOKLabels the set starts over.
var okLabels labelSet

type labelSet struct {
	m sync.Map // string → struct{}
	n atomic.Int64
}

func (s *labelSet) add(l string) {
	if s.n.Add(1) > maxOKLabels {
		s.m.Clear()
		s.n.Store(1)
	}
	s.m.Store(l, struct{}{})
}

// screenLabel is checkLabel's uncached check.
func screenLabel(l string) error {
	if len(l) > MaxLabelLen {
		return errors.New("must be at most 64 bytes")
	}
	if !utf8.ValidString(l) {
		return errors.New("must be valid UTF-8")
	}
	for _, r := range l {
		if !unicode.IsPrint(r) {
			return errors.New("must be printable text")
		}
	}
	if looksSecret(l) {
		return errSecretLabel
	}
	return nil
}

// wordStart is a word boundary before a key prefix: the start, or a
// character that is not a letter or digit (so "task-runner" is not "sk-", but
// "key:sk-…" and "prod_sk-…" are).
const wordStart = `(^|[^a-z0-9])`

// lowerShapes match the lower-cased label: key prefixes of the major
// providers and clouds, credential syntax, and markers of tokens.
var lowerShapes = regexp.MustCompile(strings.Join([]string{
	wordStart + `(sk|rk)[-_]`,                       // OpenAI sk-, sk-proj-, sk-svcacct-; Anthropic sk-ant-; DeepSeek; OpenRouter sk-or-; Stripe sk_live_, rk_live_
	wordStart + `pk_(live|test)_`,                   // Stripe publishable keys
	`whsec_`,                                        // Stripe webhook secrets
	wordStart + `gh[pousr]_[a-z0-9]{4,}`,            // GitHub tokens
	`github_pat_`,                                   // GitHub fine-grained tokens
	`glpat-`,                                        // GitLab
	wordStart + `xox[abpres]-`, wordStart + `xapp-`, // Slack
	wordStart + `aiza[0-9a-z_-]{8,}`, // Google API keys
	`ya29\.`, `gocspx-`,              // Google OAuth access tokens, client secrets
	wordStart + `hf_[a-z0-9]{8,}`,                       // Hugging Face
	wordStart + `gsk_[a-z0-9]{8,}`,                      // Groq
	wordStart + `xai-[a-z0-9]{8,}`,                      // xAI
	wordStart + `r8_[a-z0-9]{8,}`,                       // Replicate
	wordStart + `pplx-[a-z0-9]{8,}`,                     // Perplexity
	wordStart + `fw_[a-z0-9]{8,}`,                       // Fireworks
	wordStart + `csk-[a-z0-9]{8,}`,                      // Cerebras
	wordStart + `pcsk_[a-z0-9]{8,}`,                     // Pinecone
	wordStart + `(dop|doo|dor)_v1_`,                     // DigitalOcean
	wordStart + `npm_[a-z0-9]{8,}`, wordStart + `pypi-`, // package registries
	wordStart + `shp(at|ss|ca|pa)_`,       // Shopify
	wordStart + `sg\.[a-z0-9_-]{8,}`,      // SendGrid
	`[0-9]q~[a-z0-9_.~-]{8,}`,             // Azure AD (Entra) client secrets
	`eyj[a-z0-9_-]{4,}\.[a-z0-9_-]{4,}\.`, // JWTs
	`bearer\s`, `basic\s`, `-----begin`,   // Authorization values, PEM
	`api[_-]?key`, `access[_-]?token`, `client[_-]?secret`, `secret[_-]?key`,
	`accountkey`, `defaultendpointsprotocol=`, `sharedaccess(key|signature)`, `passw(or)?d`,
	`hooks\.slack\.com/services/`, `discord(app)?\.com/api/webhooks/`, // webhook URLs are credentials
	wordStart + `(key|token|secret|sig|pwd)=`, // query strings, connection strings, SAS
	`(^|\s)[^\s:/@]+:[^\s/@]+@[^\s]`,          // user:password@host
}, "|"))

// caseShapes match the label as written: AWS access key ids.
var caseShapes = regexp.MustCompile(`(^|[^A-Za-z0-9])(AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA|ASCA)[A-Z0-9]{12,}`)

// base64Run is a run of base64 characters long enough to hold an AWS
// secret access key (40 characters, '/' and '+' included).
var base64Run = regexp.MustCompile(`[A-Za-z0-9/+]{40,}`)

// looksSecret screens a label: known shapes anywhere, then randomness in
// whole whitespace-separated tokens (an AWS secret access key has '/' in
// it, a base64 key '+' and '='), in their pieces and in their runs of
// letters and digits.
func looksSecret(l string) bool {
	if lowerShapes.MatchString(strings.ToLower(l)) || caseShapes.MatchString(l) {
		return true
	}
	if strings.Contains(l, "://") && strings.Contains(l, "@") {
		return true // URL userinfo
	}
	for _, tok := range strings.Fields(l) {
		if isKeyAlphabet(tok) && looksRandom(tok) {
			return true
		}
		for _, run := range base64Run.FindAllString(tok, -1) {
			for i := 0; i+40 <= len(run); i++ {
				if mixed(run[i:i+40], 4) {
					return true // an AWS secret access key, whole or in a path
				}
			}
		}
		for _, piece := range strings.FieldsFunc(tok, func(r rune) bool { return !isAlnum(r) && r != '-' && r != '_' }) {
			if looksRandom(piece) {
				return true
			}
		}
		for _, run := range strings.FieldsFunc(tok, func(r rune) bool { return !isAlnum(r) }) {
			if len(run) >= 32 && distinct(run) >= 8 {
				return true // no word is that long
			}
		}
	}
	return false
}

// looksRandom reports whether w reads like generated key material: at
// least 16 letters and digits that switch between lower case, upper case
// and digits on at least 2 of every 5 characters. Random keys switch on
// about 3 of 5; words, model names and dates rarely
// ("claude-3-5-sonnet-20241022" not once inside a run, "Meta-Llama-3.1-70B"
// four times in 13), CamelCase twice per word ("MyCompanyGpt4oDeployment":
// 9 in 27).
func looksRandom(w string) bool { return mixed(w, 2.5) }

// mixed reports whether w has at least 16 letters and digits, of which at
// least one in every `every` begins a switch of class (lower case, upper
// case, digit), and it mixes digits in or both cases.
func mixed(w string, every float64) bool {
	var n, digits, upper, lower, switches int
	prev := 0 // class of the previous character: 0 none, 1 lower, 2 upper, 3 digit
	for _, r := range w {
		c := 0
		switch {
		case r >= 'a' && r <= 'z':
			c, lower = 1, lower+1
		case r >= 'A' && r <= 'Z':
			c, upper = 2, upper+1
		case r >= '0' && r <= '9':
			c, digits = 3, digits+1
		}
		if c != 0 {
			n++
			if prev != 0 && prev != c {
				switches++
			}
		}
		prev = c
	}
	return n >= 16 && float64(switches)*every >= float64(n) && (digits > 0 || upper > 0 && lower > 0)
}

// isKeyAlphabet reports whether w is made only of base64, base64url and
// hex characters.
func isKeyAlphabet(w string) bool {
	for _, r := range w {
		if !isAlnum(r) && !strings.ContainsRune("+/=_-", r) {
			return false
		}
	}
	return true
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

func distinct(s string) int {
	var seen [128]bool
	n := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 128 && !seen[c] {
			seen[c] = true
			n++
		}
	}
	return n
}
