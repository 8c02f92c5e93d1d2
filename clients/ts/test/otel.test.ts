// The client's OpenTelemetry spans (src/otel.ts, client/otel.go): a guarded
// call makes one cooldownd.guard span with its Admits, attempts and Reports
// as children, the names and attributes of the Go client's, and every call
// to cooldownd carries the current span as its traceparent. Without a
// provider nothing is recorded, no traceparent is sent and nothing throws.
// In-memory only: a router transport for cooldownd, Responses made in-process.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createRouterTransport, type Interceptor } from "@connectrpc/connect";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { SpanKind, SpanStatusCode } from "@opentelemetry/api";

import { Client, type ClientOptions } from "../src/client.js";
import { Decision, DenyReason } from "../src/breaker.js";
import { DeniedError } from "../src/errors.js";
import { silentLogger } from "../src/log.js";
import {
  AdmitResponseSchema, CandidateDecisionSchema, CooldownService, ReportResponseSchema,
  DenyReason as WireDenyReason, State as WireState, type AdmitRequest, type AdmitResponse,
} from "../src/gen/v1/cooldown_pb.js";
import { repoRoot } from "./helpers.js";

const wire = (r: DenyReason) => r as number as WireDenyReason;

function allow(): (req: AdmitRequest) => AdmitResponse {
  return (req) => create(AdmitResponseSchema, {
    decision: Decision.Allow, candidateIndex: 0, revision: 7n, state: WireState.CLOSED,
    candidates: req.candidates.slice(0, 1).map(() => create(CandidateDecisionSchema, { decision: Decision.Allow })),
  });
}

function deny(reason: DenyReason, waitMs: number): (req: AdmitRequest) => AdmitResponse {
  return (req) => create(AdmitResponseSchema, {
    decision: Decision.Deny, candidateIndex: 0, revision: 7n, denyReason: wire(reason), retryAfter: durationFromMs(waitMs),
    state: WireState.CLOSED,
    candidates: req.candidates.map(() => create(CandidateDecisionSchema, { decision: Decision.Deny, denyReason: wire(reason),
      retryAfter: durationFromMs(waitMs) })),
  });
}

/** A cooldownd answering Admits from a script (the last repeats); it records each call's traceparent. */
function fakeCooldownd(script: ((req: AdmitRequest) => AdmitResponse)[]) {
  const seen: { op: string; traceparent: string | null }[] = [];
  const transport = (_url: string, interceptors: Interceptor[]) => createRouterTransport(({ service }) => {
    service(CooldownService, {
      admit: (req, ctx) => {
        seen.push({ op: "admit", traceparent: ctx.requestHeader.get("traceparent") });
        return (script.length > 1 ? script.shift()! : script[0]!)(req);
      },
      report: (req, ctx) => {
        seen.push({ op: "report", traceparent: ctx.requestHeader.get("traceparent") });
        return create(ReportResponseSchema, { revision: req.revision, state: WireState.CLOSED });
      },
      extendLease: () => { throw new ConnectError("no", Code.Unimplemented); },
      getConnection: () => { throw new ConnectError("no", Code.Unimplemented); },
      listConnections: () => { throw new ConnectError("no", Code.Unimplemented); },
      watchConnections: () => { throw new ConnectError("no", Code.Unimplemented); },
    });
  }, { transport: { interceptors } });
  return { seen, transport };
}

const clients: Client[] = [];
after(async () => { await Promise.all(clients.map((c) => c.close())); });

function setup(script: ((req: AdmitRequest) => AdmitResponse)[], opts: ClientOptions = {}) {
  const fake = fakeCooldownd(script);
  const cd = new Client("http://cooldownd.test", {
    logger: silentLogger, transport: fake.transport, admitTimeoutMs: 5_000, maxRetries: 0, sleep: async () => {}, ...opts,
  });
  clients.push(cd);
  const conn = (scope: string) => cd.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: `sk-otel-${scope}`, scope });
  return { cd, fake, a: conn("a"), b: conn("b") };
}

