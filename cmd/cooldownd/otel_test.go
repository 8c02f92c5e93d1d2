package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/cooldownd/cooldownd/client"
	"github.com/cooldownd/cooldownd/internal/redistest"
)

// otlpSpan is one exported span as the receiver decoded it, with its
// service.
type otlpSpan struct {
	service string
	*tracepb.Span
}

func (s otlpSpan) attr(k string) *commonpb.AnyValue {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == k {
			return kv.GetValue()
		}
	}
	return nil
}

// otlpReceiver is an OTLP/HTTP traces endpoint on loopback that decodes
// the real ExportTraceServiceRequest protobuf.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []otlpSpan
	bad   []string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		b, err := io.ReadAll(body)
		var msg coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &msg)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
			r.bad = append(r.bad, req.URL.Path+" "+req.Header.Get("Content-Type"))
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		for _, rs := range msg.GetResourceSpans() {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					r.spans = append(r.spans, otlpSpan{service: service, Span: sp})
				}
			}
		}
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) all() ([]otlpSpan, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]otlpSpan(nil), r.spans...), append([]string(nil), r.bad...)
}

// TestTraceFollowsAFallbackToRedis: an application's span, around a
// guarded DoFallback whose primary is in a shared cooldown, exports over
// OTLP/HTTP (decoded here as the protobuf a collector gets) one tree from
// the application through the guard, the client's Admit, cooldownd's Admit
// and its Redis script; the reason is on the server's Admit span, the
// chosen fallback on the guard's; cooldownd's JSON access log line of that
// Admit carries the trace id; and no attribute holds the API key.
func TestTraceFollowsAFallbackToRedis(t *testing.T) {
	t.Parallel()
	const apiKey = "sk-CANARYotel0123456789abcdefDEADBEEF"
	recv := newOTLPReceiver(t)
	rds := redistest.StartServer(t)
	in := start(t, "--addr", "127.0.0.1:0", "--redis-url", "redis://"+rds.Addr+"/0", "--otlp-endpoint", recv.URL,
		"--otel-traces-sampler", "parentbased_always_on", "--log-format", "json", "--log-level", "debug")

	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(provider.Close)

	ctx := t.Context()
	// The primary's shared cooldown, set by a client that does not trace.
	// A generous admit timeout: under load a 250 ms Admit would be decided
	// in-process, and neither the cooldown nor the trace would reach
	// cooldownd.
	setup, err := client.New(in.url(), client.WithAdmitTimeout(10*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = setup.Close() })
	primary, err := setup.Connection("openai", provider.URL, apiKey, "gpt-4o", "")
	require.NoError(t, err)
	fallback, err := setup.Connection("anthropic", provider.URL, apiKey, "claude", "")
	require.NoError(t, err)
	adm, err := setup.Admit(ctx, primary)
	require.NoError(t, err)
	require.False(t, adm.Local, "cooldownd decided")
	require.NoError(t, setup.Report(ctx, adm, client.Classification{Outcome: client.OutcomeRateLimited, HTTPStatus: 429, RetryAfter: time.Minute}))

	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(recv.URL+"/v1/traces"))
	require.NoError(t, err)
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "app")))
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	// Without the mirror: the fallback's success is then reported at once,
	// under the guard's span. With it (the default, decision 0056) the
	// success waits for a batch outside the trace once the watch stream is
	// accepted, which raced the call: no cooldownd Report span, 8 runs in
	// 10 on a quiet machine.
	c, err := client.New(in.url(), client.WithTracerProvider(tp), client.WithAdmitTimeout(10*time.Second), client.WithoutMirror())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	actx, app := tp.Tracer("app").Start(ctx, "app.handle")
	var calledWith string
	resp, err := c.DoFallback(actx, []client.Conn{primary, fallback}, func(ctx context.Context, conn client.Conn) (*http.Response, error) {
		calledWith = conn.ID().String()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, provider.URL, strings.NewReader(`{}`))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+apiKey)
		return http.DefaultClient.Do(req)
	})
	require.NoError(t, err)
	_ = resp.Body.Close()
	app.End()
	require.Equal(t, fallback.ID().String(), calledWith, "the primary is in cooldown: the fallback is called")
	traceID := app.SpanContext().TraceID()

	// The RPC latency histogram's exemplar carries the trace id, in the
	// OpenMetrics format only.
	scrape := func(accept string) string {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.url()+"/metrics", nil)
		require.NoError(t, err)
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	exemplar := `trace_id="` + traceID.String() + `"`
	assert.Regexp(t, `cooldownd_rpc_duration_seconds_bucket\{code="ok",procedure="/cooldown.v1.CooldownService/Admit",le="[^"]+"\} \d+ # \{`+exemplar,
		scrape("application/openmetrics-text; version=1.0.0"))
	assert.NotContains(t, scrape("text/plain"), exemplar, "the Prometheus text format is as before")

	require.NoError(t, tp.Shutdown(ctx)) // the application's spans are sent
	require.NoError(t, in.stop(t))       // cooldownd flushes its spans at exit
	spans, bad := recv.all()
	require.Empty(t, bad, "every export is OTLP/HTTP protobuf at /v1/traces")

	var inTrace []otlpSpan
	for _, s := range spans {
		if len(s.GetTraceId()) == 16 && trace.TraceID(s.GetTraceId()) == traceID {
			inTrace = append(inTrace, s)
		}
	}
	byName := func(service, name string) []otlpSpan {
		var out []otlpSpan
		for _, s := range inTrace {
			if s.service == service && s.GetName() == name {
				out = append(out, s)
			}
		}
		return out
	}
	one := func(service, name string) otlpSpan {
		t.Helper()
		got := byName(service, name)
		require.Len(t, got, 1, "one %s span %q in the trace; spans: %v", service, name, names(inTrace))
		return got[0]
	}
	appSpan := one("app", "app.handle")
	guard := one("app", "cooldownd.guard")
	admit := one("app", "cooldownd.Admit")
	attempt := one("app", "cooldownd.attempt")
	report := one("app", "cooldownd.Report")
	srvAdmit := one("cooldownd", "cooldown.v1.CooldownService/Admit")
	srvReport := one("cooldownd", "cooldown.v1.CooldownService/Report")

	// The tree.
	assert.Equal(t, appSpan.GetSpanId(), guard.GetParentSpanId(), "guard under the app's span")
	for _, s := range []otlpSpan{admit, attempt, report} {
		assert.Equal(t, guard.GetSpanId(), s.GetParentSpanId(), "%s under the guard", s.GetName())
	}
	assert.Equal(t, admit.GetSpanId(), srvAdmit.GetParentSpanId(), "cooldownd's Admit continues the client's traceparent")
	assert.Equal(t, report.GetSpanId(), srvReport.GetParentSpanId(), "cooldownd's Report continues the client's traceparent")
	assert.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, admit.GetKind())
	assert.Equal(t, tracepb.Span_SPAN_KIND_SERVER, srvAdmit.GetKind())
	var scripts []otlpSpan
	for _, s := range inTrace {
		if string(s.GetParentSpanId()) == string(srvAdmit.GetSpanId()) && s.attr("db.system") != nil {
			scripts = append(scripts, s)
		}
	}
	require.NotEmpty(t, scripts, "the Admit's Redis script is a child span of cooldownd's Admit; spans: %v", names(inTrace))
	assert.Equal(t, "redis", scripts[0].attr("db.system").GetStringValue())
	assert.Contains(t, []string{"evalsha", "eval"}, scripts[0].GetName())

	// The reasons on the right spans.
	reasons := srvAdmit.attr("cooldownd.candidates.deny_reasons").GetArrayValue().GetValues()
	require.Len(t, reasons, 2)
	assert.Equal(t, "cooldown", reasons[0].GetStringValue(), "the primary was passed over for its cooldown")
	assert.Equal(t, "none", reasons[1].GetStringValue())
	assert.Equal(t, "allow", srvAdmit.attr("cooldownd.decision").GetStringValue())
	assert.Equal(t, int64(1), srvAdmit.attr("cooldownd.candidate.index").GetIntValue())
	assert.Equal(t, "default", srvAdmit.attr("cooldownd.tenant").GetStringValue())
	assert.Equal(t, fallback.ID().Short(), srvAdmit.attr("cooldownd.conn.id").GetStringValue())
	assert.Equal(t, "allow", admit.attr("cooldownd.decision").GetStringValue())
	assert.False(t, admit.attr("cooldownd.mirrored").GetBoolValue())
	assert.False(t, admit.attr("cooldownd.local").GetBoolValue())
	assert.Equal(t, int64(1), guard.attr("cooldownd.candidate.index").GetIntValue(), "the guard chose the fallback")
	assert.Equal(t, "fallback", guard.attr("cooldownd.guard").GetStringValue())
	assert.Equal(t, "success", guard.attr("cooldownd.outcome").GetStringValue())
	assert.Equal(t, "success", attempt.attr("cooldownd.outcome").GetStringValue())
	assert.Equal(t, int64(200), attempt.attr("http.response.status_code").GetIntValue())
	assert.Equal(t, "success", srvReport.attr("cooldownd.outcome").GetStringValue())

	// cooldownd's JSON access log line of that Admit carries the trace id.
	found := false
	sc := bufio.NewScanner(strings.NewReader(in.logs.String()))
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		if line["msg"] == "rpc" && line["procedure"] == "/cooldown.v1.CooldownService/Admit" && line["trace_id"] == traceID.String() {
			found = true
			assert.Equal(t, hex.EncodeToString(srvAdmit.GetSpanId()), line["span_id"])
		}
	}
	assert.True(t, found, "an access log line of the Admit with trace_id %s:\n%s", traceID, in.logs)

	// The canary scan: no form of the API key in any attribute of any span.
	forms := []string{apiKey, hex.EncodeToString([]byte(apiKey)), base64.StdEncoding.EncodeToString([]byte(apiKey)),
		base64.RawURLEncoding.EncodeToString([]byte(apiKey))}
	for _, s := range spans {
		dump := s.String() // every attribute, event and link, as text
		for _, f := range forms {
			assert.NotContains(t, dump, f, "span %s of %s", s.GetName(), s.service)
		}
	}
}

func names(spans []otlpSpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.service + ":" + s.GetName()
	}
	return out
}
