// OpenTelemetry spans of the guarded calls (client/otel.go,
// docs/observability.md): one "cooldownd.guard" span per do, doFallback and
// fetch call, with a child span for each Admit ("cooldownd.Admit"), each
// provider attempt ("cooldownd.attempt") and each Report
// ("cooldownd.Report"), the waits as "cooldownd.wait" events, and the W3C
// traceparent of the current span on every call to cooldownd. The names and
// attributes are the Go client's (testdata/otel_spans.json holds both to
// them).
//
// @opentelemetry/api is an optional peer dependency. It is loaded lazily,
// synchronously, through createRequire on the first traced call (the API
// package ships CommonJS, and keeps its globals under a global symbol, so
// this copy sees the provider the application registered through its ESM
// import); when it is not installed the client makes no span and throws
// nothing. The client nests its own spans with an AsyncLocalStorage of its
// own, so they nest whether or not the application registered a context
// manager; the provider call runs in the attempt span's context through
// context.with, so an instrumented fetch nests under it when one is.

import { AsyncLocalStorage } from "node:async_hooks";
import { createRequire } from "node:module";
import type * as OtelApi from "@opentelemetry/api";
import type { Interceptor } from "@connectrpc/connect";

import { Decision, DenyReason, Outcome, outcomeName, reasonName } from "./breaker.js";
import type { Admission } from "./admission.js";
import type { Classification } from "./classify.js";
import { DeniedError, GuardError } from "./errors.js";

/** The instrumentation scope of the client's spans (the Go client's is its module path). */
export const TracerName = "@cooldownd/client";

/** The least of an OpenTelemetry TracerProvider the client needs (the tracerProvider option). */
export interface TracerProviderLike {
  getTracer(name: string, version?: string): unknown;
}

/** The span attributes (client/otel.go); the server's spans use the same names. */
export const Attr = {
  guard: "cooldownd.guard", candidates: "cooldownd.candidates", conn: "cooldownd.conn.id", index: "cooldownd.candidate.index",
  decision: "cooldownd.decision", reason: "cooldownd.deny_reason", retryAfterMs: "cooldownd.retry_after_ms",
  revision: "cooldownd.revision", retry: "cooldownd.retry", shadowed: "cooldownd.shadow.deny_reason", local: "cooldownd.local",
  mirrored: "cooldownd.mirrored", probe: "cooldownd.probe", attempt: "cooldownd.attempt", attempts: "cooldownd.attempts",
  outcome: "cooldownd.outcome", errorCode: "cooldownd.error_code", status: "http.response.status_code", open: "cooldownd.open",
  waitMs: "cooldownd.wait_ms", cause: "cooldownd.cause",
} as const;

/** The kind of a guarded call: the Go client's do and fallback, and fetch (Go's round_tripper). */
export type GuardKind = "do" | "fallback" | "fetch";

type Api = typeof OtelApi;

let api: Api | null | undefined;

/** The OpenTelemetry API, or null when it is not installed. */
function loadApi(): Api | null {
  if (api !== undefined) return api;
  try {
    api = createRequire(import.meta.url)("@opentelemetry/api") as Api;
  } catch {
    api = null;
  }
  return api;
}

/** The context the client's current span is in (of the guard, an Admit or a Report). */
const current = new AsyncLocalStorage<OtelApi.Context>();

/** The tracer a guard's span came from, for its attempts' spans. */
const tracers = new WeakMap<OtelApi.Span, OtelApi.Tracer>();

const decisionNames: Record<number, string> = { [Decision.Allow]: "allow", [Decision.AllowProbe]: "allow_probe", [Decision.Deny]: "deny" };
const decisionName = (d: Decision) => decisionNames[d] ?? `decision(${d})`;
const denyName = (r: DenyReason) => reasonName(r);

/** A client's tracing: the tracerProvider option's, else the global provider's. */
export class Tracing {
  constructor(private readonly provider: TracerProviderLike | undefined) {}

