package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
)

// MaxEndpoints is the most cooldownd URLs one Client takes.
const MaxEndpoints = 16

// cooldownService is the generated Connect client of one endpoint.
type cooldownService = cooldownv1connect.CooldownServiceClient

// endpoint is one cooldownd replica (or load-balanced address).
type endpoint struct {
	url  string
	http connect.HTTPClient
	rpc  cooldownService
}

// Client talks to cooldownd and guards provider calls with its decisions.
// It is safe for concurrent use; create one per process and share it.
type Client struct {
	cfg       config
	endpoints []endpoint
	current   atomic.Int32 // the endpoint calls go to first
	local     *local
	health    *health
	queue     *reportQueue
	revs      revisions
	mirror    *mirror // nil unless WithMirror
	log       *slog.Logger
	now       func() time.Time
	sleep     func(context.Context, time.Duration) error

	localDecisions atomic.Uint64

	closed  context.Context // ends at Close
	close   context.CancelFunc
	senders sync.WaitGroup
}

// New returns a Client for cooldownd at baseURL (http:// or https://, e.g.
// "http://cooldownd:8080"). baseURL may list several replicas separated by
// commas ("http://cd-0:8080,http://cd-1:8080"): calls go to one of them
// (picked at random per Client, to spread a fleet) and move to the next
// when it does not answer, before the Client counts an outage (see
// [WithDegradeAfter]). New checks the options but does not contact
// cooldownd: a Client works (deciding in-process, see [FailMode]) even when
// cooldownd is down at start.
func New(baseURL string, opts ...Option) (*Client, error) {
	urls, err := parseEndpoints(baseURL)
	if err != nil {
		return nil, err
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.applyToClient(&cfg)
		}
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	log := cfg.logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With(slog.String("component", "cooldownd-client"))
	copts := []connect.ClientOption{connect.WithInterceptors(traceContext{})} // W3C traceparent (otel.go)
	if cfg.token != "" {
		copts = append(copts, connect.WithInterceptors(bearer(cfg.token)))
	}
	c := &Client{cfg: cfg, local: newLocal(cfg, log), queue: newReportQueue(cfg.queueSize, cfg.queueMaxAge),
		log: log, now: cfg.now, sleep: cfg.sleep}
	for _, u := range urls {
		hc := cfg.httpClient
		if hc == nil {
			hc = newHTTPClient(u.Scheme) // one per endpoint: each learns its own protocol
		}
		s := strings.TrimRight(u.String(), "/")
		c.endpoints = append(c.endpoints, endpoint{url: s, http: hc,
			rpc: cooldownv1connect.NewCooldownServiceClient(hc, s, copts...)})
	}
	c.current.Store(int32(rand.N(len(c.endpoints))))
	onDown := func() {}
	if cfg.mirror > 0 {
		c.mirror = newMirror(c, cfg.mirror)
		onDown = c.mirror.outage
	}
	c.health = newHealth(cfg, len(c.endpoints), log, onDown, c.local.forget)
	c.closed, c.close = context.WithCancel(context.Background())
	if c.mirror != nil {
		c.mirror.start()
	}
	return c, nil
}

// parseEndpoints parses the comma-separated cooldownd URLs of [New].
func parseEndpoints(list string) ([]*url.URL, error) {
	var out []*url.URL
	for _, s := range strings.Split(list, ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		switch {
		case err != nil:
			return nil, errors.New("client: invalid base URL")
		case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
			return nil, errors.New("client: base URL must be http:// or https:// with a host")
		case u.User != nil:
			return nil, errors.New("client: base URL must not hold credentials; use WithToken")
		}
		out = append(out, u)
	}
	if len(out) > MaxEndpoints {
		return nil, fmt.Errorf("client: at most %d base URLs, got %d", MaxEndpoints, len(out))
	}
	return out, nil
}

// bearer is an interceptor that sends a bearer token on every call, unary
// and streaming (the mirror's watch).
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// CloseIdleConnections closes idle connections to cooldownd. The Client
// stays usable.
func (c *Client) CloseIdleConnections() {
	for _, e := range c.endpoints {
		if ci, ok := e.http.(interface{ CloseIdleConnections() }); ok {
			ci.CloseIdleConnections()
		}
	}
}

// Close stops the Client's background work: the sender of queued reports
// (call [Client.Flush] first to deliver them) and idle connections. A
// closed Client still decides, but queues nothing more for later.
func (c *Client) Close() error {
	c.close()
	if c.mirror != nil {
		c.mirror.wait()
	}
	c.senders.Wait()
	c.CloseIdleConnections()
	return nil
}

