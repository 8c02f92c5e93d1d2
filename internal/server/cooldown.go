package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/store"
)

// errWatchLost ends a watch stream whose events may have gaps: the shared
// Redis subscription broke (or was re-established after a drop), or the
// stream fell too far behind. Clients reconnect with snapshot=true.
var errWatchLost = errors.New("watch interrupted, events may have been missed: re-read the state (snapshot) and watch again")

// cooldownService implements cooldownv1connect.CooldownServiceHandler.
type cooldownService struct{ *Server }

func (s cooldownService) Admit(ctx context.Context, req *connect.Request[cooldownv1.AdmitRequest]) (*connect.Response[cooldownv1.AdmitResponse], error) {
	conns, err := admitConns(identity(ctx).Tenant, req.Msg)
	if err != nil {
		return nil, err
	}
	idx, ds, err := s.store.AdmitFirst(ctx, conns)
	if err != nil {
		return nil, s.storeError(ctx, "admit", err)
	}
	for _, d := range ds {
		s.metrics.admit(d)
		s.metrics.transitionsOf(d.Events)
		if d.LeaseExpired {
			s.metrics.expired.Inc()
		}
	}
	return connect.NewResponse(admitProto(idx, ds)), nil
}

func (s cooldownService) Report(ctx context.Context, req *connect.Request[cooldownv1.ReportRequest]) (*connect.Response[cooldownv1.ReportResponse], error) {
	c, rep, err := parseReport(identity(ctx).Tenant, req.Msg)
	if err != nil {
		return nil, err
	}
	resp, err := s.report(ctx, c, rep)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// report applies one parsed report: coalesced when it may be, else at
// once. Report and ReportBatch's reports go through it.
func (s cooldownService) report(ctx context.Context, c store.Conn, rep breaker.Report) (*cooldownv1.ReportResponse, error) {
	if resp, err := s.coalesced(ctx, c, rep); resp != nil || err != nil {
		return resp, err
	}
	res, err := s.store.Report(ctx, c, rep)
	if errors.Is(err, store.ErrReportKeyReused) {
		return nil, errInvalid("idempotency_key", "names a different report already applied: send a new key with each report")
	}
	if err != nil {
		return nil, s.storeError(ctx, "report", err)
	}
	// A resend (its key named a report already applied) is answered as
	// the first report was; it was counted then, in the metrics too.
	if !res.Replayed {
		s.metrics.report(rep.Outcome, res.Accepted)
		s.metrics.transitionsOf(res.Events)
	}
	s.learned(c, rep, res)
	return reportProto(res), nil
}

func (s cooldownService) ExtendLease(ctx context.Context, req *connect.Request[cooldownv1.ExtendLeaseRequest]) (*connect.Response[cooldownv1.ExtendLeaseResponse], error) {
	who := identity(ctx)
	id, label, err := parseConn("connection", req.Msg.GetConnection())
	if err != nil {
		return nil, err
	}
	ttl, err := parseHint("ttl", req.Msg.GetTtl())
	if err != nil {
		return nil, err
	}
	if tok := req.Msg.GetLeaseToken(); tok == "" || len(tok) > MaxLeaseTokenLen {
		return nil, errInvalid("lease_token", "must be the 1 to %d byte token Admit returned", MaxLeaseTokenLen)
	}
	exp, err := s.store.ExtendLease(ctx, store.Conn{Tenant: who.Tenant, ID: id, Label: label}, req.Msg.GetLeaseToken(), time.Duration(ttl)*time.Millisecond)
	if err != nil {
		return nil, s.storeError(ctx, "extend lease", err)
	}
	return connect.NewResponse(&cooldownv1.ExtendLeaseResponse{LeaseExpiresAt: timestamppb.New(exp)}), nil
}

func (s cooldownService) GetConnection(ctx context.Context, req *connect.Request[cooldownv1.GetConnectionRequest]) (*connect.Response[cooldownv1.GetConnectionResponse], error) {
	who := identity(ctx)
	sc, err := readScope(who, "tenant", req.Msg.GetTenant(), false)
	if err != nil {
		return nil, err
	}
	id, err := parseID("id", req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	if req.Msg.GetHistoryLimit() > MaxHistoryLimit {
		return nil, errInvalid("history_limit", "must be at most %d", MaxHistoryLimit)
	}
	// One read serves the history asked for and the explanation's.
	limit := int(req.Msg.GetHistoryLimit())
	snap, hist, err := s.store.Get(ctx, sc.tenant, id, max(limit, explainHistory))
	if err != nil {
		return nil, s.storeError(ctx, "get", err)
	}
	p := s.policyFor(sc.tenant, snap.Label)
	out := &cooldownv1.GetConnectionResponse{
		Connection: stateProto(snap, p, who.AllTenants(), events(hist)),
		Policy:     policyProto(p),
		Found:      snap.Exists,
	}
	for _, t := range hist[:min(limit, len(hist))] {
		out.History = append(out.History, transitionProto(t, snap.Label, p.Shadow))
	}
	return connect.NewResponse(out), nil
}

func (s cooldownService) ListConnections(ctx context.Context, req *connect.Request[cooldownv1.ListConnectionsRequest]) (*connect.Response[cooldownv1.ListConnectionsResponse], error) {
	who := identity(ctx)
	sc, err := readScope(who, "tenant", req.Msg.GetTenant(), true)
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
	from, err := parsePageToken(sc, req.Msg.GetPageToken())
	if err != nil {
		return nil, err
	}
	snaps, next, err := s.listScope(ctx, sc, from, size)
	if err != nil {
		return nil, s.storeError(ctx, "list", err)
	}
	out := &cooldownv1.ListConnectionsResponse{NextPageToken: next.String(sc)}
	x := s.explainer(maxExplainReads)
	for _, sn := range snaps {
		out.Connections = append(out.Connections, x.state(ctx, sn, s.policyFor(sn.Tenant, sn.Label), who.AllTenants()))
	}
	return connect.NewResponse(out), nil
}

// pageToken is where a listing continues: after id in tenant. A
// single-tenant listing's token is the id's hex (as before the operator
// role); an every-tenant listing's is "<tenant>/<id hex>".
type pageToken struct {
	tenant string
	after  string
	set    bool
}

func (p pageToken) String(sc scope) string {
	switch {
	case !p.set:
		return ""
	case sc.all:
		return p.tenant + "/" + p.after
	}
	return p.after
}

func parsePageToken(sc scope, tok string) (pageToken, error) {
	if tok == "" {
		return pageToken{}, nil
	}
	bad := errInvalid("page_token", "is not a token from a previous page of this listing")
	p := pageToken{tenant: sc.tenant, after: tok, set: true}
	if sc.all {
		t, id, ok := strings.Cut(tok, "/")
		if !ok || keys.ValidateTenant(t) != nil {
			return pageToken{}, bad
		}
		p.tenant, p.after = t, id
	}
	if _, err := keys.ParseID(p.after); err != nil {
		return pageToken{}, bad
	}
	return p, nil
}

// listScope returns up to size connections of the scope from the page
// token on, in (tenant, id) order, and the token of the next page (unset
// when the listing is done).
func (s cooldownService) listScope(ctx context.Context, sc scope, from pageToken, size int) ([]store.Snapshot, pageToken, error) {
	tenants := []string{sc.tenant}
	if sc.all {
		all, err := s.store.Tenants(ctx)
		if err != nil {
			return nil, pageToken{}, err
		}
		// Continue with the token's tenant (it may have left the set since).
		i, _ := slices.BinarySearch(all, from.tenant)
		tenants = all[i:]
	}
	var out []store.Snapshot
	for i, t := range tenants {
		after := ""
		if t == from.tenant {
			after = from.after
		}
		snaps, more, err := s.store.List(ctx, t, after, size-len(out))
		if err != nil {
			return nil, pageToken{}, err
		}
		out = append(out, snaps...)
		switch {
		case more:
			// A page of the store may come back short (expired entries
			// pruned), never empty: continue after its last entry.
			return out, pageToken{tenant: t, after: snaps[len(snaps)-1].ID.String(), set: true}, nil
		case len(out) == size && i < len(tenants)-1:
			return out, pageToken{tenant: t, after: out[len(out)-1].ID.String(), set: true}, nil
		}
	}
	return out, pageToken{}, nil
}

func (s cooldownService) WatchConnections(ctx context.Context, req *connect.Request[cooldownv1.WatchConnectionsRequest], stream *connect.ServerStream[cooldownv1.WatchConnectionsResponse]) error {
	who := identity(ctx)
	sc, err := readScope(who, "tenant", req.Msg.GetTenant(), true)
	if err != nil {
		return err
	}
	capKey := sc.tenant
	if sc.all {
		capKey = "*" // not a tenant name: the operators' watches share one cap
	}
	release, err := s.openWatch(capKey)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &watchFeeds{svc: s, ctx: ctx, events: make(chan watchEvent)}
	tenants := []string{sc.tenant}
	if sc.all {
		if tenants, err = s.store.Tenants(ctx); err != nil {
			return s.storeError(ctx, "watch", err)
		}
	}
	// Subscribe before the snapshot so no change falls between the two.
	for _, t := range tenants {
		if err := w.join(t); err != nil {
			return s.storeError(ctx, "watch", err)
		}
	}
	send := func(x *explainer, sn store.Snapshot, snapshot bool) error {
		return stream.Send(&cooldownv1.WatchConnectionsResponse{
			Connection: x.state(ctx, sn, s.policyFor(sn.Tenant, sn.Label), who.AllTenants()), Snapshot: snapshot,
		})
	}
	if req.Msg.GetSnapshot() {
		for _, t := range tenants {
			x := s.explainer(maxExplainReads)
			if err := s.eachConnection(ctx, t, func(sn store.Snapshot) error { return send(x, sn, true) }); err != nil {
				return err
			}
		}
	}
	// The first empty message marks the end of the snapshot (see the
	// proto); it also flushes the response headers, so a client knows the
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
			if sc.all {
				// Tenants that appeared since: join them, then send their
				// connections (as states without a transition), so that
				// nothing of theirs falls between the join and the read.
				fresh, err := w.joinNew()
				if err != nil {
					return s.storeError(ctx, "watch", err)
				}
				for _, t := range fresh {
					x := s.explainer(maxExplainReads)
					if err := s.eachConnection(ctx, t, func(sn store.Snapshot) error { return send(x, sn, false) }); err != nil {
						return err
					}
				}
			}
			// An empty message keeps proxies from idling the stream out.
			if err := stream.Send(&cooldownv1.WatchConnectionsResponse{}); err != nil {
				return err
			}
		case ev := <-w.events:
			if ev.lost {
				return connect.NewError(connect.CodeUnavailable, errWatchLost)
			}
			t := ev.t
			// The event carries the state after the change: no read here.
			snap := t.State
			if snap == nil {
				got, _, err := s.store.Get(ctx, t.Tenant, t.ID, 0)
				if err != nil {
					return s.storeError(ctx, "get", err)
				}
				snap = &got
			}
			if snap.Tenant == "" {
				snap.Tenant = t.Tenant
			}
			p := s.policyFor(snap.Tenant, snap.Label)
			if err := stream.Send(&cooldownv1.WatchConnectionsResponse{
				Connection: s.explainer(0).state(ctx, *snap, p, who.AllTenants()), Transition: transitionProto(t, snap.Label, p.Shadow),
			}); err != nil {
				return err
			}
		}
	}
}