  /** The tracer of the spans and the API, or undefined when tracing nothing. */
  private tracer(): { a: Api; tr: OtelApi.Tracer } | undefined {
    const a = loadApi();
    if (!a) return undefined;
    const tp = (this.provider as OtelApi.TracerProvider | undefined) ?? a.trace.getTracerProvider();
    return { a, tr: tp.getTracer(TracerName) };
  }

  /** The parent of a new span: the client's current one, else the application's active context. */
  private static parent(a: Api): OtelApi.Context {
    return current.getStore() ?? a.context.active();
  }

  /** Runs a guarded call in its span. */
  async guard<T>(kind: GuardKind, cands: number, run: () => Promise<T>): Promise<T> {
    const t = this.tracer();
    if (!t) return run();
    const span = t.tr.startSpan("cooldownd.guard", { attributes: { [Attr.guard]: kind, [Attr.candidates]: cands } }, Tracing.parent(t.a));
    if (!span.isRecording() && !t.a.isSpanContextValid(span.spanContext())) {
      span.end();
      return run();
    }
    tracers.set(span, t.tr);
    try {
      const v = await current.run(t.a.trace.setSpan(Tracing.parent(t.a), span), run);
      span.setAttribute(Attr.outcome, outcomeName(Outcome.Success));
      return v;
    } catch (e) {
      endGuardError(t.a, span, e);
      throw e;
    } finally {
      span.end();
    }
  }

  /** Runs an Admit in its span. */
  async admit(cands: number, run: () => Promise<Admission>): Promise<Admission> {
    const t = this.tracer();
    if (!t) return run();
    const parent = Tracing.parent(t.a);
    const span = t.tr.startSpan("cooldownd.Admit", { kind: t.a.SpanKind.CLIENT, attributes: { [Attr.candidates]: cands } }, parent);
    try {
      const a = await current.run(t.a.trace.setSpan(parent, span), run);
      span.setAttributes({
        [Attr.decision]: decisionName(a.decision), [Attr.index]: a.index, [Attr.conn]: a.conn.short, [Attr.revision]: Number(a.revision),
        [Attr.retry]: a.retry ?? false, [Attr.local]: a.local, [Attr.mirrored]: a.mirrored ?? false,
      });
      if (a.decision === Decision.Deny) span.setAttributes({ [Attr.reason]: denyName(a.reason), [Attr.retryAfterMs]: a.retryAfterMs });
      if (a.shadowReason !== undefined && a.shadowReason !== DenyReason.None) span.setAttribute(Attr.shadowed, denyName(a.shadowReason));
      return a;
    } catch (e) {
      span.setStatus({ code: t.a.SpanStatusCode.ERROR, message: String(e) });
      throw e;
    } finally {
      span.end();
    }
  }

  /** Runs a Report in its span; run says whether the connection is open after it. */
  async report(a: Admission, cl: Classification, run: () => Promise<boolean>): Promise<boolean> {
    const t = this.tracer();
    if (!t) return run();
    const parent = Tracing.parent(t.a);
    const span = t.tr.startSpan("cooldownd.Report", {
      kind: t.a.SpanKind.CLIENT, attributes: {
        [Attr.outcome]: outcomeName(cl.outcome), [Attr.conn]: a.conn.short, [Attr.revision]: Number(a.revision),
        [Attr.retry]: a.retry ?? false, [Attr.local]: a.local, [Attr.mirrored]: a.mirrored ?? false,
      },
    }, parent);
    try {
      const open = await current.run(t.a.trace.setSpan(parent, span), run);
      span.setAttribute(Attr.open, open);
      return open;
    } catch (e) {
      span.setAttribute(Attr.open, false);
      span.setStatus({ code: t.a.SpanStatusCode.ERROR, message: String(e) });
      throw e;
    } finally {
      span.end();
    }
  }
}

