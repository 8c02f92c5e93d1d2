package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/store"
)

// candidateFields are the field names of Admit's candidates, built once
// rather than formatted on every request.
var candidateFields = func() (f [MaxCandidates]string) {
	for i := range f {
		f[i] = fmt.Sprintf("candidates[%d]", i)
	}
	return f
}()

// cooldownService implements cooldownv1connect.CooldownServiceHandler.
type cooldownService struct{ *Server }

func (s cooldownService) Admit(ctx context.Context, req *connect.Request[cooldownv1.AdmitRequest]) (*connect.Response[cooldownv1.AdmitResponse], error) {
	who, err := s.authorize(ctx, req.Header(), RoleClient)
	if err != nil {
		return nil, err
	}
	cands := req.Msg.GetCandidates()
	if len(cands) < 1 || len(cands) > MaxCandidates {
		return nil, errInvalid("candidates", "must hold 1 to %d connections, got %d", MaxCandidates, len(cands))
	}
	conns := make([]store.Conn, len(cands))
	for i, c := range cands {
		id, label, err := parseConn(candidateFields[i], c)
		if err != nil {
			return nil, err
		}
		conns[i] = store.Conn{Tenant: who.Tenant, ID: id, Label: label}
	}
	idx, ds, err := s.store.AdmitFirst(ctx, conns)
	if err != nil {
		return nil, s.storeError(ctx, "admit", err)
	}
	out := &cooldownv1.AdmitResponse{CandidateIndex: uint32(idx)}
	for _, d := range ds {
		out.Candidates = append(out.Candidates, &cooldownv1.CandidateDecision{
			Decision: cooldownv1.Decision(d.Decision), DenyReason: cooldownv1.DenyReason(d.Reason),
			RetryAfter: dur(d.RetryAfter), State: cooldownv1.State(d.Phase), Revision: d.Revision,
		})
		s.metrics.admit(d)
		s.metrics.transitionsOf(d.Events)
		if d.LeaseExpired {
			s.metrics.expired.Inc()
		}
	}
	d := ds[idx]
	out.Decision = cooldownv1.Decision(d.Decision)
	out.Revision = d.Revision
	out.State = cooldownv1.State(d.Phase)
	out.ServerTime = timestamppb.New(d.Now)
	switch d.Decision {
	case breaker.Deny:
		out.DenyReason = cooldownv1.DenyReason(d.Reason)
		out.RetryAfter = dur(d.RetryAfter)
		out.AvailableAt = timestamppb.New(d.Now.Add(time.Duration(d.RetryAfter) * time.Millisecond))
	case breaker.AllowProbe:
		out.LeaseToken = d.LeaseToken
		out.LeaseExpiresAt = timestamppb.New(d.LeaseExpires)
	}
	return connect.NewResponse(out), nil
}

// MaxBatch is the most successes one report may stand for.
const MaxBatch = 1_000_000

func (s cooldownService) Report(ctx context.Context, req *connect.Request[cooldownv1.ReportRequest]) (*connect.Response[cooldownv1.ReportResponse], error) {
	who, err := s.authorize(ctx, req.Header(), RoleClient)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	id, label, err := parseConn("connection", m.GetConnection())
	if err != nil {
		return nil, err
	}
	// Check the wire value before narrowing it: breaker.Outcome is a uint8,
	// so 257 would otherwise become SUCCESS.
	wo := m.GetOutcome()
	o := breaker.Outcome(wo)
	if wo < 0 || wo > math.MaxUint8 || !o.Valid() {
		return nil, errInvalid("outcome", "must be one of the defined outcomes, got %d", wo)
	}
	retry, err := parseHint("retry_after", m.GetRetryAfter())
	if err != nil {
		return nil, err
	}
	if st := m.GetHttpStatus(); st != 0 && (st < 100 || st > 999) {
		return nil, errInvalid("http_status", "must be 0 or an HTTP status code (100-999), got %d", st)
	}
	if err := checkCode("error_code", m.GetErrorCode()); err != nil {
		return nil, err
	}
	if len(m.GetLeaseToken()) > 128 {
		return nil, errInvalid("lease_token", "must be at most 128 bytes")
	}
	if n := m.GetCount(); n > 1 && (o != breaker.OutcomeSuccess || m.GetLeaseToken() != "" || n > MaxBatch) {
		return nil, errInvalid("count", "above 1 only for a success without a lease token, at most %d; got %d", MaxBatch, n)
	}
	res, err := s.store.Report(ctx, store.Conn{Tenant: who.Tenant, ID: id, Label: label}, breaker.Report{
		Revision: m.GetRevision(), LeaseToken: m.GetLeaseToken(), Outcome: o, RetryAfter: retry,
		HTTPStatus: int(m.GetHttpStatus()), ErrorCode: m.GetErrorCode(), Count: int64(m.GetCount()),
	})
	if err != nil {
		return nil, s.storeError(ctx, "report", err)
	}
	s.metrics.report(o, res.Accepted)
	s.metrics.transitionsOf(res.Events)
	return connect.NewResponse(&cooldownv1.ReportResponse{
		State: cooldownv1.State(res.Phase), Revision: res.Revision, Accepted: res.Accepted, Changed: res.Changed,
		ServerTime: timestamppb.New(res.Now),
	}), nil
}