// Reporter returns the id this client sends with its reports (see
// [WithReporter]).
func (c *Client) Reporter() string { return c.cfg.reporter }

// Degraded reports whether the client currently decides in-process because
// cooldownd did not answer repeatedly (see [WithDegradeAfter]).
func (c *Client) Degraded() bool { return c.health.isDegraded() }

// rpcKind is what one call to cooldownd came to.
type rpcKind int

const (
	rpcOK       rpcKind = iota
	rpcRejected         // a configuration or caller error: never an outage
	rpcCapped           // the tenant's connection cap: decided in-process, not an outage
	rpcOutage           // no answer: transport failure, unavailable, deadline
	rpcFailed           // an answer that decides nothing (internal, unknown…)
)

// classifyRPC sorts a Connect error. Callers check their own context
// first, so a canceled code here comes from the transport (a connection
// closed under the call), not from the caller.
func classifyRPC(err error) rpcKind {
	if err == nil {
		return rpcOK
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeInvalidArgument,
		connect.CodeFailedPrecondition, connect.CodeNotFound, connect.CodeAlreadyExists,
		connect.CodeOutOfRange, connect.CodeUnimplemented:
		return rpcRejected
	case connect.CodeResourceExhausted:
		return rpcCapped
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeCanceled:
		return rpcOutage
	}
	return rpcFailed
}

// call runs do against the endpoints, the preferred one first, within one
// admit timeout in all. An endpoint that does not answer loses its place
// to the next, and the call moves on to it while time is left. It returns
// the endpoints it tried, the kind of the last result and its error.
func (c *Client) call(ctx context.Context, op string, do func(context.Context, cooldownService) error) ([]int, rpcKind, error) {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.admitTimeout)
	defer cancel()
	n := len(c.endpoints)
	start := int(c.current.Load())
	tried := make([]int, 0, n)
	var err error
	for i := range n {
		e := (start + i) % n
		tried = append(tried, e)
		err = do(rctx, c.endpoints[e].rpc)
		kind := classifyRPC(err)
		if kind != rpcOutage {
			return tried, kind, err
		}
		if c.current.CompareAndSwap(int32(e), int32((e+1)%n)) && n > 1 {
			c.log.Debug("cooldownd endpoint did not answer; moving to the next", slog.String("op", op),
				slog.String("endpoint", c.endpoints[e].url), slog.String("code", connect.CodeOf(err).String()))
		}
		if rctx.Err() != nil {
			break
		}
	}
	return tried, rpcOutage, err
}

// Admit asks whether a call may go to one of the candidates, in order of
// preference (the primary first; 1 to [MaxCandidates]). It is a first
// attempt on every candidate; for a retry use [Client.AdmitAttempt]. A
// denial is an answer, not an error: check [Admission.Decision]. An
// allowed admission may carry a shadow policy's would-be denial
// ([Admission.Shadowed]): the call still goes. Every allowed admission
// must be followed by one [Client.Report].
//
// When no endpoint of cooldownd answers within the admit timeout, this
// call is decided by the fail mode: by the in-process breaker
// ([Admission.Local]) with [FailOpen], or an error wrapping
// [ErrUnavailable] with [FailClosed]. After repeated such failures the
// client degrades (see [WithDegradeAfter]): calls are decided in-process
// without trying cooldownd, which is tried again about once a second until
// it answers. The same happens, for this call only and whatever the fail
// mode, when cooldownd cannot track a new connection because the tenant's
// connection cap is reached. Other errors: an invalid candidate
// ([ErrInvalidConn]), the context's end, or a request cooldownd refused
// (a [*RejectedError], for example for a bad token).
func (c *Client) Admit(ctx context.Context, cands ...Conn) (Admission, error) {
	return c.AdmitAttempt(ctx, Attempt{Candidates: cands})
}

