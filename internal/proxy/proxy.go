package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cooldownd/cooldownd/client"
)

// Defaults of [Config].
const (
	// DefaultMaxSniff is how much of a request body the proxy reads to find
	// its model. A longer body streams through unread, without a model.
	DefaultMaxSniff = 1 << 20
	// DefaultRetryLimit is the longest wait the providers' SDKs honour in a
	// Retry-After (openai-python, openai-node, anthropic-sdk: 60 s); a
	// denial with a longer wait says x-should-retry: false.
	DefaultRetryLimit = 60 * time.Second
)

// Config configures [New].
type Config struct {
	// Client guards every request (required). Its options decide retries,
	// waits, the mirror and the fail mode, as for any other caller.
	Client *client.Client
	// Routes maps path prefixes to upstreams (at least one).
	Routes []Route
	// Fallbacks lists targets per model; nil: none.
	Fallbacks Fallbacks
	// Transport sends requests upstream. Nil: a clone of
	// http.DefaultTransport (system roots, verified TLS).
	Transport http.RoundTripper
	// Logger logs one line per request. Nil: slog.Default().
	Logger *slog.Logger
	// Registerer takes the proxy's metrics. Nil: no metrics.
	Registerer prometheus.Registerer
	// MaxSniff bounds the body read for the model. ≤ 0: DefaultMaxSniff.
	MaxSniff int64
	// RetryLimit is the wait above which a denial says x-should-retry:
	// false. ≤ 0: DefaultRetryLimit.
	RetryLimit time.Duration
}

// Proxy is an http.Handler that forwards requests to the configured
// upstreams, each guarded by the client.
type Proxy struct {
	cfg     Config
	rp      *httputil.ReverseProxy
	base    http.RoundTripper
	log     *slog.Logger
	metrics *metrics
}

// New checks cfg and returns its Proxy.
func New(cfg Config) (*Proxy, error) {
	if cfg.Client == nil {
		return nil, errors.New("proxy: no client")
	}
	if len(cfg.Routes) == 0 {
		return nil, errors.New("proxy: no route")
	}
	seen := map[string]bool{}
	for i := range cfg.Routes {
		r := &cfg.Routes[i]
		if err := r.check(); err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
		if seen[r.Prefix] {
			return nil, fmt.Errorf("proxy: route %q given twice", r.Prefix)
		}
		seen[r.Prefix] = true
	}
	for model, ts := range cfg.Fallbacks {
		for _, t := range ts {
			if t.Route != "" && !seen[t.Route] {
				return nil, fmt.Errorf("proxy: fallback of %s: no route %q", model, t.Route)
			}
		}
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxSniff <= 0 {
		cfg.MaxSniff = DefaultMaxSniff
	}
	if cfg.RetryLimit <= 0 {
		cfg.RetryLimit = DefaultRetryLimit
	}
	p := &Proxy{cfg: cfg, base: cfg.Transport, log: cfg.Logger}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	p.metrics = m
	p.rp = &httputil.ReverseProxy{
		Rewrite:      p.rewrite,
		Transport:    guard{p},
		ErrorHandler: p.answerError,
		// ReverseProxy flushes at once a response of unknown length or an
		// event stream (SSE); -1 flushes every write of every response, so
		// nothing is held back.
		FlushInterval:  -1,
		ModifyResponse: p.modifyResponse,
		ErrorLog:       slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	return p, nil
}

// candidate is one place a request may go: the primary or a fallback.
type candidate struct {
	route      *Route
	model      string
	credential string // "": the request's headers as they are
	header     string // with credential: the header it goes in
	conn       client.Conn
}

// plan is what the proxy decided about one request before sending it; it
// travels in the request's context from ServeHTTP to the transport.
type plan struct {
	rest     string // the path after the prefix
	body     []byte // the whole body when buffered
	buffered bool
	model    string // the requested model ("" unknown)
	cands    []candidate
	served   int // index of the candidate that answered, -1 none
	start    time.Time
}

type planKey struct{}

// ServeHTTP forwards r to its route's upstream, guarded by the client.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Never an open relay: a request must name a path, not a URL (a
	// forward-proxy request) or a host (CONNECT), and the upstream is
	// chosen by the path's prefix alone, never by Host.
	if r.Method == http.MethodConnect || !strings.HasPrefix(r.RequestURI, "/") || r.URL.IsAbs() {
		p.plainError(w, http.StatusBadRequest, "cooldown-proxy forwards only origin-form requests (a path, not a URL) to its configured routes")
		return
	}
	if hasDotDot(r.URL.Path) {
		p.plainError(w, http.StatusBadRequest, "cooldown-proxy refuses a path with a .. segment")
		return
	}
	route, rest := p.match(r.URL.Path)
	if route == nil {
		p.plainError(w, http.StatusNotFound, "cooldown-proxy has no route for this path")
		return
	}
	pl := &plan{rest: rest, served: -1, start: time.Now()}
	if r.Body != nil && r.Body != http.NoBody {
		head, err := io.ReadAll(io.LimitReader(r.Body, p.cfg.MaxSniff+1))
		if err != nil {
			p.plainError(w, http.StatusBadRequest, "cooldown-proxy could not read the request body")
			return
		}
		if int64(len(head)) <= p.cfg.MaxSniff {
			pl.body, pl.buffered = head, true
			pl.model = sniffModel(head)
			r.Body = io.NopCloser(bytes.NewReader(head))
			r.ContentLength = int64(len(head))
		} else {
			// A longer body streams through: its head, then the rest, once.
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
		}
	} else {
		pl.buffered = true
	}
	if err := p.candidates(pl, route, r.Header); err != nil {
		p.shapedError(w, route.Provider, http.StatusBadRequest, "invalid_request_error", "cooldownd_invalid_connection", err.Error())
		p.metrics.count(route.Prefix, pl.model, "rejected")
		return
	}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), planKey{}, pl)))
}

