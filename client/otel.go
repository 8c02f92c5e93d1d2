package client

import (
	"context"
	"reflect"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of the client's spans.
const TracerName = "github.com/cooldownd/cooldownd/client"

// WithTracerProvider makes the client trace its guarded calls with tp
// (docs/observability.md): one span per [Client.Do], [Client.DoFallback]
// and [Client.RoundTripper] call, with a child span for each Admit, each
// provider attempt and each Report, and the waits as events. Without it
// the client traces with OpenTelemetry's global TracerProvider once the
// application has set one ([otel.SetTracerProvider]); until then it makes
// no span and costs nothing. The trace context of every call to cooldownd
// is sent as a W3C traceparent, so cooldownd's spans join the trace.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp == nil {
			c.tracing = nil
			return
		}
		c.tracing = &tracing{tr: tp.Tracer(TracerName)}
	})
}

// tracing is the tracer of [WithTracerProvider].
type tracing struct{ tr trace.Tracer }

// The client's span attributes (docs/observability.md). The server's
// spans use the same names for the same things.
const (
	attrGuard     = attribute.Key("cooldownd.guard") // do, fallback or round_tripper
	attrCands     = attribute.Key("cooldownd.candidates")
	attrConn      = attribute.Key("cooldownd.conn.id") // the short id: a keyed hash, never the credential
	attrIndex     = attribute.Key("cooldownd.candidate.index")
	attrDecision  = attribute.Key("cooldownd.decision")
	attrReason    = attribute.Key("cooldownd.deny_reason")
	attrRetryAf   = attribute.Key("cooldownd.retry_after_ms")
	attrRevision  = attribute.Key("cooldownd.revision")
	attrRetry     = attribute.Key("cooldownd.retry")
	attrShadowed  = attribute.Key("cooldownd.shadow.deny_reason")
	attrLocal     = attribute.Key("cooldownd.local")
	attrMirrored  = attribute.Key("cooldownd.mirrored")
	attrProbe     = attribute.Key("cooldownd.probe")
	attrAttempt   = attribute.Key("cooldownd.attempt")
	attrAttempts  = attribute.Key("cooldownd.attempts")
	attrOutcome   = attribute.Key("cooldownd.outcome")
	attrErrorCode = attribute.Key("cooldownd.error_code")
	attrStatus    = attribute.Key("http.response.status_code")
	attrOpen      = attribute.Key("cooldownd.open")
	attrWaitMs    = attribute.Key("cooldownd.wait_ms")
	attrCause     = attribute.Key("cooldownd.cause")
)

// globalDefault is OpenTelemetry's global TracerProvider before the
// application sets one: a client that sees it traces nothing.
var globalDefault = otel.GetTracerProvider()

type globalTracer struct {
	tp trace.TracerProvider
	tr trace.Tracer
}

var globalCache atomic.Pointer[globalTracer]

// tracer returns the tracer of the client's spans, nil when it traces
// nothing.
func (c *Client) tracer() trace.Tracer {
	if t := c.cfg.tracing; t != nil {
		return t.tr
	}
	tp := otel.GetTracerProvider()
	if tp == globalDefault {
		return nil
	}
	if !reflect.TypeOf(tp).Comparable() {
		return tp.Tracer(TracerName)
	}
	if g := globalCache.Load(); g != nil && g.tp == tp {
		return g.tr
	}
	g := &globalTracer{tp: tp, tr: tp.Tracer(TracerName)}
	globalCache.Store(g)
	return g.tr
}

// startGuard starts a guarded call's span; nil when not tracing.
func (c *Client) startGuard(ctx context.Context, kind string, cands []Conn) (context.Context, trace.Span) {
	tr := c.tracer()
	if tr == nil {
		return ctx, nil
	}
	ctx, span := tr.Start(ctx, "cooldownd.guard", trace.WithAttributes(attrGuard.String(kind), attrCands.Int(len(cands))))
	return ctx, span
}

// endGuard ends a guarded call's span with its outcome.
func endGuard(span trace.Span, err error) {
	if span == nil {
		return
	}
	if span.IsRecording() {
		var (
			de *DeniedError
			ge *Error
		)
		switch {
		case err == nil:
			span.SetAttributes(attrOutcome.String(OutcomeSuccess.String()))
		case asErr(err, &de):
			span.SetAttributes(attrOutcome.String("denied"), attrReason.String(de.Reason.String()), attrConn.String(de.Conn.id.Short()),
				attrAttempts.Int(de.Attempts), attrLocal.Bool(de.Local))
			span.SetStatus(codes.Error, "denied: "+de.Reason.String())
		case asErr(err, &ge):
			span.SetAttributes(attrOutcome.String(ge.LastOutcome.String()), attrConn.String(ge.Conn.id.Short()), attrAttempts.Int(ge.Attempts))
			if ge.ErrorCode != "" {
				span.SetAttributes(attrErrorCode.String(ge.ErrorCode))
			}
			span.SetStatus(codes.Error, ge.LastOutcome.String())
		default:
			span.SetStatus(codes.Error, "invalid call")
		}
	}
	span.End()
}

