package server

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
)

// errWatchLost ends a watch stream whose events may have gaps: the shared
// Redis subscription broke (or was re-established after a drop), or the
// stream fell too far behind. Clients reconnect with snapshot=true.
var errWatchLost = errors.New("watch interrupted, events may have been missed: re-read the state (snapshot) and watch again")

// adminService implements cooldownv1connect.AdminServiceHandler.
type adminService struct{ *Server }

func (s adminService) ResetConnection(ctx context.Context, req *connect.Request[cooldownv1.ResetConnectionRequest]) (*connect.Response[cooldownv1.ResetConnectionResponse], error) {
	who, err := s.authorize(ctx, req.Header(), RoleAdmin)
	if err != nil {
		return nil, err
	}
	id, err := parseID("id", req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	if err := checkText("reason", req.Msg.GetReason(), MaxReasonLen); err != nil {
		return nil, err
	}
	snap, err := s.store.Reset(ctx, who.Tenant, id, who.Name, req.Msg.GetReason())
	if err != nil {
		return nil, s.storeError(ctx, "reset", err)
	}
	s.metrics.transitionsOf(snap.Events)
	s.log.InfoContext(ctx, "connection reset", "tenant", who.Tenant, "id", id.Short(), "actor", who.Name)
	return connect.NewResponse(&cooldownv1.ResetConnectionResponse{Connection: stateProto(snap)}), nil
}

func (s adminService) ForceConnection(ctx context.Context, req *connect.Request[cooldownv1.ForceConnectionRequest]) (*connect.Response[cooldownv1.ForceConnectionResponse], error) {
	who, err := s.authorize(ctx, req.Header(), RoleAdmin)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	id, err := parseID("id", m.GetId())
	if err != nil {
		return nil, err
	}
	// Check the wire value before narrowing it to breaker.Override (a
	// uint8): 258 would otherwise become FORCED_CLOSED.
	wo := m.GetOverride()
	if wo < 0 || wo > cooldownv1.Override_OVERRIDE_FORCED_CLOSED {
		return nil, errInvalid("override", "must be one of the defined overrides, got %d", wo)
	}
	o := breaker.Override(wo)
	if err := checkText("reason", m.GetReason(), MaxReasonLen); err != nil {
		return nil, err
	}
	var d time.Duration
	if pd := m.GetDuration(); pd != nil {
		if err := pd.CheckValid(); err != nil || pd.AsDuration() < 0 || pd.AsDuration() > 30*24*time.Hour {
			return nil, errInvalid("duration", "must be between 0 and 720h")
		}
		d = pd.AsDuration()
		if d > 0 && d < time.Millisecond {
			// The store counts whole milliseconds, where 0 means "until
			// changed": a sub-millisecond override must not become permanent.
			d = time.Millisecond
		}
	}
	snap, err := s.store.Force(ctx, who.Tenant, id, o, d, who.Name, m.GetReason())
	if err != nil {
		return nil, s.storeError(ctx, "force", err)
	}
	s.metrics.transitionsOf(snap.Events)
	s.log.InfoContext(ctx, "connection override", "tenant", who.Tenant, "id", id.Short(), "override", m.GetOverride().String(), "actor", who.Name)
	return connect.NewResponse(&cooldownv1.ForceConnectionResponse{Connection: stateProto(snap)}), nil
}
