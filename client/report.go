package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// Report records the outcome of the call admitted by a. Only a's Conn,
// Revision, LeaseToken, Retry and Local are read, so a caller that kept
// just those may fill in an Admission itself. Every report carries the
// client's reporter id (see [WithReporter]) and whether the call was a
// retry on the connection ([Admission.Retry]). A classification without an outcome is
// an error; [OutcomeCanceled] releases a probe lease without changing the
// state.
//
// Report is sent even when ctx is already canceled (bounded by the admit
// timeout), so that a canceled call still releases its lease. With
// [WithMirror] a success is not sent now: it is counted for the next
// batch (a probe's is sent in the background). Every
// admission cooldownd granted is settled with it: when cooldownd does not
// take the report now, it is queued and sent again in the background (see
// [WithReportQueue]) and Report returns nil; the in-process breaker learns
// the outcome meanwhile. The outcome of a call decided in-process goes to
// the in-process breaker, and, when the fleet must learn it (a failure, a
// server delay, quota or auth), to the queue as well. A report cooldownd
// refuses returns a [*RejectedError].
func (c *Client) Report(ctx context.Context, a Admission, cl Classification) error {
	_, err := c.report(ctx, a, cl)
	return err
}

// report sends a report and says whether the connection is open after it.
func (c *Client) report(ctx context.Context, a Admission, cl Classification) (open bool, err error) {
	if ctx2, span := c.startReport(ctx, a, cl); span != nil {
		ctx = ctx2
		defer func() { endReport(span, open, err) }()
	}
	if a.Conn.IsZero() {
		return false, fmt.Errorf("client: report: %w: zero Conn", ErrInvalidConn)
	}
	if cl.Outcome < OutcomeSuccess || cl.Outcome > OutcomeCanceled {
		return false, fmt.Errorf("client: report: invalid outcome %s", cl.Outcome)
	}
	if c.mirror != nil {
		rev := a.Revision
		if a.Local {
			rev = c.revs.last(a.Conn.id)
		}
		c.mirror.reported(a.Conn, rev, cl)
	}
	if a.Local {
		if informs(cl) {
			if c.mirror != nil {
				c.mirror.settle(ctx, a.Conn, false) // queued ahead of it (decision 0061)
			}
			c.enqueue(c.reportRequest(a.Conn, c.revs.last(a.Conn.id), "", a.Retry, cl), reportDelay(cl))
		}
		return c.local.report(c.now(), a, cl, false).open, nil
	}
	if c.mirror != nil && c.mirror.batching() && cl.Outcome == OutcomeSuccess && cl.Proactive <= 0 && a.LeaseToken == "" {
		// With the mirror, a success never waits on cooldownd: counted
		// for the next batch (no request is built: the healthy path's
		// cost). A probe's, which releases the fleet, is reported as
		// without the mirror: cooldownd has it when Report returns.
		c.mirror.add(a.Conn, a.Revision, a.Retry)
		return false, nil
	}
	direct := c.health.useService(c.now())
	if c.mirror != nil {
		// This process's successes of the connection, batched before this
		// report, go first (decision 0061): sent, or queued ahead of it.
		c.mirror.settle(context.WithoutCancel(ctx), a.Conn, direct)
	}
	req := c.reportRequest(a.Conn, a.Revision, a.LeaseToken, a.Retry, cl)
	if !direct {
		c.enqueue(req, reportDelay(cl))
		return c.local.report(c.now(), a, cl, true).open, nil
	}
	var resp *connect.Response[cooldownv1.ReportResponse]
	tried, kind, err := c.call(context.WithoutCancel(ctx), "report", func(ctx context.Context, rpc cooldownService) error {
		var err error
		resp, err = rpc.Report(ctx, connect.NewRequest(req))
		return err
	})
	switch kind {
	case rpcOK:
		c.health.success()
		c.revs.see(a.Conn.id, resp.Msg.GetRevision())
		if c.mirror != nil {
			c.mirror.reportAnswer(a.Conn, resp.Msg)
		}
		// A shadow policy's open is computed, not enforced: the next Admit
		// allows this connection again, so it is no reason to switch
		// candidates at once, nor a word for the in-process fallback.
		open := resp.Msg.GetState() == cooldownv1.State_STATE_OPEN && !resp.Msg.GetShadow()
		if open {
			c.local.heard(c.now(), a.Conn, cl)
		}
		return open, nil
	case rpcRejected:
		return false, &RejectedError{Op: "report", Code: connect.CodeOf(err), Err: err}
	case rpcCapped:
		c.local.capped(err) // the outcome cannot be shared; the call itself went fine
		return false, nil
	case rpcOutage:
		c.health.failure(c.now(), "report", tried, err)
	default:
		c.log.Debug("cooldownd could not take a report; queued", slog.String("code", connect.CodeOf(err).String()))
	}
	c.enqueue(req, reportDelay(cl))
	return c.local.report(c.now(), a, cl, true).open, nil
}