// asErr is errors.As for the guard's own errors, which it returns
// unwrapped.
func asErr[T any](err error, target *T) bool {
	t, ok := err.(T)
	if ok {
		*target = t
	}
	return ok
}

// traceWait records a wait of the guard as an event of its span: for a
// denied connection (cause "denied:<reason>") or before a retry (cause
// "retry:<outcome>").
func traceWait(ctx context.Context, d time.Duration, cause string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent("cooldownd.wait", trace.WithAttributes(attrWaitMs.Int64(d.Milliseconds()), attrCause.String(cause)))
}

// startAttempt starts the span of one provider attempt; nil when not
// tracing. The chosen candidate goes on the guard's span too.
func (c *Client) startAttempt(ctx context.Context, adm Admission, n int) (context.Context, trace.Span) {
	tr := c.tracer()
	if tr == nil {
		return ctx, nil
	}
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, nil
	}
	parent.SetAttributes(attrIndex.Int(adm.Index), attrConn.String(adm.Conn.id.Short()))
	return tr.Start(ctx, "cooldownd.attempt", trace.WithAttributes(
		attrAttempt.Int(n), attrIndex.Int(adm.Index), attrConn.String(adm.Conn.id.Short()),
		attrProbe.Bool(adm.Decision == DecisionAllowProbe)))
}

// endAttempt ends an attempt's span with its classification.
func endAttempt(span trace.Span, cl Classification) {
	if span == nil {
		return
	}
	span.SetAttributes(attrOutcome.String(cl.Outcome.String()))
	if cl.HTTPStatus != 0 {
		span.SetAttributes(attrStatus.Int(cl.HTTPStatus))
	}
	if cl.ErrorCode != "" {
		span.SetAttributes(attrErrorCode.String(cl.ErrorCode))
	}
	if cl.Outcome != OutcomeSuccess {
		span.SetStatus(codes.Error, cl.Outcome.String())
	}
	span.End()
}

// startAdmit starts an Admit's client span; nil when not tracing.
func (c *Client) startAdmit(ctx context.Context, at Attempt) (context.Context, trace.Span) {
	tr := c.tracer()
	if tr == nil {
		return ctx, nil
	}
	return tr.Start(ctx, "cooldownd.Admit", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrCands.Int(len(at.Candidates))))
}

// endAdmit ends an Admit's span with its answer: the decision, the
// candidate, and whether the mirror or the in-process breaker decided.
func endAdmit(span trace.Span, a Admission, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		span.End()
		return
	}
	span.SetAttributes(attrDecision.String(a.Decision.String()), attrIndex.Int(a.Index), attrConn.String(a.Conn.id.Short()),
		attrRevision.Int64(int64(a.Revision)), attrRetry.Bool(a.Retry), attrLocal.Bool(a.Local), attrMirrored.Bool(a.Mirrored))
	if a.Decision == DecisionDeny {
		span.SetAttributes(attrReason.String(a.Reason.String()), attrRetryAf.Int64(a.RetryAfter.Milliseconds()))
	}
	if a.Shadowed != ReasonNone {
		span.SetAttributes(attrShadowed.String(a.Shadowed.String()))
	}
	span.End()
}

// startReport starts a Report's client span; nil when not tracing.
func (c *Client) startReport(ctx context.Context, a Admission, cl Classification) (context.Context, trace.Span) {
	tr := c.tracer()
	if tr == nil {
		return ctx, nil
	}
	return tr.Start(ctx, "cooldownd.Report", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attrOutcome.String(cl.Outcome.String()), attrConn.String(a.Conn.id.Short()), attrRevision.Int64(int64(a.Revision)),
		attrRetry.Bool(a.Retry), attrLocal.Bool(a.Local), attrMirrored.Bool(a.Mirrored)))
}

// endReport ends a Report's span: whether the connection is open after it.
func endReport(span trace.Span, open bool, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attrOpen.Bool(open))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// traceContext is the Connect interceptor that sends the context's trace
// as a W3C traceparent (and tracestate) with every unary call to
// cooldownd. Without a span in the context it sends nothing.
type traceContext struct{}

func (traceContext) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if trace.SpanContextFromContext(ctx).IsValid() {
			propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header()))
		}
		return next(ctx, req)
	}
}

func (traceContext) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if trace.SpanContextFromContext(ctx).IsValid() {
			propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(conn.RequestHeader()))
		}
		return conn
	}
}

func (traceContext) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