// match returns the route whose prefix is the longest that ends at a
// segment boundary of path, and the rest of path.
func (p *Proxy) match(path string) (*Route, string) {
	var best *Route
	for i := range p.cfg.Routes {
		r := &p.cfg.Routes[i]
		if (path == r.Prefix || strings.HasPrefix(path, r.Prefix+"/")) && (best == nil || len(r.Prefix) > len(best.Prefix)) {
			best = r
		}
	}
	if best == nil {
		return nil, ""
	}
	return best, strings.TrimPrefix(path, best.Prefix)
}

func hasDotDot(path string) bool {
	for seg := range strings.SplitSeq(path, "/") {
		if seg == ".." || seg == "." {
			return true
		}
	}
	return strings.Contains(path, "\\")
}

// credentialHeaders are the headers an SDK sends its API key in.
var credentialHeaders = []string{"Authorization", "X-Api-Key", "Api-Key"}

// anonymous is the credential of a request that carries none (a local
// model server without keys): such requests share one connection per
// upstream and model, as the upstream sees them.
const anonymous = "cooldown-proxy:anonymous"

// requestCredential returns the API key of a request: the first of
// Authorization (without "Bearer "), x-api-key and api-key; anonymous when
// there is none.
func requestCredential(h http.Header) string {
	for _, k := range credentialHeaders {
		if v := h.Get(k); v != "" {
			if k == "Authorization" {
				if t, ok := strings.CutPrefix(v, "Bearer "); ok {
					return strings.TrimSpace(t)
				}
			}
			return v
		}
	}
	return anonymous
}

// candidates fills pl.cands: the primary, then the model's fallbacks when
// the body is buffered (a fallback rewrites it), without duplicates.
func (p *Proxy) candidates(pl *plan, route *Route, h http.Header) error {
	cred := requestCredential(h)
	add := func(c candidate) error {
		key := c.credential
		if key == "" {
			key = cred
		}
		conn, err := p.cfg.Client.Connection(c.route.Provider, c.route.Upstream.String(), key, c.model, label(c.route.Provider, c.model))
		if err != nil {
			return fmt.Errorf("cooldown-proxy could not name the connection: %w", errors.Unwrap(err))
		}
		for _, o := range pl.cands {
			if o.conn.ID() == conn.ID() {
				return nil
			}
		}
		c.conn = conn
		pl.cands = append(pl.cands, c)
		return nil
	}
	if err := add(candidate{route: route, model: pl.model}); err != nil {
		return err
	}
	if !pl.buffered || pl.model == "" {
		return nil
	}
	for _, t := range p.cfg.Fallbacks[pl.model] {
		if len(pl.cands) == client.MaxCandidates {
			break
		}
		c := candidate{route: route, model: t.Model}
		if t.Route != "" {
			c.route, _ = p.routeByPrefix(t.Route)
		}
		if t.credential != "" {
			c.credential, c.header = t.credential, t.Header
			if c.header == "" {
				c.header = "authorization"
				if c.route.Provider == ProviderAnthropic {
					c.header = "x-api-key"
				}
			}
		}
		if err := add(c); err != nil {
			return err
		}
	}
	return nil
}

