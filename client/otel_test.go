package client

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// recTP is a TracerProvider that records every span in memory, on the
// OpenTelemetry API alone (the client module requires no SDK).
type recTP struct {
	embedded.TracerProvider
	next  atomic.Uint64
	mu    sync.Mutex
	spans []*recSpan
}

func (p *recTP) Tracer(string, ...trace.TracerOption) trace.Tracer { return recTracer{p: p} }

// named returns the spans called name, in the order they started.
func (p *recTP) named(name string) []*recSpan {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*recSpan
	for _, s := range p.spans {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
}

type recTracer struct {
	embedded.Tracer
	p *recTP
}

func (t recTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	tid := parent.TraceID()
	if !parent.IsValid() {
		tid = trace.TraceID{1}
	}
	var sid trace.SpanID
	binary.BigEndian.PutUint64(sid[:], t.p.next.Add(1))
	s := &recSpan{name: name, parent: parent.SpanID(), kind: cfg.SpanKind(), attrs: cfg.Attributes(), tp: t.p,
		sc: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})}
	t.p.mu.Lock()
	t.p.spans = append(t.p.spans, s)
	t.p.mu.Unlock()
	return trace.ContextWithSpan(ctx, s), s
}

type recEvent struct {
	name  string
	attrs []attribute.KeyValue
}

type recSpan struct {
	embedded.Span
	name   string
	parent trace.SpanID
	sc     trace.SpanContext
	kind   trace.SpanKind
	tp     *recTP

	mu     sync.Mutex
	attrs  []attribute.KeyValue
	events []recEvent
	status codes.Code
	ended  bool
}

func (s *recSpan) End(...trace.SpanEndOption) { s.mu.Lock(); s.ended = true; s.mu.Unlock() }
func (s *recSpan) AddEvent(name string, opts ...trace.EventOption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, recEvent{name: name, attrs: eventAttrs(opts)})
}
func (s *recSpan) AddLink(trace.Link)                      {}
func (s *recSpan) IsRecording() bool                       { return true }
func (s *recSpan) RecordError(error, ...trace.EventOption) {}
func (s *recSpan) SpanContext() trace.SpanContext          { return s.sc }
func (s *recSpan) SetStatus(c codes.Code, _ string)        { s.mu.Lock(); s.status = c; s.mu.Unlock() }
func (s *recSpan) SetName(n string)                        { s.mu.Lock(); s.name = n; s.mu.Unlock() }
func (s *recSpan) TracerProvider() trace.TracerProvider    { return s.tp }
func (s *recSpan) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	s.attrs = append(s.attrs, kv...)
	s.mu.Unlock()
}
func (s *recSpan) attr(k attribute.Key) (v attribute.Value) { return lastAttr(s.attrs, k) }

func eventAttrs(opts []trace.EventOption) []attribute.KeyValue {
	cfg := trace.NewEventConfig(opts...)
	return cfg.Attributes()
}

func lastAttr(kvs []attribute.KeyValue, k attribute.Key) (v attribute.Value) {
	for _, kv := range kvs {
		if kv.Key == k {
			v = kv.Value
		}
	}
	return v
}