// eachConnection calls f with every connection of a tenant, page by page.
func (s cooldownService) eachConnection(ctx context.Context, tenant string, f func(store.Snapshot) error) error {
	after := ""
	for {
		snaps, more, err := s.store.List(ctx, tenant, after, MaxPageSize)
		if err != nil {
			return s.storeError(ctx, "list", err)
		}
		for _, sn := range snaps {
			if err := f(sn); err != nil {
				return err
			}
		}
		if !more {
			return nil
		}
		after = snaps[len(snaps)-1].ID.String()
	}
}

// watchEvent is one transition of a watched tenant, or (lost) the news
// that a tenant's feed ended and events may have been missed.
type watchEvent struct {
	t    store.Transition
	lost bool
}

// watchFeeds merges the store's per-tenant feeds into one channel for one
// watch stream (one tenant, or every tenant for an operator).
type watchFeeds struct {
	svc    cooldownService
	ctx    context.Context
	events chan watchEvent
	joined map[string]bool
}

func (w *watchFeeds) join(tenant string) error {
	ch, err := w.svc.store.Watch(w.ctx, tenant)
	if err != nil {
		return err
	}
	if w.joined == nil {
		w.joined = map[string]bool{}
	}
	w.joined[tenant] = true
	go func() {
		for {
			var ev watchEvent
			select {
			case <-w.ctx.Done():
				return
			case t, ok := <-ch:
				ev = watchEvent{t: t, lost: !ok}
			}
			select {
			case <-w.ctx.Done():
				return
			case w.events <- ev:
			}
			if ev.lost {
				return
			}
		}
	}()
	return nil
}

// joinNew joins the tenants that appeared since the last look and returns
// them.
func (w *watchFeeds) joinNew() ([]string, error) {
	all, err := w.svc.store.Tenants(w.ctx)
	if err != nil {
		return nil, err
	}
	var fresh []string
	for _, t := range all {
		if w.joined[t] {
			continue
		}
		if err := w.join(t); err != nil {
			return nil, err
		}
		fresh = append(fresh, t)
	}
	return fresh, nil
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
