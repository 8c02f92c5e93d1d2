package keys

import (
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// MaxEndpointLen is the longest endpoint, in bytes, that [NormalizeEndpoint]
// accepts, before and after normalisation.
const MaxEndpointLen = 2048

// Reasons an endpoint is rejected. They name the part that was wrong and never
// quote the input, which may hold a secret.
const (
	reasonTooLong  = "longer than 2048 bytes"
	reasonEmpty    = "empty"
	reasonSyntax   = "not a valid absolute URL"
	reasonScheme   = "scheme must be http or https"
	reasonNoHost   = "host is missing"
	reasonUserinfo = "userinfo is not allowed"
	reasonQuery    = "query is not allowed"
	reasonHost     = "host must be lower-case ASCII letters, digits, '.', '-' or '_'"
	reasonIPv6     = "IPv6 host must be a valid address without a zone"
	reasonPort     = "port must be a number from 1 to 65535"
	reasonPath     = "path contains a character that must be percent-encoded"
	reasonDotSeg   = "path must not contain '.' or '..' segments"
)

// NormalizeEndpoint returns the canonical form of the base URL raw, the form
// that [Derive] hashes. It trims surrounding ASCII whitespace, requires an
// absolute http or https URL with a host, and then:
//
//   - lower-cases the scheme and the host; an IPv6 host keeps its brackets and
//     is written in RFC 5952 form ("[2001:db8::1]");
//   - drops the default port (:80 for http, :443 for https) and leading zeros
//     of any other port;
//   - upper-cases the hex digits of percent-escapes in the path and drops its
//     trailing slashes ("/v1/" becomes "/v1", "/" becomes "");
//   - drops the fragment.
//
// It rejects userinfo (credentials do not belong in an endpoint), a query
// (a base URL has none, and a key passed as ?key=... must be the credential),
// non-ASCII or percent-encoded hosts, IPv6 zones, '.' and '..' path segments,
// path characters that RFC 3986 requires to be percent-encoded, and inputs or
// results longer than [MaxEndpointLen]. The result is accepted unchanged by
// NormalizeEndpoint, which is therefore idempotent.
//
// Errors wrap [ErrInvalidEndpoint] and say which part was wrong; they never
// contain the input.
func NormalizeEndpoint(raw string) (string, error) {
	out, reason := normalizeEndpoint(raw)
	if reason != "" {
		return "", invalid("keys: invalid endpoint: "+reason, ErrInvalidEndpoint)
	}
	return out, nil
}

// normalizeEndpoint implements [NormalizeEndpoint]. It returns the canonical
// endpoint, or a non-empty reason when raw is rejected.
func normalizeEndpoint(raw string) (string, string) {
	if len(raw) > MaxEndpointLen {
		return "", reasonTooLong
	}
	s := strings.Trim(raw, asciiSpace)
	if s == "" {
		return "", reasonEmpty
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", reasonSyntax // err quotes the input: drop it.
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", reasonScheme
	case u.Opaque != "" || u.Host == "":
		return "", reasonNoHost
	case u.User != nil:
		return "", reasonUserinfo
	case u.RawQuery != "" || u.ForceQuery:
		return "", reasonQuery
	}
	host, reason := canonicalHost(u)
	if reason != "" {
		return "", reason
	}
	path, reason := canonicalPath(rawPath(s, len(u.Scheme)))
	if reason != "" {
		return "", reason
	}
	out := u.Scheme + "://" + host + path
	if len(out) > MaxEndpointLen {
		return "", reasonTooLong
	}
	return out, ""
}

// canonicalHost returns the host and non-default port of u in canonical form.
func canonicalHost(u *url.URL) (string, string) {
	name := u.Hostname()
	if strings.HasPrefix(u.Host, "[") {
		addr, err := netip.ParseAddr(name)
		if err != nil || !addr.Is6() || addr.Zone() != "" {
			return "", reasonIPv6
		}
		name = "[" + addr.String() + "]"
	} else {
		name = asciiLower(name)
		if name == "" || !allBytes(name, isNameByte) {
			return "", reasonHost
		}
	}
	port := u.Port()
	if port == "" {
		return name, ""
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", reasonPort
	}
	if (u.Scheme == "http" && n == 80) || (u.Scheme == "https" && n == 443) {
		return name, ""
	}
	return name + ":" + strconv.Itoa(n), ""
}

// rawPath returns the path of the absolute URL s exactly as written: what
// follows the authority, up to the query or fragment. net/url would re-escape
// it, which another language could not reproduce.
func rawPath(s string, schemeLen int) string {
	s, _, _ = strings.Cut(s, "#")
	s, _, _ = strings.Cut(s, "?")
	rest := s[schemeLen+len("://"):]
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[i:]
	}
	return ""
}

// canonicalPath upper-cases percent-escapes in p and trims trailing slashes.
func canonicalPath(p string) (string, string) {
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%':
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return "", reasonPath
			}
			b.WriteByte('%')
			b.WriteByte(asciiUpper(p[i+1]))
			b.WriteByte(asciiUpper(p[i+2]))
			i += 2
		case isPathByte(c):
			b.WriteByte(c)
		default:
			return "", reasonPath
		}
	}
	out := b.String()
	for seg := range strings.SplitSeq(out, "/") {
		seg = strings.ReplaceAll(seg, "%2E", ".")
		if seg == "." || seg == ".." {
			return "", reasonDotSeg
		}
	}
	return strings.TrimRight(out, "/"), ""
}

// asciiSpace is the whitespace trimmed from endpoints and providers.
const asciiSpace = " \t\r\n"

// isNameByte reports whether c may appear in a provider or a lower-cased host.
func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_'
}

// isPathByte reports whether c may appear unescaped in a path: an RFC 3986
// pchar or '/'.
func isPathByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("-._~!$&'()*+,;=:@/", c) >= 0
}

// isHex reports whether c is a hexadecimal digit of either case.
func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// asciiUpper upper-cases an ASCII letter and returns any other byte unchanged.
func asciiUpper(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
}

// asciiLower lower-cases the ASCII letters of s only, so that the result does
// not depend on Unicode case tables (the Kelvin sign does not become 'k').
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}

// allBytes reports whether ok holds for every byte of s.
func allBytes(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}