// informs reports whether an outcome decided in-process holds something
// the fleet must learn: a failure, a server delay, quota or auth.
func informs(cl Classification) bool {
	switch cl.Outcome {
	case OutcomeTransientFailure, OutcomeRateLimited, OutcomeOverloaded, OutcomeQuotaExhausted, OutcomeAuthFailure:
		return true
	case OutcomeSuccess:
		return cl.Proactive > 0
	}
	return false
}

// reportRequest builds the wire report, from this client's reporter, with
// a fresh idempotency key: every send of this request (the first try,
// another endpoint, the report queue's resends) carries it, so cooldownd
// counts the report once however many of its answers are lost.
func (c *Client) reportRequest(conn Conn, rev uint64, lease string, retry bool, cl Classification) *cooldownv1.ReportRequest {
	req := &cooldownv1.ReportRequest{
		Connection: wireConn(conn), Revision: rev, LeaseToken: lease,
		Outcome:        cooldownv1.Outcome(cl.Outcome),
		HttpStatus:     uint32(max(cl.HTTPStatus, 0)),
		ErrorCode:      cl.ErrorCode,
		Retry:          retry,
		Reporter:       c.cfg.reporter,
		IdempotencyKey: newReportKey(),
	}
	if d := reportDelay(cl); d > 0 {
		req.RetryAfter = durationpb.New(d)
	}
	return req
}

// ExtendLease keeps the probe lease of a alive for ttl from now (ttl ≤ 0:
// the policy's lease TTL) and returns its new expiry. Use it for probes
// that run longer than the lease TTL. Only a's Conn, LeaseToken and Local
// are read. A lease that is no longer held is a [*RejectedError] with
// [connect.CodeFailedPrecondition].
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
	var resp *connect.Response[cooldownv1.ExtendLeaseResponse]
	tried, kind, err := c.call(ctx, "extend lease", func(ctx context.Context, rpc cooldownService) error {
		var err error
		resp, err = rpc.ExtendLease(ctx, connect.NewRequest(req))
		return err
	})
	switch {
	case kind == rpcOK:
		c.health.success()
		return resp.Msg.GetLeaseExpiresAt().AsTime(), nil
	case ctx.Err() != nil:
		return time.Time{}, fmt.Errorf("client: extend lease: %w", ctx.Err())
	case kind == rpcRejected:
		return time.Time{}, &RejectedError{Op: "extend lease", Code: connect.CodeOf(err), Err: err}
	case kind == rpcOutage:
		c.health.failure(c.now(), "extend lease", tried, err)
	}
	return time.Time{}, fmt.Errorf("client: extend lease: %w", err)
}

// maxRevisions bounds the revisions a client remembers.
const maxRevisions = 4096

// revisions remembers the last revision cooldownd gave for each connection
// this process used, so that an outcome decided in-process during an
// outage is reported under it: it counts when the state has not moved
// since, and only its hints apply when it has.
type revisions struct {
	mu sync.Mutex
	m  map[ID]uint64
}

func (r *revisions) see(id ID, rev uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m) >= maxRevisions {
		r.m = make(map[ID]uint64)
	}
	r.m[id] = rev
}

func (r *revisions) last(id ID) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id]
}
