// Unit tests without a server: the report queue, the in-process fallback,
// header parsing details, connections, options.
import { test } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { ReportBatchRequestSchema, ReportRequestSchema, type ReportRequest } from "../src/gen/v1/cooldown_pb.js";
import { isBatch, ReportQueue, remainingHint, stale, type PendingReport } from "../src/queue.js";
import { Client, classifyRpc } from "../src/client.js";
import { Decision, DenyReason, Outcome, defaultPolicy } from "../src/breaker.js";
import { classify } from "../src/classify.js";
import { parseResetDuration, parseRetryAfter, serverDelay, MaxHintMs } from "../src/headers.js";
import { InvalidConnError } from "../src/errors.js";
import { silentLogger } from "../src/log.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { freePort } from "./helpers.js";

function pending(lease: string, outcome: Outcome, hintMs = 0, observed = 0): PendingReport {
  return { req: create(ReportRequestSchema, { leaseToken: lease, outcome: outcome as number }), hintMs, observed };
}

/** The report of a queued item that is one. */
function one(p: PendingReport | undefined): ReportRequest {
  assert.ok(p && !isBatch(p.req), "one report");
  return p.req;
}

/** A queued ReportBatch of n successes, observed at observed. */
function batch(n: number, observed = 0): PendingReport {
  const reports = Array.from({ length: n }, () => create(ReportRequestSchema, { outcome: Outcome.Success as number, count: 1 }));
  return { req: create(ReportBatchRequestSchema, { reports, idempotencyKey: "k".repeat(22) }), hintMs: 0, observed };
}

test("queue: bounded, the oldest report without a lease dropped first, leased reports sent first", () => {
  const q = new ReportQueue(3, 60_000);
  assert.equal(q.push(pending("", Outcome.TransientFailure), false), true, "the first push starts a sender");
  assert.equal(q.push(pending("L1", Outcome.Success), false), false);
  q.push(pending("", Outcome.RateLimited, 0, 1), false);
  q.push(pending("", Outcome.QuotaExhausted, 0, 2), false); // over the bound: the oldest plain one goes
  const s = q.snapshot();
  assert.equal(s.len, 3);
  assert.equal(s.dropped, 1);
  assert.equal(one(q.next(10)).leaseToken, "L1", "the lease first");
  assert.equal(one(q.next(10)).outcome, Outcome.RateLimited as number);
  assert.equal(one(q.next(10)).outcome, Outcome.QuotaExhausted as number);
  assert.equal(q.next(10), undefined);
  assert.equal(q.running, false);
  // Only leases left: the oldest lease goes.
  const q2 = new ReportQueue(1, 60_000);
  q2.push(pending("A", Outcome.Success), false);
  q2.push(pending("B", Outcome.Success), false);
  assert.equal(one(q2.next(0)).leaseToken, "B");
});

test("queue: a batch is one plain item, never leased, stale by its max age only", () => {
  const q = new ReportQueue(2, 60_000);
  q.push(batch(1024), false);
  q.push(pending("L", Outcome.Success), false);
  assert.equal(q.snapshot().len, 2, "a batch of 1,024 reports is one item");
  assert.equal(one(q.next(0)).leaseToken, "L", "a lease goes before a batch");
  const b = q.next(0)!;
  assert.ok(isBatch(b.req));
  q.push(b, true); // back after a failed try
  q.push(pending("L2", Outcome.Success), false);
  q.push(pending("L3", Outcome.Success), false); // over the bound: the batch, the one item without a lease, goes
  assert.equal(q.snapshot().dropped, 1);
  assert.deepEqual([one(q.next(0)).leaseToken, one(q.next(0)).leaseToken], ["L2", "L3"]);
  assert.equal(stale(batch(3, 0), 60_000, 60_000), false, "a batch waits out its max age");
  assert.equal(stale(batch(3, 0), 60_001, 60_000), true);
});