function recorder() {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  return { exporter, provider };
}

/** The names and attribute keys both clients give each span (testdata/otel_spans.json, checked by client/otel_spans_test.go too). */
const shared = JSON.parse(readFileSync(join(repoRoot, "testdata", "otel_spans.json"), "utf8")) as {
  spans: Record<string, { kind: "internal" | "client"; attributes: string[] }>;
  events: Record<string, string[]>;
};

function checkShared(s: ReadableSpan): void {
  const want = shared.spans[s.name];
  assert.ok(want, `span ${s.name} is not in testdata/otel_spans.json`);
  assert.equal(s.kind, want.kind === "client" ? SpanKind.CLIENT : SpanKind.INTERNAL, `${s.name}: kind`);
  for (const k of Object.keys(s.attributes)) assert.ok(want.attributes.includes(k), `${s.name}: attribute ${k} is not in the shared list`);
  for (const e of s.events) {
    const keys = shared.events[e.name];
    assert.ok(keys, `event ${e.name} is not in the shared list`);
    assert.deepEqual(Object.keys(e.attributes ?? {}).sort(), [...keys].sort(), `${e.name}: attributes`);
  }
}

test("a denied call that falls back: guard span with Admit, attempt and Report children, Go's names and attributes", async () => {
  const { exporter, provider } = recorder();
  // a is denied (cooldown, 50 ms) and waited for; then admitted, rate-limited
  // (429, no retries left: fall back); b is admitted and succeeds.
  const { cd, fake, a, b } = setup([deny(DenyReason.Cooldown, 50), allow(), allow()], { tracerProvider: provider });
  const resp = await cd.doFallback([a, b], async ({ conn }) => new Response(conn === a ? "{}" : "ok", { status: conn === a ? 429 : 200 }));
  assert.equal(resp.status, 200);

  const spans = exporter.getFinishedSpans().slice().sort((x, y) =>
    x.startTime[0] - y.startTime[0] || x.startTime[1] - y.startTime[1] || (x.name === "cooldownd.guard" ? -1 : 1));
  const guard = spans.find((s) => s.name === "cooldownd.guard")!;
  assert.ok(guard, "a guard span");
  const children = spans.filter((s) => s !== guard);
  assert.deepEqual(children.map((s) => s.name), [
    "cooldownd.Admit", "cooldownd.Admit", "cooldownd.attempt", "cooldownd.Report", "cooldownd.Admit", "cooldownd.attempt", "cooldownd.Report",
  ]);
  for (const s of children) {
    assert.equal(s.parentSpanId, guard.spanContext().spanId, `${s.name} is the guard's child`);
    assert.equal(s.spanContext().traceId, guard.spanContext().traceId);
  }
  for (const s of spans) checkShared(s);

  assert.deepEqual(guard.attributes, {
    "cooldownd.guard": "fallback", "cooldownd.candidates": 2, "cooldownd.outcome": "success",
    "cooldownd.candidate.index": 0, "cooldownd.conn.id": b.short,
  });
  assert.equal(guard.events.length, 1);
  assert.equal(guard.events[0]!.name, "cooldownd.wait");
  assert.equal(guard.events[0]!.attributes!["cooldownd.cause"], "denied:cooldown");
  const waited = guard.events[0]!.attributes!["cooldownd.wait_ms"] as number;
  assert.ok(waited >= 50 && waited < 65, `wait_ms ${waited}`);

  const [denied, admitA, attemptA, reportA, admitB, attemptB, reportB] = children as [ReadableSpan, ...ReadableSpan[]];
  const admitted = (conn: string) => ({ "cooldownd.candidates": 0, "cooldownd.decision": "allow", "cooldownd.candidate.index": 0,
    "cooldownd.conn.id": conn, "cooldownd.revision": 7, "cooldownd.retry": false, "cooldownd.local": false, "cooldownd.mirrored": false });
  assert.deepEqual(denied.attributes, { ...admitted(a.short), "cooldownd.candidates": 2, "cooldownd.decision": "deny",
    "cooldownd.deny_reason": "cooldown", "cooldownd.retry_after_ms": 50 });
  assert.deepEqual(admitA!.attributes, { ...admitted(a.short), "cooldownd.candidates": 2 });
  assert.deepEqual(admitB!.attributes, { ...admitted(b.short), "cooldownd.candidates": 1 });
  for (const s of [denied, admitA!, admitB!, reportA!, reportB!]) assert.equal(s.kind, SpanKind.CLIENT);
  assert.deepEqual(attemptA!.attributes, { "cooldownd.attempt": 1, "cooldownd.candidate.index": 0, "cooldownd.conn.id": a.short,
    "cooldownd.probe": false, "cooldownd.outcome": "rate_limited", "http.response.status_code": 429 });
  assert.equal(attemptA!.status.code, SpanStatusCode.ERROR);
  assert.deepEqual(attemptB!.attributes, { "cooldownd.attempt": 2, "cooldownd.candidate.index": 0, "cooldownd.conn.id": b.short,
    "cooldownd.probe": false, "cooldownd.outcome": "success", "http.response.status_code": 200 });
  assert.notEqual(attemptB!.status.code, SpanStatusCode.ERROR);
  const reported = (conn: string, outcome: string) => ({ "cooldownd.outcome": outcome, "cooldownd.conn.id": conn, "cooldownd.revision": 7,
    "cooldownd.retry": false, "cooldownd.local": false, "cooldownd.mirrored": false, "cooldownd.open": false });
  assert.deepEqual(reportA!.attributes, reported(a.short, "rate_limited"));
  assert.deepEqual(reportB!.attributes, reported(b.short, "success"));

  // Every call to cooldownd carried its own span as the traceparent.
  const tid = guard.spanContext().traceId;
  assert.deepEqual(fake.seen.map((x) => x.op), ["admit", "admit", "report", "admit", "report"]);
  assert.deepEqual(fake.seen.map((x) => x.traceparent), [denied, admitA!, reportA!, admitB!, reportB!].map((s) => `00-${tid}-${s.spanContext().spanId}-01`));
});

