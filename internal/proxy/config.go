package proxy

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Provider shapes: how a route's credential header is set on a fallback
// with its own credential, and the error body a denial is written in.
const (
	ProviderOpenAI    = "openai"
	ProviderAnthropic = "anthropic"
)

// Route maps a path prefix of the proxy to an upstream base URL: a request
// to Prefix+"/v1/x" goes to Upstream+"/v1/x".
type Route struct {
	// Prefix starts with "/" and names one path segment or more, without a
	// trailing "/" ("/openai"). It matches itself and what follows a "/".
	Prefix string
	// Upstream is an absolute http:// or https:// URL without query; its
	// path, if any, is joined before the rest of the request's path.
	Upstream *url.URL
	// Provider is ProviderOpenAI or ProviderAnthropic ("" picks one from
	// the upstream's host and the prefix: anthropic when either names it).
	Provider string
}

// ParseRoute parses "PREFIX=UPSTREAM" ("/openai=https://api.openai.com"),
// the form of the --route flag. The provider is inferred (see [Route]).
func ParseRoute(s string) (Route, error) {
	prefix, upstream, ok := strings.Cut(s, "=")
	if !ok {
		return Route{}, fmt.Errorf("route %q: want PREFIX=UPSTREAM", s)
	}
	u, err := url.Parse(strings.TrimSpace(upstream))
	if err != nil {
		return Route{}, fmt.Errorf("route %q: upstream: %w", s, err)
	}
	r := Route{Prefix: strings.TrimSpace(prefix), Upstream: u}
	return r, r.check()
}

func (r *Route) check() error {
	switch {
	case !strings.HasPrefix(r.Prefix, "/") || r.Prefix == "/" || strings.HasSuffix(r.Prefix, "/"):
		return fmt.Errorf("route %q: the prefix must start with / and not end with one", r.Prefix)
	case strings.Contains(r.Prefix, "..") || strings.Contains(r.Prefix, "//"):
		return fmt.Errorf("route %q: the prefix must be a clean path", r.Prefix)
	case r.Prefix == "/healthz" || r.Prefix == "/metrics":
		return fmt.Errorf("route %q: the proxy serves that path itself", r.Prefix)
	case r.Upstream == nil || (r.Upstream.Scheme != "https" && r.Upstream.Scheme != "http") || r.Upstream.Host == "":
		return fmt.Errorf("route %q: the upstream must be an absolute http(s) URL", r.Prefix)
	case r.Upstream.User != nil || r.Upstream.RawQuery != "" || r.Upstream.Fragment != "":
		return fmt.Errorf("route %q: the upstream must have no user, query or fragment", r.Prefix)
	}
	r.Upstream.Path = strings.TrimSuffix(r.Upstream.Path, "/")
	r.Upstream.RawPath = ""
	switch r.Provider {
	case "":
		r.Provider = ProviderOpenAI
		if strings.Contains(r.Upstream.Hostname(), "anthropic") || strings.Contains(r.Prefix, "anthropic") {
			r.Provider = ProviderAnthropic
		}
	case ProviderOpenAI, ProviderAnthropic:
	default:
		return fmt.Errorf("route %q: unknown provider %q (openai or anthropic)", r.Prefix, r.Provider)
	}
	return nil
}

// Target is one fallback of a model: another model on the same route and
// credential, or on another route with a credential read from a file.
type Target struct {
	// Model replaces the request's JSON "model" field.
	Model string `yaml:"model"`
	// Route is the prefix of the route to send it to ("": the request's).
	Route string `yaml:"route"`
	// CredentialFile holds the credential for the other route ("": the
	// request's own). It is read once, at start, never from the request.
	CredentialFile string `yaml:"credential_file"`
	// Header is the header the credential goes in: "authorization"
	// (Bearer, the default for openai routes), "x-api-key" (the default
	// for anthropic routes) or "api-key" (Azure OpenAI).
	Header string `yaml:"header"`

	credential string
}

// Fallbacks lists, per requested model, the targets tried after it in
// order.
type Fallbacks map[string][]Target

// LoadFallbacks reads a fallback file: YAML (or JSON) mapping a model to
// its list of targets, for example
//
//	gpt-4o:
//	  - model: gpt-4o-mini
//	  - model: gpt-4o
//	    route: /azure
//	    credential_file: /run/secrets/azure-key
//	    header: api-key
//
// routes are the configured routes, which a target's route must name.
func LoadFallbacks(path string, routes []Route) (Fallbacks, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read fallback file: %w", err)
	}
	var fb Fallbacks
	if err := yaml.Unmarshal(b, &fb); err != nil {
		return nil, fmt.Errorf("parse fallback file %s: %w", path, err)
	}
	for model, ts := range fb {
		for i := range ts {
			t := &ts[i]
			if t.Model == "" || !validModel(t.Model) {
				return nil, fmt.Errorf("fallback %s[%d]: invalid model %q", model, i, t.Model)
			}
			if t.Route != "" && !slices.ContainsFunc(routes, func(r Route) bool { return r.Prefix == t.Route }) {
				return nil, fmt.Errorf("fallback %s[%d]: no route %q", model, i, t.Route)
			}
			switch strings.ToLower(t.Header) {
			case "", "authorization", "x-api-key", "api-key":
				t.Header = strings.ToLower(t.Header)
			default:
				return nil, fmt.Errorf("fallback %s[%d]: header %q (authorization, x-api-key or api-key)", model, i, t.Header)
			}
			if t.CredentialFile == "" {
				continue
			}
			c, err := os.ReadFile(t.CredentialFile)
			if err != nil {
				// The path, not the content, is in the error.
				return nil, fmt.Errorf("fallback %s[%d]: read credential file: %w", model, i, errors.Unwrap(err))
			}
			t.credential = strings.TrimSpace(string(c))
			if t.credential == "" {
				return nil, fmt.Errorf("fallback %s[%d]: credential file %s is empty", model, i, t.CredentialFile)
			}
		}
	}
	return fb, nil
}

// validModel reports whether s may be used as a model name: the scope of a
// connection id and a part of its label and of a metric's label.
func validModel(s string) bool {
	if len(s) == 0 || len(s) > maxModelLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:/@-", c) >= 0) {
			return false
		}
	}
	return true
}

const maxModelLen = 128