test("queue: staleness and what is left of a hint", () => {
  assert.equal(stale(pending("", Outcome.TransientFailure, 0, 0), 60_001, 60_000), true, "older than the max age");
  assert.equal(stale(pending("L", Outcome.RateLimited, 1000, 0), 5000, 60_000), false, "a lease is sent until max age");
  assert.equal(stale(pending("", Outcome.RateLimited, 1000, 0), 1000, 60_000), true, "a passed hint is not sent");
  assert.equal(stale(pending("", Outcome.Success, 1000, 0), 1500, 60_000), true, "a passed proactive cooldown");
  assert.equal(stale(pending("", Outcome.QuotaExhausted, 1000, 0), 1500, 60_000), false, "quota still counts");
  assert.equal(remainingHint(pending("", Outcome.RateLimited, 3000, 1000), 2500), 1500);
  assert.equal(remainingHint(pending("", Outcome.RateLimited, 3000, 1000), 9000), 1, "at least 1 ms");
  assert.equal(remainingHint(pending("", Outcome.RateLimited, 0, 1000), 9000), 0);
});

test("local fallback: the in-process breaker trips, cools down, probes and closes, with the client's clock", async () => {
  let now = 1_800_000_000_000;
  const policy = { ...defaultPolicy(), consecutiveFailures: 2, jitter: 0, openBaseMs: 1000, openMaxMs: 4000, leaseTtlMs: 500 };
  const dead = `http://127.0.0.1:${await freePort()}`;
  const c = new Client(dead, { logger: silentLogger, now: () => now, localPolicy: policy, admitTimeoutMs: 50 });
  const x = c.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: "sk-local" });
  const fail = classify({}, { status: 500, headers: new Headers() }, undefined, undefined);
  for (let i = 0; i < 2; i++) {
    const a = await c.admit([x]);
    assert.ok(a.local);
    assert.equal(a.decision, Decision.Allow);
    await c.report(a, fail);
  }
  let a = await c.admit([x]);
  assert.equal(a.decision, Decision.Deny);
  assert.equal(a.reason, DenyReason.Open);
  assert.equal(a.retryAfterMs, 1000);
  now += 1000;
  a = await c.admit([x]);
  assert.equal(a.decision, Decision.AllowProbe);
  const b = await c.admit([x]);
  assert.equal(b.reason, DenyReason.ProbeInFlight);
  assert.ok((await c.extendLease(a, 2000)) === now + 2000);
  await c.report(a, classify({}, { status: 200, headers: new Headers() }, undefined, undefined));
  assert.equal((await c.admit([x])).decision, Decision.Allow);
  // A 429's Retry-After is obeyed locally too, never shortened.
  await c.report(await c.admit([x]), classify({}, { status: 429, headers: new Headers({ "retry-after": "7" }) }, undefined, undefined));
  const d = await c.admit([x]);
  assert.equal(d.reason, DenyReason.Cooldown);
  assert.equal(d.retryAfterMs, 7000);
  // Fallback candidates locally: the first that may go.
  const y = c.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: "sk-local-2" });
  const f = await c.admit([x, y]);
  assert.equal(f.index, 1);
  assert.ok(c.stats().reports.queued >= 3, "local failures and hints are queued for the fleet");
  await c.close();
});

