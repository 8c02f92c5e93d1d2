package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/cooldownd/cooldownd/cmd/internal/buildinfo"
)

// otelConfig is tracing's configuration: the flags, over the standard
// OTEL_* variables the OpenTelemetry SDK reads itself
// (docs/observability.md).
type otelConfig struct {
	endpoint   string // --otlp-endpoint: an OTLP/HTTP base URL
	service    string // --otel-service-name
	sampler    string // --otel-traces-sampler
	samplerArg string // --otel-traces-sampler-arg
}

// otelEndpointVars are the standard variables that name an OTLP endpoint;
// one of them (or --otlp-endpoint) turns tracing on.
var otelEndpointVars = []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"}

// enabled reports whether cooldownd traces: an endpoint is configured, the
// SDK is not disabled (OTEL_SDK_DISABLED=true) and the traces exporter is
// not "none".
func (o otelConfig) enabled(env environ) bool {
	if strings.EqualFold(env.get("OTEL_SDK_DISABLED"), "true") || env.get("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	if o.endpoint != "" {
		return true
	}
	for _, k := range otelEndpointVars {
		if env.get(k) != "" {
			return true
		}
	}
	return false
}

// validate checks what cooldownd decides itself; the SDK checks the rest
// of the OTEL_* variables when it reads them.
func (o otelConfig) validate(env environ) error {
	var errs []error
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := env.get(k); v != "" && v != "http/protobuf" {
			errs = append(errs, fmt.Errorf("%s=%q: cooldownd exports OTLP over HTTP/protobuf only (http/protobuf)", k, v))
			break
		}
	}
	if v := env.get("OTEL_TRACES_EXPORTER"); v != "" && v != "otlp" && v != "none" {
		errs = append(errs, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: cooldownd exports otlp (or none)", v))
	}
	if o.endpoint != "" && !strings.HasPrefix(o.endpoint, "http://") && !strings.HasPrefix(o.endpoint, "https://") {
		errs = append(errs, fmt.Errorf("--otlp-endpoint must be an http:// or https:// URL such as http://otel-collector:4318, got %q", o.endpoint))
	}
	if o.sampler != "" {
		if _, err := sampler(o.sampler, o.samplerArg); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sampler is the SDK sampler named as OTEL_TRACES_SAMPLER names it.
func sampler(name, arg string) (sdktrace.Sampler, error) {
	ratio := 1.0
	if strings.HasSuffix(name, "traceidratio") && arg != "" {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("--otel-traces-sampler-arg must be a ratio in [0, 1] for %s, got %q", name, arg)
		}
		ratio = r
	}
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	}
	return nil, fmt.Errorf("--otel-traces-sampler must be always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio, got %q", name)
}

// startTracing returns the TracerProvider that exports cooldownd's spans
// over OTLP/HTTP, and its shutdown (which flushes the spans not sent yet),
// or a nil provider when tracing is off. The exporter reads the standard
// OTEL_EXPORTER_OTLP_* variables itself (endpoint, headers, timeout,
// compression, certificates), the SDK OTEL_TRACES_SAMPLER(_ARG) and
// OTEL_BSP_*, the resource OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES;
// the flags win over them.
func startTracing(ctx context.Context, o otelConfig, env environ, build buildinfo.Info) (trace.TracerProvider, func(context.Context) error, error) {
	if !o.enabled(env) {
		return nil, func(context.Context) error { return nil }, nil
	}
	var eopts []otlptracehttp.Option
	if o.endpoint != "" {
		eopts = append(eopts, otlptracehttp.WithEndpointURL(strings.TrimRight(o.endpoint, "/")+"/v1/traces"))
	}
	exp, err := otlptracehttp.New(ctx, eopts...)
	if err != nil {
		return nil, nil, fmt.Errorf("otlp exporter: %w", err)
	}
	ropts := []resource.Option{resource.WithTelemetrySDK(), resource.WithAttributes(
		attribute.String("service.name", "cooldownd"), attribute.String("service.version", build.Version)), resource.WithFromEnv()}
	if o.service != "" {
		ropts = append(ropts, resource.WithAttributes(attribute.String("service.name", o.service)))
	}
	res, err := resource.New(ctx, ropts...)
	if err != nil {
		return nil, nil, fmt.Errorf("otel resource: %w", err)
	}
	topts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if o.sampler != "" {
		s, err := sampler(o.sampler, o.samplerArg)
		if err != nil {
			return nil, nil, err
		}
		topts = append(topts, sdktrace.WithSampler(s))
	}
	tp := sdktrace.NewTracerProvider(topts...)
	return tp, tp.Shutdown, nil
}

// traceRedis makes each Redis command (each script) a child span of the
// RPC that sent it: go-redis's redisotel, without the command's arguments
// (a script's ARGV holds lease tokens and idempotency keys) and without
// the caller's file and line (a stack walk per command).
func traceRedis(ctx context.Context, rdb redis.UniversalClient, tp trace.TracerProvider) error {
	opts := []redisotel.TracingOption{redisotel.WithTracerProvider(tp), redisotel.WithDBStatement(false), redisotel.WithCallerEnabled(false)}
	c, ok := rdb.(*hookedCluster)
	if !ok {
		return redisotel.InstrumentTracing(rdb, opts...)
	}
	// redisotel hooks a Cluster's node clients as they are made; the ones
	// made already (openRedis pinged) are hooked here.
	if err := redisotel.InstrumentTracing(c.ClusterClient, opts...); err != nil {
		return err
	}
	return c.ForEachShard(ctx, func(_ context.Context, node *redis.Client) error {
		return redisotel.InstrumentTracing(node, opts...)
	})
}

// traceHandler adds the trace and span ids of the record's context to
// every log record written in a traced request (the access log line of an
// RPC, its warnings), so a log line leads to its trace.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(as)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}

// tracingShutdownTimeout bounds the flush of the last spans at exit.
const tracingShutdownTimeout = 5 * time.Second
