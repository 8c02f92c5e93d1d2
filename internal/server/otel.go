package server

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
)

// The attributes cooldownd puts on an RPC's server span
// (docs/observability.md). Names are the Go client's, so one query finds
// both sides of a call.
const (
	attrTenant   = attribute.Key("cooldownd.tenant")
	attrConn     = attribute.Key("cooldownd.conn.id") // the short id: a keyed hash, never the credential
	attrDecision = attribute.Key("cooldownd.decision")
	attrReason   = attribute.Key("cooldownd.deny_reason")
	attrState    = attribute.Key("cooldownd.state")
	attrIndex    = attribute.Key("cooldownd.candidate.index")
	attrCands    = attribute.Key("cooldownd.candidates")
	// attrCandReasons: per examined candidate, its deny reason ("none":
	// admitted).
	attrCandReasons = attribute.Key("cooldownd.candidates.deny_reasons")
	attrRetry       = attribute.Key("cooldownd.retry")
	attrShadow      = attribute.Key("cooldownd.shadow")
	attrShadowed    = attribute.Key("cooldownd.shadow.deny_reason")
	attrRevision    = attribute.Key("cooldownd.revision")
	attrOutcome     = attribute.Key("cooldownd.outcome")
	attrAccepted    = attribute.Key("cooldownd.accepted")
	attrChanged     = attribute.Key("cooldownd.changed")
	attrRetryAfMs   = attribute.Key("cooldownd.retry_after_ms")
)

// traceInterceptors are the interceptors of a server with a TracerProvider:
// otelconnect's, outermost, which continues the caller's W3C traceparent
// (the caller's span is the parent: cooldownd's clients are its own) and
// makes the RPC's server span; and the one that writes what decided the
// call onto that span, innermost (after authentication, so it knows the
// tenant). Without a TracerProvider both are nil: no cost.
func (s *Server) traceInterceptors() (outer, inner connect.Interceptor, err error) {
	if s.tp == nil {
		return nil, nil, nil
	}
	o, err := otelconnect.NewInterceptor(
		otelconnect.WithTracerProvider(s.tp),
		otelconnect.WithPropagator(propagation.TraceContext{}),
		otelconnect.WithTrustRemote(),
		// Prometheus stays cooldownd's metrics (docs/observability.md):
		// otelconnect measures into a no-op meter.
		otelconnect.WithMeterProvider(noop.NewMeterProvider()),
		// Watch streams live for hours: one span each would never end
		// in a useful time.
		otelconnect.WithFilter(func(_ context.Context, spec connect.Spec) bool {
			return spec.StreamType == connect.StreamTypeUnary
		}),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("server: tracing: %w", err)
	}
	return o, spanAttrs{}, nil
}

// spanAttrs writes the tenant, the connection and the decision of a unary
// RPC on its span, when the span records.
type spanAttrs struct{}

func (spanAttrs) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		span := trace.SpanFromContext(ctx)
		if !span.IsRecording() {
			return res, err
		}
		var msg any
		if res != nil {
			msg = res.Any()
		}
		span.SetAttributes(rpcAttrs(identity(ctx).Tenant, req.Any(), msg)...)
		return res, err
	}
}

func (spanAttrs) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (spanAttrs) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// rpcAttrs are the span attributes of one RPC: its tenant, the connection
// it names (short id), and for Admit and Report what cooldownd answered.
// Nothing else of the request: no label (it may name a customer), no lease
// token, no idempotency key.
func rpcAttrs(tenant string, req, res any) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 12)
	if r, ok := req.(interface{ GetTenant() string }); ok && r.GetTenant() != "" {
		tenant = r.GetTenant()
	}
	if tenant != "" {
		attrs = append(attrs, attrTenant.String(tenant))
	}
	switch r := req.(type) {
	case *cooldownv1.AdmitRequest:
		attrs = append(attrs, attrCands.Int(len(r.GetCandidates())))
		if m, ok := res.(*cooldownv1.AdmitResponse); ok {
			i := int(m.GetCandidateIndex())
			if i < len(r.GetCandidates()) {
				if id, err := keys.IDFromBytes(r.GetCandidates()[i].GetId()); err == nil {
					attrs = append(attrs, attrConn.String(ShortID(id)))
				}
			}
			attrs = append(attrs, attrDecision.String(breaker.Decision(m.GetDecision()).String()),
				attrIndex.Int(i), attrRetry.Bool(i < len(r.GetRetry()) && r.GetRetry()[i]),
				attrState.String(breaker.Phase(m.GetState()).String()), attrRevision.Int64(int64(m.GetRevision())))
			if m.GetDecision() == cooldownv1.Decision_DECISION_DENY {
				attrs = append(attrs, attrReason.String(breaker.DenyReason(m.GetDenyReason()).String()),
					attrRetryAfMs.Int64(m.GetRetryAfter().AsDuration().Milliseconds()))
			}
			if cs := m.GetCandidates(); len(cs) > 1 {
				// Each examined candidate's answer: why the ones before the
				// chosen fallback were passed over.
				reasons := make([]string, len(cs))
				for j, c := range cs {
					reasons[j] = breaker.DenyReason(c.GetDenyReason()).String()
				}
				attrs = append(attrs, attrCandReasons.StringSlice(reasons))
			}
			if m.GetShadowDenyReason() != cooldownv1.DenyReason_DENY_REASON_UNSPECIFIED {
				attrs = append(attrs, attrShadow.Bool(true), attrShadowed.String(breaker.DenyReason(m.GetShadowDenyReason()).String()))
			}
		}
		return attrs
	case *cooldownv1.ReportRequest:
		attrs = append(attrs, attrOutcome.String(breaker.Outcome(r.GetOutcome()).String()), attrRetry.Bool(r.GetRetry()))
		if m, ok := res.(*cooldownv1.ReportResponse); ok {
			attrs = append(attrs, attrState.String(breaker.Phase(m.GetState()).String()), attrRevision.Int64(int64(m.GetRevision())),
				attrAccepted.Bool(m.GetAccepted()), attrChanged.Bool(m.GetChanged()), attrShadow.Bool(m.GetShadow()))
		}
	}
	if id, ok := requestID(req); ok {
		attrs = append(attrs, attrConn.String(ShortID(id)))
	}
	return attrs
}

// observe records v in h with the trace id of ctx's span as its exemplar
// when that span is sampled (OpenMetrics scrapes carry it; the Prometheus
// text format leaves it out), else as before.
func observe(ctx context.Context, h prometheus.Observer, v float64) {
	sc := trace.SpanContextFromContext(ctx)
	if eo, ok := h.(prometheus.ExemplarObserver); ok && sc.IsSampled() {
		eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
		return
	}
	h.Observe(v)
}