test("rpc errors: refusals, the tenant cap, outages and resets", () => {
  assert.equal(classifyRpc(new ConnectError("x", Code.Unauthenticated)), "rejected");
  assert.equal(classifyRpc(new ConnectError("x", Code.PermissionDenied)), "rejected");
  assert.equal(classifyRpc(new ConnectError("x", Code.InvalidArgument)), "rejected");
  assert.equal(classifyRpc(new ConnectError("x", Code.FailedPrecondition)), "rejected");
  assert.equal(classifyRpc(new ConnectError("x", Code.ResourceExhausted)), "capped");
  assert.equal(classifyRpc(new ConnectError("x", Code.Unavailable)), "outage");
  assert.equal(classifyRpc(new ConnectError("x", Code.DeadlineExceeded)), "outage");
  assert.equal(classifyRpc(new ConnectError("x", Code.Internal)), "failed");
  const reset = new ConnectError("x", Code.Aborted, undefined, undefined, Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" }));
  assert.equal(classifyRpc(reset), "outage", "connect-node reports a reset as aborted");
});

test("headers: parsing details", () => {
  const now = Date.UTC(2025, 2, 14, 12);
  assert.equal(parseRetryAfter("120", now), 120_000);
  assert.equal(parseRetryAfter("0.0001", now), 1, "rounded up, never down");
  assert.equal(parseRetryAfter("99999999999999999999999", now), MaxHintMs);
  assert.equal(parseRetryAfter(".5", now), undefined);
  assert.equal(parseRetryAfter("1.", now), undefined);
  assert.equal(parseRetryAfter("NaN", now), undefined);
  assert.equal(parseRetryAfter("Fri, 14 Mar 2025 12:00:30 GMT", now), 30_000);
  assert.equal(parseRetryAfter("Fri, 30 Feb 2025 12:00:30 GMT", now), undefined);
  assert.equal(parseResetDuration("1h2m3.5s"), 3_723_500);
  assert.equal(parseResetDuration("20ms"), 20);
  assert.equal(parseResetDuration("2s1m"), undefined, "units must decrease");
  assert.equal(parseResetDuration("1s1s"), undefined);
  assert.equal(parseResetDuration("-1s"), undefined);
  assert.equal(serverDelay(new Headers({ "x-ms-retry-after-ms": "0", "retry-after": "2" }), now), 2000);
});

test("connections: labels, validation, no credential in errors", () => {
  const c = new Client("http://127.0.0.1:9", { logger: silentLogger });
  const x = c.connection({ provider: " OpenAI", endpoint: "https://api.openai.com/v1", credential: "sk-abc", scope: "gpt-4o" });
  assert.match(x.label, /^openai gpt-4o [0-9a-f]{8}…$/);
  assert.equal(x.idHex.length, 64);
  assert.equal(String(x), x.label);
  assert.throws(() => c.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: "sk-abcdef", label: "my sk-abcdef" }),
    (e: unknown) => e instanceof InvalidConnError && !e.message.includes("sk-abcdef"));
  assert.throws(() => c.connection({ provider: "openai", endpoint: "https://sk-abcdef@h", credential: "sk-abcdef" }),
    (e: unknown) => e instanceof InvalidConnError && !e.message.includes("sk-abcdef"));
  assert.throws(() => c.connection({ provider: "openai", endpoint: "https://h", credential: "k", label: "x".repeat(65) }), InvalidConnError);
  assert.throws(() => new Client("http://u:p@h"), /credentials/);
  assert.throws(() => new Client("ftp://h"), /http/);
  assert.throws(() => new Client(Array(17).fill("http://h").join(",")), /at most 16/);
  assert.throws(() => new Client("http://h", { salt: new Uint8Array(3) }), /salt/);
  assert.throws(() => new Client("http://h", { localPolicy: { ...defaultPolicy(), maxProbes: 0 } }), /max_probes/);
});

test("readErrorBody: bounded, and a stalled body ends with the caller's signal", async () => {
  const { readErrorBody } = await import("../src/client.js");
  const big = new Response("x".repeat(100_000), { status: 500 });
  assert.equal((await readErrorBody(big, 1000)).length, 1000);
  let pulls = 0;
  const stalled = new Response(new ReadableStream({ pull(c) { if (pulls++ === 0) c.enqueue(new TextEncoder().encode("{\"err")); return new Promise(() => {}); } }), { status: 503 });
  const ctl = new AbortController();
  setTimeout(() => ctl.abort(), 50);
  const got = await readErrorBody(stalled, 1000, ctl.signal);
  assert.equal(new TextDecoder().decode(got), "{\"err", "a short read is kept");
  const already = new Response(new ReadableStream({ pull() { return new Promise(() => {}); } }), { status: 503 });
  assert.equal((await readErrorBody(already, 1000, AbortSignal.abort())).length, 0);
});