test("a call denied to the end: the guard span says denied, with the reason and status error", async () => {
  const { exporter, provider } = recorder();
  const { cd, a } = setup([deny(DenyReason.Open, 10_000)], { tracerProvider: provider, noWait: true });
  await assert.rejects(cd.do(a, async () => new Response("ok")), DeniedError);
  const guard = exporter.getFinishedSpans().find((s) => s.name === "cooldownd.guard")!;
  assert.deepEqual(guard.attributes, { "cooldownd.guard": "do", "cooldownd.candidates": 1, "cooldownd.outcome": "denied",
    "cooldownd.deny_reason": "open", "cooldownd.conn.id": a.short, "cooldownd.attempts": 0, "cooldownd.local": false });
  assert.equal(guard.status.code, SpanStatusCode.ERROR);
  assert.equal(guard.status.message, "denied: open");
  assert.equal(exporter.getFinishedSpans().filter((s) => s.name === "cooldownd.attempt").length, 0);
});

test("without a tracer provider: nothing recorded, no traceparent, nothing thrown", async () => {
  const { exporter } = recorder(); // a provider nobody registers: must stay empty
  const { cd, fake, a, b } = setup([deny(DenyReason.Cooldown, 20), allow(), allow()]);
  const resp = await cd.doFallback([a, b], async ({ conn }) => new Response("x", { status: conn === a ? 429 : 200 }));
  assert.equal(resp.status, 200);
  const f = cd.fetch(a, async () => new Response("ok"));
  assert.equal((await f("https://api.openai.com/v1/chat/completions")).status, 200);
  assert.equal(exporter.getFinishedSpans().length, 0);
  assert.ok(fake.seen.length >= 7);
  assert.ok(fake.seen.every((x) => x.traceparent === null), JSON.stringify(fake.seen));
});