/** Sets a failed guard's outcome and status (Go's endGuard). */
function endGuardError(a: Api, span: OtelApi.Span, e: unknown): void {
  if (e instanceof DeniedError) {
    span.setAttributes({ [Attr.outcome]: "denied", [Attr.reason]: denyName(e.reason), [Attr.conn]: e.conn.short,
      [Attr.attempts]: e.attempts, [Attr.local]: e.local });
    span.setStatus({ code: a.SpanStatusCode.ERROR, message: "denied: " + denyName(e.reason) });
  } else if (e instanceof GuardError) {
    span.setAttributes({ [Attr.outcome]: outcomeName(e.lastOutcome), [Attr.conn]: e.conn.short, [Attr.attempts]: e.attempts });
    if (e.errorCode !== "") span.setAttribute(Attr.errorCode, e.errorCode);
    span.setStatus({ code: a.SpanStatusCode.ERROR, message: outcomeName(e.lastOutcome) });
  } else {
    span.setStatus({ code: a.SpanStatusCode.ERROR, message: "invalid call" });
  }
}

/** The guard's span, when the current context is a guard's that records (not an Admit's or a Report's: those have ended). */
function guardSpan(): { a: Api; span: OtelApi.Span } | undefined {
  const ctx = current.getStore();
  if (!ctx || !api) return undefined;
  const span = api.trace.getSpan(ctx);
  if (!span || !span.isRecording()) return undefined;
  return { a: api, span };
}

/** Records a wait of the guard as an event of its span: cause "denied:<reason>" or "retry:<outcome>". */
export function traceWait(ms: number, cause: string): void {
  guardSpan()?.span.addEvent("cooldownd.wait", { [Attr.waitMs]: Math.floor(ms), [Attr.cause]: cause });
}

/** The wait cause of a denial, and of a retry after an outcome. */
export const deniedCause = (r: DenyReason) => "denied:" + denyName(r);
export const retryCause = (o: Outcome) => "retry:" + outcomeName(o);

/**
 * Runs one provider attempt in its span (Go's startAttempt/endAttempt); the
 * chosen candidate goes on the guard's span too. The call itself runs in the
 * attempt's context (context.with) for the application's instrumentation.
 */
export async function traceAttempt<T extends { cl: Classification }>(adm: Admission, n: number, run: () => Promise<T>): Promise<T> {
  const g = guardSpan();
  if (!g) return run();
  const { a, span: parent } = g;
  parent.setAttributes({ [Attr.index]: adm.index, [Attr.conn]: adm.conn.short });
  const ctx = current.getStore()!;
  const span = (tracers.get(parent) ?? a.trace.getTracer(TracerName)).startSpan("cooldownd.attempt", {
    attributes: { [Attr.attempt]: n, [Attr.index]: adm.index, [Attr.conn]: adm.conn.short, [Attr.probe]: adm.decision === Decision.AllowProbe },
  }, ctx);
  const actx = a.trace.setSpan(ctx, span);
  try {
    const r = await current.run(actx, () => a.context.with(actx, run));
    const cl = r.cl;
    span.setAttribute(Attr.outcome, outcomeName(cl.outcome));
    if (cl.httpStatus !== 0) span.setAttribute(Attr.status, cl.httpStatus);
    if (cl.errorCode !== "") span.setAttribute(Attr.errorCode, cl.errorCode);
    if (cl.outcome !== Outcome.Success) span.setStatus({ code: a.SpanStatusCode.ERROR, message: outcomeName(cl.outcome) });
    return r;
  } finally {
    span.end();
  }
}

/**
 * The Connect interceptor that sends the client's current span as a W3C
 * traceparent (and tracestate) with every call to cooldownd; without one it
 * sends nothing.
 */
export const traceContext: Interceptor = (next) => (req) => {
  const ctx = current.getStore();
  if (ctx && api) {
    const sc = api.trace.getSpanContext(ctx);
    if (sc && api.isSpanContextValid(sc)) {
      req.header.set("traceparent", `00-${sc.traceId}-${sc.spanId}-0${(sc.traceFlags & 1).toString(16)}`);
      const ts = sc.traceState?.serialize();
      if (ts) req.header.set("tracestate", ts);
    }
  }
  return next(req);
};
