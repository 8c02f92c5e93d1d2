package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/keys"
)

// Client talks to cooldownd and guards provider calls with its decisions.
// It is safe for concurrent use; create one per process and share it.
type Client struct {
	cfg   config
	http  connect.HTTPClient
	rpc   cooldownv1connect.CooldownServiceClient
	local *local
	log   *slog.Logger
	now   func() time.Time
}

// New returns a Client for the cooldownd at baseURL (http:// or https://,
// e.g. "http://cooldownd:8080"). It checks the options but does not
// contact cooldownd: a Client works (deciding in-process, see [FailMode])
// even when cooldownd is down at start.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	switch {
	case err != nil:
		return nil, errors.New("client: invalid base URL")
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return nil, errors.New("client: base URL must be http:// or https:// with a host")
	case u.User != nil:
		return nil, errors.New("client: base URL must not hold credentials; use WithToken")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.applyToClient(&cfg)
		}
	}
	if err := cfg.policy.Validate(); err != nil {
		return nil, fmt.Errorf("client: local policy: %w", err)
	}
	if n := len(cfg.salt); n != 0 && (n < keys.MinSaltLen || n > keys.MaxSaltLen) {
		return nil, fmt.Errorf("client: salt must be empty or %d to %d bytes, got %d", keys.MinSaltLen, keys.MaxSaltLen, n)
	}
	if cfg.failMode != FailOpen && cfg.failMode != FailClosed {
		return nil, fmt.Errorf("client: unknown fail mode %d", cfg.failMode)
	}
	cfg.rules = cfg.rules.withDefaults()
	if cfg.maxWait <= 0 {
		cfg.maxWait = cfg.rules.MaxServerDelay
	}
	cfg.backoffCap = max(cfg.backoffCap, cfg.backoffBase)
	log := cfg.logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With(slog.String("component", "cooldownd-client"))
	hc := cfg.httpClient
	if hc == nil {
		hc = newHTTPClient(u.Scheme)
	}
	var copts []connect.ClientOption
	if cfg.token != "" {
		copts = append(copts, connect.WithInterceptors(bearer(cfg.token)))
	}
	return &Client{
		cfg:   cfg,
		http:  hc,
		rpc:   cooldownv1connect.NewCooldownServiceClient(hc, strings.TrimRight(baseURL, "/"), copts...),
		local: newLocal(cfg, log),
		log:   log,
		now:   time.Now,
	}, nil
}

// bearer returns an interceptor that sends token as a bearer token.
func bearer(token string) connect.UnaryInterceptorFunc {
	header := "Bearer " + token
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", header)
			return next(ctx, req)
		}
	}
}

// CloseIdleConnections closes idle connections to cooldownd. The Client
// stays usable.
func (c *Client) CloseIdleConnections() {
	if ci, ok := c.http.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// Degraded reports whether the client currently decides in-process because
// cooldownd did not answer.
func (c *Client) Degraded() bool { return c.local.isDegraded() }

// degradable reports whether a cooldownd error means "not reachable or not
// able to decide now" rather than "this request is refused". Callers check
// their own context first, so a canceled code here comes from the
// transport (a connection closed under the call), not from the caller.
func degradable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeUnauthenticated, connect.CodePermissionDenied,
		connect.CodeFailedPrecondition, connect.CodeNotFound, connect.CodeAlreadyExists,
		connect.CodeOutOfRange, connect.CodeUnimplemented, connect.CodeResourceExhausted:
		return false
	}
	return true
}

// capped reports whether cooldownd refused to track a new connection
// because the tenant's connection cap is reached. The call is then decided
// in-process, without treating cooldownd as down.
func capped(err error) bool { return connect.CodeOf(err) == connect.CodeResourceExhausted }

// rpcContext bounds one call to cooldownd.
func (c *Client) rpcContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.admitTimeout)
}

// Admit asks whether a call may go to one of the candidates, in order of
// preference (the primary first; 1 to [MaxCandidates]). A denial is an
// answer, not an error: check [Admission.Decision]. Every allowed
// admission must be followed by one [Client.Report].
//
// When cooldownd does not answer within the admit timeout, or is
// unreachable, the in-process breaker decides ([Admission.Local]) with
// [FailOpen]; with [FailClosed] the error wraps [ErrUnavailable]. Either
// way the outage is logged once, and cooldownd is tried again about once a
// second until it answers. The same happens, for this call only, when
// cooldownd cannot track a new connection because the tenant's connection
// cap is reached. Other errors: an invalid candidate
// ([ErrInvalidConn]), the context's end, or a request cooldownd rejected
// (for example a bad token).
func (c *Client) Admit(ctx context.Context, cands ...Conn) (Admission, error) {
	if err := validConns(cands); err != nil {
		return Admission{}, err
	}
	if !c.local.useService(c.now()) {
		return c.admitLocal(cands, nil)
	}
	req := &cooldownv1.AdmitRequest{Candidates: make([]*cooldownv1.Connection, len(cands))}
	for i, cand := range cands {
		req.Candidates[i] = wireConn(cand)
	}
	rctx, cancel := c.rpcContext(ctx)
	defer cancel()
	resp, err := c.rpc.Admit(rctx, connect.NewRequest(req))
	if err != nil {
		if ctx.Err() != nil {
			return Admission{}, fmt.Errorf("client: admit: %w", ctx.Err())
		}
		switch {
		case degradable(err):
			c.local.down(c.now(), "admit", err)
			return c.admitLocal(cands, err)
		case capped(err):
			// The tenant's cap is not an outage: the call goes ahead,
			// decided in-process, whatever the fail mode.
			c.local.capped(err)
			return c.local.admit(c.now(), cands), nil
		}
		return Admission{}, fmt.Errorf("client: admit: %w", err)
	}
	c.local.up()
	return admission(resp.Msg, cands)
}