// TestGuardSpans: a guarded call is one span with a child span for each
// Admit, attempt and Report, and each wait is an event of the guard's span
// with its duration and cause; the guard's span ends with the outcome.
func TestGuardSpans(t *testing.T) {
	t.Parallel()
	deny := func(_ *cooldownv1.AdmitRequest, r *cooldownv1.AdmitResponse) {
		r.Decision, r.DenyReason, r.RetryAfter = cooldownv1.Decision_DECISION_DENY, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, durationpb.New(2*time.Second)
	}
	tests := []struct {
		name    string
		replies []reply
		denies  int // Admits denied (cooldown, 2 s) before the rest are answered
		opts    []Option
		// want
		admits, attempts int
		cause            string // the wait event's cause; "" none
		minWait          time.Duration
		outcome          string
		reason           string
		status           codes.Code
	}{
		{name: "healthy", replies: []reply{{status: 200}}, admits: 1, attempts: 1, outcome: "success"},
		{name: "retry after a 500 waits the backoff", replies: []reply{{status: 500}, {status: 200}},
			opts: []Option{WithBackoff(time.Second, time.Second)}, admits: 2, attempts: 2,
			cause: "retry:transient_failure", minWait: 500 * time.Millisecond, outcome: "success"},
		{name: "a cooldown is waited for", replies: []reply{{status: 200}}, denies: 1, admits: 2, attempts: 1,
			cause: "denied:cooldown", minWait: 2 * time.Second, outcome: "success"},
		{name: "a cooldown not waited for ends denied", replies: []reply{{status: 200}}, denies: 1, opts: []Option{WithNoWait()},
			admits: 1, outcome: "denied", reason: "cooldown", status: codes.Error},
		{name: "a 400 is the call's failure", replies: []reply{{status: 400}}, admits: 1, attempts: 1,
			outcome: "client_error", status: codes.Error},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeService(noTripPolicy())
				var n atomic.Int32
				f.answerAdmit(func(req *cooldownv1.AdmitRequest, r *cooldownv1.AdmitResponse) {
					if int(n.Add(1)) <= tt.denies {
						deny(req, r)
					}
				})
				tp := &recTP{}
				c, err := f.client(append([]Option{WithTracerProvider(tp)}, tt.opts...)...)
				require.NoError(t, err)
				call, _ := scripted(tt.replies...)
				_, _ = c.Do(t.Context(), NewConn(ID{7}, "test"), call)

				guards := tp.named("cooldownd.guard")
				require.Len(t, guards, 1)
				g := guards[0]
				assert.True(t, g.ended)
				assert.Equal(t, "do", g.attr(attrGuard).AsString())
				assert.Equal(t, tt.outcome, g.attr(attrOutcome).AsString())
				assert.Equal(t, tt.reason, g.attr(attrReason).AsString())
				assert.Equal(t, tt.status, g.status)
				admits, attempts, reports := tp.named("cooldownd.Admit"), tp.named("cooldownd.attempt"), tp.named("cooldownd.Report")
				assert.Len(t, admits, tt.admits)
				assert.Len(t, attempts, tt.attempts)
				assert.Len(t, reports, tt.attempts, "one Report per attempt")
				for _, s := range append(append(admits, attempts...), reports...) {
					assert.Equal(t, g.sc.SpanID(), s.parent, "%s under the guard", s.name)
					assert.True(t, s.ended, "%s ended", s.name)
				}
				for i, s := range attempts {
					assert.Equal(t, int64(i+1), s.attr(attrAttempt).AsInt64())
				}
				if tt.denies > 0 {
					assert.Equal(t, "deny", admits[0].attr(attrDecision).AsString())
					assert.Equal(t, "cooldown", admits[0].attr(attrReason).AsString())
					assert.Equal(t, int64(2000), admits[0].attr(attrRetryAf).AsInt64())
				}
				if tt.cause == "" {
					assert.Empty(t, g.events)
					return
				}
				require.Len(t, g.events, 1)
				ev := g.events[0]
				assert.Equal(t, "cooldownd.wait", ev.name)
				assert.Equal(t, tt.cause, lastAttr(ev.attrs, attrCause).AsString())
				assert.GreaterOrEqual(t, lastAttr(ev.attrs, attrWaitMs).AsInt64(), tt.minWait.Milliseconds())
			})
		})
	}
}

// TestAdmitSpanSaysWhoDecided: an Admit decided in-process (cooldownd
// down) or from the mirror says so on its span.
func TestAdmitSpanSaysWhoDecided(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeService(noTripPolicy())
		f.down.Store(true)
		tp := &recTP{}
		c, err := f.client(WithTracerProvider(tp))
		require.NoError(t, err)
		a, err := c.Admit(t.Context(), NewConn(ID{7}, "test"))
		require.NoError(t, err)
		require.True(t, a.Local)
		spans := tp.named("cooldownd.Admit")
		require.Len(t, spans, 1)
		assert.True(t, spans[0].attr(attrLocal).AsBool())
		assert.False(t, spans[0].attr(attrMirrored).AsBool())
		assert.Equal(t, trace.SpanKindClient, spans[0].kind)
	})
	tp := &recTP{}
	_, span := recTracer{p: tp}.Start(t.Context(), "cooldownd.Admit")
	endAdmit(span, Admission{Conn: NewConn(ID{7}, "test"), Decision: DecisionAllow, Mirrored: true}, nil)
	s := tp.named("cooldownd.Admit")[0]
	assert.True(t, s.attr(attrMirrored).AsBool())
	assert.False(t, s.attr(attrLocal).AsBool())
	assert.Equal(t, ID{7}.Short(), s.attr(attrConn).AsString())
}

// TestNoTracerNoSpans: without WithTracerProvider and with OpenTelemetry's
// global provider unset, the client traces nothing.
func TestNoTracerNoSpans(t *testing.T) {
	t.Parallel()
	c, err := newFakeService(noTripPolicy()).client()
	require.NoError(t, err)
	assert.Nil(t, c.tracer())
	ctx, span := c.startGuard(t.Context(), "do", nil)
	assert.Nil(t, span)
	assert.Equal(t, t.Context(), ctx)
}