func (p *Proxy) routeByPrefix(prefix string) (*Route, bool) {
	for i := range p.cfg.Routes {
		if p.cfg.Routes[i].Prefix == prefix {
			return &p.cfg.Routes[i], true
		}
	}
	return nil, false
}

// label names provider and model, within client.MaxLabelLen.
func label(provider, model string) string {
	l := provider
	if model != "" {
		l += " " + model
	}
	if len(l) > client.MaxLabelLen {
		l = l[:client.MaxLabelLen] // validModel allows ASCII only
	}
	return l
}

// sniffModel returns the JSON body's top-level "model" string, "" when the
// body is not a JSON object or the model is not a plausible name.
func sniffModel(body []byte) string {
	var v struct {
		Model string `json:"model"`
	}
	if json.Unmarshal(body, &v) != nil || !validModel(v.Model) {
		return ""
	}
	return v.Model
}

// rewrite points the outgoing request at the primary candidate's upstream.
// The transport points it at another candidate when the guard picks one.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	pl := pr.In.Context().Value(planKey{}).(*plan)
	target(pr.Out, pl, 0)
}

// target points out at candidate i of pl: its URL, its credential and its
// model.
func target(out *http.Request, pl *plan, i int) {
	c := pl.cands[i]
	u := *c.route.Upstream
	u.Path = c.route.Upstream.Path + pl.rest
	u.RawPath = ""
	u.RawQuery = out.URL.RawQuery
	out.URL = &u
	out.Host = ""
	if c.credential != "" {
		for _, k := range credentialHeaders {
			out.Header.Del(k)
		}
		v := c.credential
		if c.header == "authorization" {
			v = "Bearer " + v
		}
		out.Header.Set(c.header, v)
	}
}

// guard is the proxy's transport: it sends each request through the
// client's guard over the plan's candidates.
type guard struct{ p *Proxy }

func (g guard) RoundTrip(out *http.Request) (*http.Response, error) {
	pl := out.Context().Value(planKey{}).(*plan)
	if !pl.buffered {
		// The body can be sent once: the client's RoundTripper does not
		// retry a request without GetBody.
		pl.served = 0
		return g.p.cfg.Client.RoundTripper(pl.cands[0].conn, g.p.base).RoundTrip(out)
	}
	conns := make([]client.Conn, len(pl.cands))
	for i, c := range pl.cands {
		conns[i] = c.conn
	}
	resp, err := g.p.cfg.Client.DoFallback(out.Context(), conns, func(ctx context.Context, conn client.Conn) (*http.Response, error) {
		i := 0
		for j, c := range pl.cands {
			if c.conn.ID() == conn.ID() {
				i = j
			}
		}
		pl.served = i
		req := out.Clone(ctx)
		target(req, pl, i)
		body := pl.body
		if i > 0 && pl.cands[i].model != pl.model {
			body = withModel(body, pl.cands[i].model)
		}
		if out.Body != nil && out.Body != http.NoBody {
			req.Body = io.NopCloser(bytes.NewReader(body))
			req.ContentLength = int64(len(body))
		}
		return g.p.base.RoundTrip(req)
	})
	if err != nil {
		if e, ok := errors.AsType[*client.Error](err); ok && e.Response != nil {
			// The provider's own answer, as read by the guard: the SDK
			// sees its error as if it had called the provider.
			return e.Response, nil
		}
		return nil, err
	}
	return resp, nil
}

// withModel returns body with its top-level "model" set to model (body is a
// JSON object: its model was read from it).
func withModel(body []byte, model string) []byte {
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return body
	}
	m, _ := json.Marshal(model)
	obj["model"] = m
	out, err := json.Marshal(obj)
	if err != nil {
		return body
	}
	return out
}

// modifyResponse names the fallback that answered and counts the request.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	pl := resp.Request.Context().Value(planKey{}).(*plan)
	decision := "forwarded"
	if pl.served > 0 {
		decision = "fallback"
		resp.Header.Set("cooldownd-fallback", pl.cands[pl.served].model)
	}
	route := pl.cands[0].route.Prefix
	p.metrics.count(route, pl.model, decision)
	p.log.Info("proxied", "route", route, "model", pl.model, "served_model", pl.cands[max(pl.served, 0)].model,
		"status", resp.StatusCode, "decision", decision, "conn", pl.cands[max(pl.served, 0)].conn, "took", time.Since(pl.start))
	return nil
}