// admitLocal decides in-process, or fails closed.
func (c *Client) admitLocal(cands []Conn, cause error) (Admission, error) {
	if c.cfg.failMode == FailClosed {
		if cause != nil {
			return Admission{}, fmt.Errorf("client: admit: %w: %w", ErrUnavailable, cause)
		}
		return Admission{}, fmt.Errorf("client: admit: %w", ErrUnavailable)
	}
	return c.local.admit(c.now(), cands), nil
}

// admission converts cooldownd's answer.
func admission(m *cooldownv1.AdmitResponse, cands []Conn) (Admission, error) {
	i := int(m.GetCandidateIndex())
	d := Decision(m.GetDecision())
	if i >= len(cands) || d < DecisionAllow || d > DecisionDeny {
		return Admission{}, fmt.Errorf("client: admit: malformed answer (decision %d, candidate %d of %d)",
			d, i, len(cands))
	}
	a := Admission{
		Index: i, Conn: cands[i], Decision: d, Revision: m.GetRevision(),
		LeaseToken: m.GetLeaseToken(), Reason: DenyReason(m.GetDenyReason()),
	}
	if m.GetLeaseExpiresAt() != nil {
		a.LeaseExpires = m.GetLeaseExpiresAt().AsTime()
	}
	if m.GetRetryAfter() != nil {
		a.RetryAfter = max(m.GetRetryAfter().AsDuration(), 0)
	}
	return a, nil
}

func wireConn(c Conn) *cooldownv1.Connection {
	return &cooldownv1.Connection{Id: c.id.Bytes(), Label: c.label}
}

// Report records the outcome of the call admitted by a. Only a's Conn,
// Revision, LeaseToken and Local are read, so a caller that kept just those
// may fill in an Admission itself. A classification without an outcome is
// an error; [OutcomeCanceled] releases a probe lease without changing the
// state.
//
// Report is sent even when ctx is already canceled (bounded by the admit
// timeout), so that a canceled call still releases its lease. While
// cooldownd is unreachable the outcome goes to the in-process breaker and
// Report returns nil.
func (c *Client) Report(ctx context.Context, a Admission, cl Classification) error {
	_, err := c.report(ctx, a, cl)
	return err
}

// report sends a report and says whether the connection is open after it.
func (c *Client) report(ctx context.Context, a Admission, cl Classification) (open bool, err error) {
	if a.Conn.IsZero() {
		return false, fmt.Errorf("client: report: %w: zero Conn", ErrInvalidConn)
	}
	if cl.Outcome < OutcomeSuccess || cl.Outcome > OutcomeCanceled {
		return false, fmt.Errorf("client: report: invalid outcome %s", cl.Outcome)
	}
	if a.Local {
		return c.local.report(c.now(), a, cl, false).open, nil
	}
	if !c.local.useService(c.now()) {
		return c.local.report(c.now(), a, cl, true).open, nil
	}
	req := &cooldownv1.ReportRequest{
		Connection: wireConn(a.Conn), Revision: a.Revision, LeaseToken: a.LeaseToken,
		Outcome:    cooldownv1.Outcome(cl.Outcome),
		HttpStatus: uint32(max(cl.HTTPStatus, 0)),
		ErrorCode:  cl.ErrorCode,
	}
	if d := reportDelay(cl); d > 0 {
		req.RetryAfter = durationpb.New(d)
	}
	rctx, cancel := c.rpcContext(context.WithoutCancel(ctx))
	defer cancel()
	resp, err := c.rpc.Report(rctx, connect.NewRequest(req))
	if err != nil {
		switch {
		case degradable(err):
			c.local.down(c.now(), "report", err)
			return c.local.report(c.now(), a, cl, true).open, nil
		case capped(err):
			c.local.capped(err) // the outcome cannot be shared; the call itself went fine
			return false, nil
		}
		return false, fmt.Errorf("client: report: %w", err)
	}
	c.local.up()
	return resp.Msg.GetState() == cooldownv1.State_STATE_OPEN, nil
}

// ExtendLease keeps the probe lease of a alive for ttl from now (ttl ≤ 0:
// the policy's lease TTL) and returns its new expiry. Use it for probes
// that run longer than the lease TTL. Only a's Conn, LeaseToken and Local
// are read.
func (c *Client) ExtendLease(ctx context.Context, a Admission, ttl time.Duration) (time.Time, error) {
	switch {
	case a.Conn.IsZero():
		return time.Time{}, fmt.Errorf("client: extend lease: %w: zero Conn", ErrInvalidConn)
	case a.LeaseToken == "":
		return time.Time{}, errors.New("client: extend lease: no lease token")
	}
	if a.Local {
		t, err := c.local.extend(c.now(), a, ttl)
		if err != nil {
			return time.Time{}, fmt.Errorf("client: extend lease: %w", err)
		}
		return t, nil
	}
	req := &cooldownv1.ExtendLeaseRequest{Connection: wireConn(a.Conn), LeaseToken: a.LeaseToken}
	if ttl > 0 {
		req.Ttl = durationpb.New(ttl)
	}
	rctx, cancel := c.rpcContext(ctx)
	defer cancel()
	resp, err := c.rpc.ExtendLease(rctx, connect.NewRequest(req))
	if err != nil {
		if ctx.Err() == nil && degradable(err) {
			c.local.down(c.now(), "extend_lease", err)
		}
		return time.Time{}, fmt.Errorf("client: extend lease: %w", err)
	}
	c.local.up()
	return resp.Msg.GetLeaseExpiresAt().AsTime(), nil
}