func (s cooldownService) ExtendLease(ctx context.Context, req *connect.Request[cooldownv1.ExtendLeaseRequest]) (*connect.Response[cooldownv1.ExtendLeaseResponse], error) {
	who, err := s.authorize(ctx, req.Header(), RoleClient)
	if err != nil {
		return nil, err
	}
	id, label, err := parseConn("connection", req.Msg.GetConnection())
	if err != nil {
		return nil, err
	}
	ttl, err := parseHint("ttl", req.Msg.GetTtl())
	if err != nil {
		return nil, err
	}
	if tok := req.Msg.GetLeaseToken(); tok == "" || len(tok) > 128 {
		return nil, errInvalid("lease_token", "must be the 1 to 128 byte token Admit returned")
	}
	exp, err := s.store.ExtendLease(ctx, store.Conn{Tenant: who.Tenant, ID: id, Label: label}, req.Msg.GetLeaseToken(), time.Duration(ttl)*time.Millisecond)
	if err != nil {
		return nil, s.storeError(ctx, "extend lease", err)
	}
	return connect.NewResponse(&cooldownv1.ExtendLeaseResponse{LeaseExpiresAt: timestamppb.New(exp)}), nil
}

func (s cooldownService) GetConnection(ctx context.Context, req *connect.Request[cooldownv1.GetConnectionRequest]) (*connect.Response[cooldownv1.GetConnectionResponse], error) {
	who, err := s.authorize(ctx, req.Header(), RoleViewer)
	if err != nil {
		return nil, err
	}
	id, err := parseID("id", req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	if req.Msg.GetHistoryLimit() > 50 {
		return nil, errInvalid("history_limit", "must be at most 50")
	}
	snap, hist, err := s.store.Get(ctx, who.Tenant, id, int(req.Msg.GetHistoryLimit()))
	if err != nil {
		return nil, s.storeError(ctx, "get", err)
	}
	out := &cooldownv1.GetConnectionResponse{Connection: stateProto(snap)}
	for _, t := range hist {
		out.History = append(out.History, transitionProto(t, snap.Label))
	}
	return connect.NewResponse(out), nil
}

func (s cooldownService) ListConnections(ctx context.Context, req *connect.Request[cooldownv1.ListConnectionsRequest]) (*connect.Response[cooldownv1.ListConnectionsResponse], error) {
	who, err := s.authorize(ctx, req.Header(), RoleViewer)
	if err != nil {
		return nil, err
	}
	size := int(req.Msg.GetPageSize())
	if size == 0 {
		size = DefaultPageSize
	}
	if size > MaxPageSize {
		return nil, errInvalid("page_size", "must be at most %d", MaxPageSize)
	}
	after := req.Msg.GetPageToken()
	if after != "" {
		if _, err := keys.ParseID(after); err != nil {
			return nil, errInvalid("page_token", "is not a token from a previous page")
		}
	}
	snaps, more, err := s.listPage(ctx, who.Tenant, after, size)
	if err != nil {
		return nil, s.storeError(ctx, "list", err)
	}
	out := &cooldownv1.ListConnectionsResponse{}
	for _, sn := range snaps {
		out.Connections = append(out.Connections, stateProto(sn))
	}
	if more && len(snaps) > 0 {
		out.NextPageToken = snaps[len(snaps)-1].ID.String()
	}
	return connect.NewResponse(out), nil
}

func (s cooldownService) WatchConnections(ctx context.Context, req *connect.Request[cooldownv1.WatchConnectionsRequest], stream *connect.ServerStream[cooldownv1.WatchConnectionsResponse]) error {
	// Viewers watch for the dashboard; clients watch to keep the mirror of
	// the connections they admit locally (see client.WithMirror).
	who, err := s.authorize(ctx, req.Header(), RoleViewer)
	if connect.CodeOf(err) == connect.CodePermissionDenied {
		who, err = s.authorize(ctx, req.Header(), RoleClient)
	}
	if err != nil {
		return err
	}
	release, err := s.openWatch(who.Tenant)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Subscribe before the snapshot so no change falls between the two.
	events, err := s.store.Watch(ctx, who.Tenant)
	if err != nil {
		return s.storeError(ctx, "watch", err)
	}
	if req.Msg.GetSnapshot() {
		after := ""
		for {
			snaps, more, err := s.listPage(ctx, who.Tenant, after, MaxPageSize)
			if err != nil {
				return s.storeError(ctx, "list", err)
			}
			for _, sn := range snaps {
				if err := stream.Send(&cooldownv1.WatchConnectionsResponse{Connection: stateProto(sn), Snapshot: true}); err != nil {
					return err
				}
			}
			if !more || len(snaps) == 0 {
				break
			}
			after = snaps[len(snaps)-1].ID.String()
		}
	}
	// One heartbeat now flushes the response headers, so a client knows the
	// subscription is live even when there is nothing to send yet.
	if err := stream.Send(&cooldownv1.WatchConnectionsResponse{}); err != nil {
		return err
	}
	heartbeat := time.NewTicker(s.heartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.closing:
			return nil
		case <-heartbeat.C:
			// An empty message keeps proxies from idling the stream out.
			if err := stream.Send(&cooldownv1.WatchConnectionsResponse{}); err != nil {
				return err
			}
		case t, ok := <-events:
			if !ok {
				return connect.NewError(connect.CodeUnavailable, errWatchLost)
			}
			// The event carries the state after the change: no read here.
			snap := t.State
			if snap == nil {
				got, _, err := s.store.Get(ctx, who.Tenant, t.ID, 0)
				if err != nil {
					return s.storeError(ctx, "get", err)
				}
				snap = &got
			}
			if err := stream.Send(&cooldownv1.WatchConnectionsResponse{
				Connection: stateProto(*snap), Transition: transitionProto(t, snap.Label),
			}); err != nil {
				return err
			}
		}
	}
}