// AdmitAttempt is [Client.Admit] for a call that may already have been
// sent to some of its candidates: a.Sent. On those the call is a retry,
// which cooldownd charges to the connection's fleet retry budget and
// denies with [ReasonRetryBudget] when the budget is spent (fall back or
// give up then; do not wait). On the other candidates it is a first
// attempt. [Admission.Retry] says which the chosen candidate was, and
// [Client.Report] passes it on. [Client.Do] and [Client.DoFallback] do
// this by themselves; call AdmitAttempt when driving the protocol by hand
// around retries of your own. A retry is never admitted from the mirror
// (see [WithMirror]).
func (c *Client) AdmitAttempt(ctx context.Context, at Attempt) (a Admission, err error) {
	if ctx2, span := c.startAdmit(ctx, at); span != nil {
		ctx = ctx2
		defer func() { endAdmit(span, a, err) }()
	}
	cands := at.Candidates
	if err := validConns(cands); err != nil {
		return Admission{}, err
	}
	retry := at.retries()
	var ticket mirrorTicket
	if c.mirror != nil {
		a, t, ok := c.mirror.admit(cands[0], len(retry) > 0 && retry[0], c.health.isDegraded(), c.now())
		if ok {
			return a, nil
		}
		ticket = t
	}
	if !c.health.useService(c.now()) {
		return c.admitLocal(cands, retry, nil)
	}
	req := &cooldownv1.AdmitRequest{Candidates: make([]*cooldownv1.Connection, len(cands)), Retry: retry}
	for i, cand := range cands {
		req.Candidates[i] = wireConn(cand)
	}
	var resp *connect.Response[cooldownv1.AdmitResponse]
	tried, kind, err := c.call(ctx, "admit", func(ctx context.Context, rpc cooldownService) error {
		var err error
		resp, err = rpc.Admit(ctx, connect.NewRequest(req))
		return err
	})
	if kind != rpcOK && ctx.Err() != nil {
		return Admission{}, fmt.Errorf("client: admit: %w", ctx.Err())
	}
	switch kind {
	case rpcOK:
		c.health.success()
		a, err := admission(resp.Msg, cands, retry)
		if err == nil {
			c.revs.see(a.Conn.id, a.Revision)
			c.local.learn(c.now(), resp.Msg, cands, retry)
			if c.mirror != nil {
				c.mirror.learn(a, resp.Msg.GetState(), resp.Msg.GetThrottleProbability(), ticket, c.now())
			}
		}
		return a, err
	case rpcRejected:
		return Admission{}, &RejectedError{Op: "admit", Code: connect.CodeOf(err), Err: err}
	case rpcCapped:
		// The tenant's cap is not an outage: the call goes ahead,
		// decided in-process, whatever the fail mode.
		c.local.capped(err)
		c.localDecisions.Add(1)
		return c.local.admit(c.now(), cands, retry), nil
	case rpcOutage:
		c.health.failure(c.now(), "admit", tried, err)
	default:
		c.log.Debug("cooldownd could not decide; this call is decided in-process",
			slog.String("code", connect.CodeOf(err).String()), slog.String("error", err.Error()))
	}
	return c.admitLocal(cands, retry, err)
}

// admitLocal decides in-process, or fails closed.
func (c *Client) admitLocal(cands []Conn, retry []bool, cause error) (Admission, error) {
	if c.cfg.failMode == FailClosed {
		if cause != nil {
			return Admission{}, fmt.Errorf("client: admit: %w: %w", ErrUnavailable, cause)
		}
		return Admission{}, fmt.Errorf("client: admit: %w", ErrUnavailable)
	}
	c.localDecisions.Add(1)
	return c.local.admit(c.now(), cands, retry), nil
}

// admission converts cooldownd's answer.
func admission(m *cooldownv1.AdmitResponse, cands []Conn, retry []bool) (Admission, error) {
	i := int(m.GetCandidateIndex())
	d := Decision(m.GetDecision())
	if i >= len(cands) || d < DecisionAllow || d > DecisionDeny {
		return Admission{}, fmt.Errorf("client: admit: malformed answer (decision %d, candidate %d of %d)",
			d, i, len(cands))
	}
	a := Admission{
		Index: i, Conn: cands[i], Decision: d, Revision: m.GetRevision(),
		LeaseToken: m.GetLeaseToken(), Reason: DenyReason(m.GetDenyReason()), Retry: isRetry(retry, i),
		NotReplicated: m.GetDurability() == cooldownv1.Durability_DURABILITY_NOT_REPLICATED,
	}
	if a.Allowed() {
		a.Shadowed = DenyReason(m.GetShadowDenyReason())
		if a.Shadowed != ReasonNone && m.GetShadowRetryAfter() != nil {
			a.ShadowRetryAfter = max(m.GetShadowRetryAfter().AsDuration(), 0)
		}
	}
	if m.GetLeaseExpiresAt() != nil {
		a.LeaseExpires = m.GetLeaseExpiresAt().AsTime()
	}
	if m.GetRetryAfter() != nil {
		a.RetryAfter = max(m.GetRetryAfter().AsDuration(), 0)
	}
	return a, nil
}

// isRetry reports whether retry marks candidate i.
func isRetry(retry []bool, i int) bool { return i < len(retry) && retry[i] }

func wireConn(c Conn) *cooldownv1.Connection {
	return &cooldownv1.Connection{Id: c.id.Bytes(), Label: c.label}
}
