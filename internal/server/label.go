package server

import (
	"errors"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// errSecretLabel is why a label that looks like a credential is refused.
var errSecretLabel = errors.New("looks like a secret (API key, bearer token, JWT, URL credentials or a long random string, also when spaced out, with its letters separated by punctuation, in full-width letters, with Cyrillic or Greek look-alike letters or with other dashes); use a short human label such as \"openai gpt-4o 0a1b2c3d…\"")

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

// prefixShapes are key prefixes of the major providers and clouds, with as
// much of the key's body as tells them from words. They match the
// lower-cased label at a word start.
var prefixShapes = []string{
	`(sk|rk)[-_]`,            // OpenAI sk-, sk-proj-, sk-svcacct-; Anthropic sk-ant-; DeepSeek; OpenRouter sk-or-; Stripe sk_live_, rk_live_
	`pk_(live|test)_`,        // Stripe publishable keys
	`gh[pousr]_[a-z0-9]{4,}`, // GitHub tokens
	`xox[abpres]-`, `xapp-`,  // Slack
	`aiza[0-9a-z_-]{8,}`,        // Google API keys
	`hf_[a-z0-9]{8,}`,           // Hugging Face
	`gsk_[a-z0-9]{8,}`,          // Groq
	`xai-[a-z0-9]{8,}`,          // xAI
	`r8_[a-z0-9]{8,}`,           // Replicate
	`pplx-[a-z0-9]{8,}`,         // Perplexity
	`fw_[a-z0-9]{8,}`,           // Fireworks
	`csk-[a-z0-9]{8,}`,          // Cerebras
	`pcsk_[a-z0-9]{8,}`,         // Pinecone
	`(dop|doo|dor)_v1_`,         // DigitalOcean
	`npm_[a-z0-9]{8,}`, `pypi-`, // package registries
	`shp(at|ss|ca|pa)_`,           // Shopify
	`sg\.[a-z0-9_-]{8,}`,          // SendGrid
	`(key|token|secret|sig|pwd)=`, // query strings, connection strings, SAS
}

// markerShapes are markers of tokens that match the lower-cased label
// anywhere.
var markerShapes = []string{
	`whsec_`,            // Stripe webhook secrets
	`github_pat_`,       // GitHub fine-grained tokens
	`glpat-`,            // GitLab
	`ya29\.`, `gocspx-`, // Google OAuth access tokens, client secrets
	`[0-9]q~[a-z0-9_.~-]{8,}`,             // Azure AD (Entra) client secrets
	`eyj[a-z0-9_-]{4,}\.[a-z0-9_-]{4,}\.`, // JWTs
	`-----begin`,                          // PEM
	`defaultendpointsprotocol=`, `sharedaccess(key|signature)`,
	`hooks\.slack\.com/services/`, `discord(app)?\.com/api/webhooks/`, // webhook URLs are credentials
}

// wordShapes are words and syntax that name a credential; they match the
// lower-cased label as written (spaces kept: "api key" is a fine word in a
// label, "api_key" is a parameter).
var wordShapes = []string{
	`bearer\s`, `basic\s`, // Authorization values
	`api[_-]?key`, `access[_-]?token`, `client[_-]?secret`, `secret[_-]?key`,
	`accountkey`, `passw(or)?d`,
	`(^|\s)[^\s:/@]+:[^\s/@]+@[^\s]`, // user:password@host
}

// lowerShapes match the lower-cased label: all the shapes above.
var lowerShapes = regexp.MustCompile(wordStart + `(` + strings.Join(prefixShapes, "|") + `)|` +
	strings.Join(markerShapes, "|") + "|" + strings.Join(wordShapes, "|"))

// awsKeyID is an AWS access key id, matched as written.
const awsKeyID = `(AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA|ASCA)[A-Z0-9]{12,}`

// caseShapes match the label as written: AWS access key ids.
var caseShapes = regexp.MustCompile(`(^|[^A-Za-z0-9])` + awsKeyID)

// Shapes of the squeezed label (see squeeze), at a word start of the
// normalised one: a key spaced out ("s k-proj abcd EFGH 1234") is whole
// again there. Words are left out: squeezed, "api key" would be "apikey".
var (
	squeezedPrefix = regexp.MustCompile(`^(` + strings.Join(prefixShapes, "|") + `)`)
	squeezedMarker = regexp.MustCompile(strings.Join(markerShapes, "|"))
	squeezedAWS    = regexp.MustCompile(`^` + awsKeyID)
	// spelledPrefix is a key prefix whose separators were all dropped: a
	// key spelled out letter by letter ("s-k-p-r-o-j-a-b-c-d"). Only read
	// from a word spelled out so: "sk admin" is a country and a word.
	spelledPrefix = regexp.MustCompile(`^(sk|rk)(proj|ant|svcacct|admin|or)`)
	// hexKey is 32 or more hex digits with letters and digits both: an
	// Azure OpenAI key, also spaced out in groups.
	hexKey = regexp.MustCompile(`[0-9a-f]{32,}`)
)

// base64Run is a run of base64 characters long enough to hold an AWS
// secret access key (40 characters, '/' and '+' included).
var base64Run = regexp.MustCompile(`[A-Za-z0-9/+]{40,}`)

// normalise is what the screen reads of a label: its NFKC form (full-width
// and other compatibility letters, digits and punctuation become ASCII:
// "ｓｋ-ｐｒｏｊ" is "sk-proj"), the Cyrillic and Greek letters that look like
// Latin ones folded to them (see confusable: "ѕk-рrој" is "sk-proj"), and
// every dash (Unicode Pd, and the minus sign) a hyphen-minus. Case is kept:
// the AWS shapes and the randomness checks read it.
func normalise(l string) string {
	n := norm.NFKC.String(l)
	if !strings.ContainsFunc(n, func(r rune) bool { return isOtherDash(r) || confusable(r) != 0 }) {
		return n
	}
	return strings.Map(func(r rune) rune {
		if isOtherDash(r) {
			return '-'
		}
		if c := confusable(r); c != 0 {
			return c
		}
		return r
	}, n)
}

// confusables are the Cyrillic and Greek letters that look like a Latin
// letter (or digit-free ASCII letter) in common fonts, each with that
// letter: the letters that matter in the key prefixes and AWS key ids
// ("ѕk-" with a Cyrillic dze, "АКІА" in Cyrillic). A letter that only
// resembles one in some fonts (Cyrillic с reads "c", not "s"; Greek σ, ε) is
// left alone, so words in those scripts stay words: only the screen reads
// the fold, never the label stored. NFKC runs first, so a letter it
// changes is not here (the lunate sigma ϲ becomes the final sigma ς).
var confusables = map[rune]rune{
	// Cyrillic, lower case.
	'а': 'a', 'с': 'c', 'ԁ': 'd', 'е': 'e', 'һ': 'h', 'і': 'i', 'ј': 'j', 'к': 'k', 'ӏ': 'l',
	'о': 'o', 'р': 'p', 'ԛ': 'q', 'ѕ': 's', 'ѵ': 'v', 'ԝ': 'w', 'х': 'x', 'у': 'y', 'ү': 'y',
	// Cyrillic, upper case.
	'А': 'A', 'В': 'B', 'С': 'C', 'Е': 'E', 'Н': 'H', 'І': 'I', 'Ӏ': 'I', 'Ј': 'J', 'К': 'K',
	'М': 'M', 'О': 'O', 'Р': 'P', 'Ԛ': 'Q', 'Ѕ': 'S', 'Т': 'T', 'Ԝ': 'W', 'Х': 'X', 'У': 'Y', 'Ү': 'Y',
	// Greek, lower case.
	'α': 'a', 'ι': 'i', 'ϳ': 'j', 'κ': 'k', 'ο': 'o', 'ρ': 'p', 'υ': 'u', 'ν': 'v', 'χ': 'x',
	// Greek, upper case.
	'Α': 'A', 'Β': 'B', 'Ε': 'E', 'Η': 'H', 'Ι': 'I', 'Ϳ': 'J', 'Κ': 'K', 'Μ': 'M',
	'Ν': 'N', 'Ο': 'O', 'Ρ': 'P', 'Τ': 'T', 'Υ': 'Y', 'Χ': 'X', 'Ζ': 'Z',
	// Latin letters without their dot, and with one.
	'ı': 'i', 'İ': 'I', 'ȷ': 'j',
}

// confusable is the Latin letter r looks like (see confusables), or 0.
func confusable(r rune) rune {
	if r < 0x130 || r > 0x52f {
		return 0 // outside Latin Extended-A to Cyrillic Supplement: none
	}
	return confusables[r]
}

func isOtherDash(r rune) bool { return r != '-' && (r == '\u2212' || unicode.Is(unicode.Pd, r)) }

// squeeze removes the whitespace of s and collapses every run of
// separators ('-', '_', '.', with or without whitespace between them) to
// its first: "s k - - proj  abcd" is "sk-projabcd". Then it drops every
// punctuation mark between two single letters or digits (isSpelledSep):
// "s-k-proj" and "s·k-proj" are "sk-proj", "A-K-I-A-I-O-S-F" is "AKIAIOSF".
// starts are the word starts of s (a letter or digit first or after a
// character that is neither) as positions in the result: squeeze(s[i:])
// for such an i is the result from its start, so one pass serves every
// word start and the screen stays O(len(s)).
func squeeze(s string) (out string, starts []squeezeStart) {
	ps := make([]squeezed, 0, len(s))
	sep := false  // the last rune kept is a separator
	last := -1    // index in ps of the previous rune when it is a letter or digit
	lastSep := -1 // index in ps of the separator the previous runes were
	for _, r := range s {
		alnum := isAlnum(r)
		start := alnum && last < 0
		if alnum && last >= 0 {
			ps[last].alone = false
		}
		if alnum && lastSep >= 0 {
			ps[lastSep].tightRight = true
		}
		prevAlnum := last >= 0
		last = -1
		switch {
		case unicode.IsSpace(r):
			lastSep = -1
			continue
		case r == '-' || r == '_' || r == '.':
			if sep {
				lastSep = -1 // "s--k" is two words, not one spelled out
				continue
			}
			sep = true
		default:
			sep = false
		}
		lastSep = -1
		if alnum {
			last = len(ps)
		} else {
			lastSep = len(ps)
		}
		ps = append(ps, squeezed{r: r, start: start, alone: start, tight: prevAlnum})
	}
	for i := 1; i+1 < len(ps); i++ {
		if isSpelledSep(ps[i].r) && ps[i].tight && ps[i].tightRight && ps[i-1].alone && ps[i+1].alone {
			ps[i].drop = true
			ps[i-1].spelled = true
		}
	}
	var b strings.Builder
	b.Grow(len(s))
	for i, p := range ps {
		if p.drop {
			continue
		}
		if p.start {
			// A start whose letter was joined to the next is the start of a
			// word spelled out ("s-k-p-r-o-j").
			starts = append(starts, squeezeStart{at: b.Len(), spelled: p.spelled || i > 0 && ps[i-1].drop})
		}
		b.WriteRune(p.r)
	}
	return b.String(), starts
}

// squeezed is one rune of squeeze's input that squeeze keeps, at first.
type squeezed struct {
	r     rune
	start bool // a word start of the input
	alone bool // a letter or digit with none next to it in the input ("s" in "s-k", "s k")
	// tight and tightRight: a mark with a letter or digit right before it
	// and right after it in the input ("s-k", not "s - k").
	tight, tightRight bool
	drop              bool // a separator between two single letters: dropped
	spelled           bool // a single letter the next one is joined to
}

// squeezeStart is a word start of squeeze's input in its output.
type squeezeStart struct {
	at      int
	spelled bool // its letter was joined to the next: the word was spelled out
}

// asciiLower lower-cases the ASCII letters of s and nothing else, so that
// every byte stays where it was (strings.ToLower may change a rune's length).
func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// isSpelledSep reports whether r, between two single letters or digits,
// only spells a word out ("s-k", "s.k", "s·k", "s*k").
func isSpelledSep(r rune) bool { return strings.ContainsRune("-_.·•*|/\\,:;+~'", r) }

// looksSecret screens a label, after normalise: known shapes anywhere, then
// randomness in whole whitespace-separated tokens (an AWS secret access key
// has '/' in it, a base64 key '+' and '='), in their pieces and in their
// runs of letters and digits; then the key shapes again with the label
// squeezed from each word start, so a key spaced out or with doubled
// separators is one again.
func looksSecret(l string) bool {
	l = normalise(l)
	low := strings.ToLower(l)
	if lowerShapes.MatchString(low) || caseShapes.MatchString(l) {
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
	return squeezedSecret(l)
}

// squeezedSecret reports whether the normalised label l holds a key shape
// once squeezed: a prefix shape or an AWS key id at a word start of l, a
// marker anywhere, a hex key; or, from a word start spelled out letter by
// letter, a key prefix without its separator ("s-k-p-r-o-j-…" is "skproj…")
// or a run that reads as random ("s-k-A-b-3-d-E-f-…").
func squeezedSecret(l string) bool {
	sq, starts := squeeze(l)
	low := asciiLower(sq) // the same length: starts index both
	if squeezedMarker.MatchString(low) {
		return true
	}
	for _, h := range hexKey.FindAllString(low, -1) {
		if strings.ContainsAny(h, "0123456789") && strings.ContainsAny(h, "abcdef") {
			return true
		}
	}
	for _, w := range starts {
		if squeezedAWS.MatchString(sq[w.at:]) || squeezedPrefix.MatchString(low[w.at:]) {
			return true
		}
		if w.spelled {
			if spelledPrefix.MatchString(low[w.at:]) {
				return true
			}
			run := sq[w.at:]
			if end := strings.IndexFunc(run, func(r rune) bool { return !isAlnum(r) }); end >= 0 {
				run = run[:end]
			}
			if looksRandom(run) {
				return true
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
