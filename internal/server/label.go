package server

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// errSecretLabel is why a label that looks like a credential is refused.
var errSecretLabel = errors.New("looks like a secret (API key, bearer token, JWT, URL credentials or a long random string); use a short human label such as \"openai gpt-4o …a1b2\"")

// checkLabel accepts short human labels and refuses anything that looks
// like a secret, so credentials never reach Redis or the dashboard.
func checkLabel(l string) error {
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
	low := strings.ToLower(l)
	for _, p := range []string{"sk-", "sk_", "bearer ", "basic ", "api_key", "apikey", "xoxb-", "ghp_", "aiza", "akia", "-----begin"} {
		if strings.Contains(low, p) {
			return errSecretLabel
		}
	}
	if strings.Contains(l, "://") && strings.Contains(l, "@") {
		return errSecretLabel
	}
	for _, word := range strings.FieldsFunc(l, func(r rune) bool { return r == ' ' || r == '/' || r == ',' }) {
		if looksRandom(word) {
			return errSecretLabel
		}
	}
	return nil
}

// looksRandom flags JWT-like dotted base64 triples and long runs of mixed
// letters and digits such as API keys.
func looksRandom(w string) bool {
	if strings.HasPrefix(w, "eyJ") && strings.Count(w, ".") >= 2 {
		return true
	}
	if len(w) < 20 {
		return false
	}
	var letters, digits, upper, lower int
	for _, r := range w {
		switch {
		case r >= '0' && r <= '9':
			digits++
		case r >= 'a' && r <= 'z':
			letters++
			lower++
		case r >= 'A' && r <= 'Z':
			letters++
			upper++
		}
	}
	return digits >= 3 && letters >= 8 && (upper > 0 && lower > 0 || digits >= 6)
}