// maxPrunedPages bounds how many consecutive pages of expired index entries
// one listPage call reads past.
const maxPrunedPages = 100

// listPage is store.List that reads past pages whose entries had all
// expired: List prunes those from the index and returns none of them with
// more=true, which would otherwise end the listing early (there is no
// last id to continue after). Each retry starts from the same place, and
// the pruned entries are gone, so every retry makes progress.
func (s cooldownService) listPage(ctx context.Context, tenant, after string, size int) ([]store.Snapshot, bool, error) {
	for range maxPrunedPages {
		snaps, more, err := s.store.List(ctx, tenant, after, size)
		if err != nil || len(snaps) > 0 || !more {
			return snaps, more, err
		}
	}
	return nil, false, connect.NewError(connect.CodeUnavailable, errors.New("too many expired connections to skip in one page; retry"))
}

// openWatch counts a watch stream against the per-tenant and per-replica
// caps; release undoes it.
func (s *Server) openWatch(tenant string) (release func(), err error) {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if s.watching == nil {
		s.watching = map[string]int{}
	}
	total := 0
	for _, n := range s.watching {
		total += n
	}
	if s.watching[tenant] >= MaxWatchesPerTenant || total >= MaxWatches {
		return nil, connect.NewError(connect.CodeResourceExhausted, errors.New("too many open watch streams; close some or use List"))
	}
	s.watching[tenant]++
	return func() {
		s.watchMu.Lock()
		defer s.watchMu.Unlock()
		if s.watching[tenant]--; s.watching[tenant] == 0 {
			delete(s.watching, tenant)
		}
	}, nil
}
