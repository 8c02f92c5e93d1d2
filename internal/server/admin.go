package server

import (
	"context"
	"log/slog"
	"time"

	"connectrpc.com/connect"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/store"
)

// adminService implements cooldownv1connect.AdminServiceHandler.
type adminService struct{ *Server }

func (s adminService) ResetConnection(ctx context.Context, req *connect.Request[cooldownv1.ResetConnectionRequest]) (*connect.Response[cooldownv1.ResetConnectionResponse], error) {
	who := identity(ctx)
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
	s.audit(ctx, "connection reset", who, id, snap, slog.String("reason", req.Msg.GetReason()))
	return connect.NewResponse(&cooldownv1.ResetConnectionResponse{Connection: stateProto(snap, s.policyFor(snap.Tenant, snap.Label), false, nil)}), nil
}

func (s adminService) ForceConnection(ctx context.Context, req *connect.Request[cooldownv1.ForceConnectionRequest]) (*connect.Response[cooldownv1.ForceConnectionResponse], error) {
	who := identity(ctx)
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
		if err := pd.CheckValid(); err != nil || pd.AsDuration() < 0 || pd.AsDuration() > MaxOverride {
			return nil, errInvalid("duration", "must be between 0 and %s", human(MaxOverride))
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
	action := "connection override cleared"
	if o != breaker.NoOverride {
		action = "connection override set"
	}
	until := "until changed"
	if d > 0 {
		until = human(d)
	}
	if o == breaker.NoOverride {
		until = ""
	}
	s.audit(ctx, action, who, id, snap, slog.String("override", o.String()), slog.String("duration", until), slog.String("reason", m.GetReason()))
	// The override is this call's: its operator and reason need no read.
	forced := []breaker.Event{{Cause: breaker.CauseForced, Revision: snap.State.Revision, Actor: who.Name, Reason: m.GetReason()}}
	return connect.NewResponse(&cooldownv1.ForceConnectionResponse{Connection: stateProto(snap, s.policyFor(snap.Tenant, snap.Label), false, forced)}), nil
}

// audit logs one override: what, who, on which connection (its short id,
// the form the dashboard and cooldownctl print), why and for how long.
// Audit lines are at info level whatever --log-level says about access
// lines, and carry "audit"=true so they can be routed.
func (s *Server) audit(ctx context.Context, msg string, who Identity, id keys.ID, snap store.Snapshot, attrs ...slog.Attr) {
	base := []slog.Attr{slog.Bool("audit", true), slog.String("tenant", snap.Tenant), slog.String("id", ShortID(id)),
		slog.String("label", snap.Label), slog.String("actor", who.Name), slog.String("role", who.Role.String())}
	s.log.LogAttrs(ctx, slog.LevelInfo, msg, append(append(base, attrs...), slog.Uint64("revision", snap.State.Revision))...)
}
