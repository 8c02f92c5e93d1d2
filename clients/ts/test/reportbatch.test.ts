// The mirror's flush as ReportBatch requests (decision 0065), against the
// scripted cooldownd of fakes.ts: one request per flush of at most 512
// reports under one key, the answers fed to the mirror, an older
// cooldownd's Unimplemented, and the report queue's batches.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";

import { Client, type ClientOptions } from "../src/client.js";
import { Outcome } from "../src/breaker.js";
import type { Classification } from "../src/classify.js";
import type { Conn } from "../src/conn.js";
import { silentLogger } from "../src/log.js";
import { MaxReportBatch, MirrorRefusedRetryMs } from "../src/mirror.js";
import { ReportBatchRequestSchema, State as WireState, type ReportRequest } from "../src/gen/v1/cooldown_pb.js";
import { FakeCooldownd } from "./fakes.js";
import { repoRoot } from "./helpers.js";

const clients: Client[] = [];
after(async () => {
  for (const c of clients) await c.close();
});

const key = /^[A-Za-z0-9_-]{22}$/;
const success: Classification = { outcome: Outcome.Success, retryable: false, retryAfterMs: 0, httpStatus: 200, errorCode: "", proactiveMs: 0, tooLong: false };
const hex = (r: ReportRequest) => Buffer.from(r.connection!.id).toString("hex");
const unimplemented = () => new ConnectError("not implemented", Code.Unimplemented);
const unavailable = () => new ConnectError("state store unavailable", Code.Unavailable);
const resourceExhausted = () => new ConnectError("the tenant's connection cap is reached", Code.ResourceExhausted);

interface Setup { cd: Client; fake: FakeCooldownd; conns(k: number): Conn[]; clock: { now: number }; }

let n = 0;
/** A client with a live mirror on a fake cooldownd, its clock in clock.now; the mirror's own flush is an hour away. */
async function setup(opts: ClientOptions = {}): Promise<Setup> {
  const fake = new FakeCooldownd();
  const clock = { now: Date.now() };
  const cd = new Client("http://cooldownd.test", {
    logger: silentLogger, transport: () => fake.transport(), admitTimeoutMs: 5_000, serviceRetryMs: 3_600_000,
    mirror: { intervalMs: 3_600_000 }, now: () => clock.now, ...opts,
  });
  clients.push(cd);
  const id = ++n;
  // The stream opens at cooldownd's first answer to an Admit.
  await cd.admit([cd.connection({ provider: "openai", endpoint: "https://warm-up.test", credential: `sk-warm-up-${id}` })]);
  for (let i = 0; i < 200 && !cd.stats().mirror!.live; i++) await new Promise((r) => setTimeout(r, 5));
  assert.ok(cd.stats().mirror!.live, "the watch stream is up");
  const conns = (k: number) => Array.from({ length: k },
    (_, i) => cd.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: `sk-batch-${id}-${i}` }));
  return { cd, fake, conns, clock };
}

/** One success on each conn (a retry there with retry), batched by the mirror. */
async function succeed(cd: Client, conns: Conn[], retry = false): Promise<void> {
  for (const c of conns) await cd.report(await cd.admit([c], retry ? { sent: [c] } : {}), success);
}

test("a flush of N connections is one ReportBatch of N reports, under one 22-character key, none with a key or reporter of its own", async () => {
  const s = await setup();
  const cs = s.conns(5);
  await succeed(s.cd, cs);
  await succeed(s.cd, cs.slice(0, 1));
  await succeed(s.cd, cs.slice(1, 2), true);
  assert.equal(s.fake.reports.length, 0, "the successes wait for the flush");
  await s.cd.flush({ signal: AbortSignal.timeout(10_000) });
  assert.equal(s.fake.batches.length, 1, "one ReportBatch");
  assert.equal(s.fake.singles.length, 0, "no Report");
  const b = s.fake.batches[0]!;
  assert.match(b.idempotencyKey, key);
  assert.equal(b.reporter, s.cd.reporter);
  for (const r of b.reports) {
    assert.equal(r.reporter, "");
    assert.equal(r.idempotencyKey, "");
    assert.equal(r.leaseToken, "");
    assert.equal(r.retryAfter, undefined);
    assert.equal(r.outcome, Outcome.Success as number);
    assert.equal(r.httpStatus, 200);
    assert.equal(r.revision, 7n, "the revision the successes were admitted under");
  }
  const got = b.reports.map((r) => `${hex(r)}/${r.retry}/${r.count}`).sort();
  const want = [...cs.map((c, i) => `${c.idHex}/false/${i === 0 ? 2 : 1}`), `${cs[1]!.idHex}/true/1`].sort();
  assert.deepEqual(got, want, "one report per connection, revision and retry flag, with its count");
  assert.equal(s.cd.stats().mirror!.batches, 1, "one request");
});

test("close sends what was counted as one ReportBatch", async () => {
  const s = await setup();
  await succeed(s.cd, s.conns(3));
  await s.cd.close();
  assert.equal(s.fake.batches.length, 1);
  assert.equal(s.fake.batches[0]!.reports.length, 3);
  assert.equal(s.fake.singles.length, 0);
});

test("a flush of 1,500 connections is three ReportBatches, 512, 512 and 476, each with a key of its own", async () => {
  const s = await setup();
  const cs = s.conns(1500);
  await succeed(s.cd, cs);
  await s.cd.flush({ signal: AbortSignal.timeout(30_000) });
  assert.equal(MaxReportBatch, 512, "cooldownd's bound (server.MaxBatchReports)");
  assert.deepEqual(s.fake.batches.map((b) => b.reports.length), [512, 512, 476]);
  for (const b of s.fake.batches) assert.match(b.idempotencyKey, key);
  assert.equal(new Set(s.fake.batches.map((b) => b.idempotencyKey)).size, 3, "a key each");
  assert.equal(new Set(s.fake.reports.map(hex)).size, 1500, "every connection once");
  assert.equal(s.fake.singles.length, 0);
});

test("each answer of a ReportBatch reaches the mirror as its report's own answer, by order", async (t) => {
  await t.test("an answer not closed takes its connection out; a closed one leaves the other in", async () => {
    const s = await setup();
    const [a, b] = s.conns(2) as [Conn, Conn];
    await succeed(s.cd, [a, b]); // cooldownd's answers to the admits mirror both
    s.fake.answerReport = (r) => (hex(r) === b.idHex ? { state: WireState.OPEN } : {});
    await s.cd.flush({ signal: AbortSignal.timeout(10_000) });
    assert.equal(s.fake.batches.length, 1);
    assert.deepEqual(s.fake.batches[0]!.reports.map(hex), [a.idHex, b.idHex]);
    assert.equal((await s.cd.admit([a])).mirrored, true, "a's answer, closed: still mirrored");
    assert.notEqual((await s.cd.admit([b])).mirrored, true, "b's answer, open: out of the mirror");
  });
  await t.test("a response with fewer answers than reports is ignored", async () => {
    const s = await setup();
    const cs = s.conns(2);
    await succeed(s.cd, cs);
    s.fake.answerReport = () => ({ state: WireState.OPEN });
    s.fake.batchShort = true;
    await s.cd.flush({ signal: AbortSignal.timeout(10_000) });
    assert.equal(s.fake.batches.length, 1);
    for (const c of cs) assert.equal((await s.cd.admit([c])).mirrored, true, "no answer paired: still mirrored");
  });
});

test("a cooldownd without ReportBatch: the batches go one Report each, and so do the flushes for about 30 s, then ReportBatch again", async () => {
  const s = await setup();
  s.fake.batchError = unimplemented();
  const cs = s.conns(3);
  await succeed(s.cd, cs);
  await s.cd.flush({ signal: AbortSignal.timeout(10_000) });
  assert.equal(s.fake.batches.length, 1, "ReportBatch asked once");
  assert.equal(s.fake.singles.length, 3, "then one Report per batch");
  assert.deepEqual(s.fake.singles.map(hex).sort(), cs.map((c) => c.idHex).sort());
  for (const r of s.fake.singles) {
    assert.equal(r.reporter, s.cd.reporter);
    assert.match(r.idempotencyKey, key);
    assert.equal(r.count, 1);
    assert.equal(r.outcome, Outcome.Success as number);
  }
  const keys = new Set(s.fake.singles.map((r) => r.idempotencyKey));
  assert.equal(keys.size, 3, "each Report its own key");
  assert.ok(!keys.has(s.fake.batches[0]!.idempotencyKey), "not the batch's");
  assert.equal(s.cd.stats().mirror!.batches, 3, "three requests, the refused ReportBatch not one");
  assert.equal(s.cd.stats().reports.queued, 0, "nothing queued");

  s.clock.now += MirrorRefusedRetryMs - 1_000;
  await succeed(s.cd, cs.slice(0, 1));
  await s.cd.flush({ signal: AbortSignal.timeout(10_000) });
  assert.equal(s.fake.batches.length, 1, "within the window ReportBatch is not asked");
  assert.equal(s.fake.singles.length, 4);

  s.clock.now += 2_000;
  s.fake.batchError = undefined; // upgraded meanwhile
  await succeed(s.cd, cs);
  await s.cd.flush({ signal: AbortSignal.timeout(10_000) });
  assert.equal(s.fake.batches.length, 2, "after the window ReportBatch is asked again");
  assert.equal(s.fake.batches[1]!.reports.length, 3);
  assert.equal(s.fake.singles.length, 4);
});

test("a ReportBatch cooldownd could not take is queued whole and resent as is; the resend's answers reach the mirror", async () => {
  const s = await setup();
  s.fake.batchScript = [unavailable()];
  const cs = s.conns(3);
  await succeed(s.cd, cs);
  for (const c of cs) assert.equal((await s.cd.admit([c])).mirrored, true, "mirrored before the flush");
  s.fake.answerReport = () => ({ state: WireState.OPEN });
  await s.cd.flush({ signal: AbortSignal.timeout(10_000) });
  assert.equal(s.fake.batches.length, 2, "the batch, then its resend from the queue");
  assert.equal(s.fake.singles.length, 0, "never split into Reports");
  const [first, again] = s.fake.batches as [typeof s.fake.batches[0], typeof s.fake.batches[0]];
  assert.match(first.idempotencyKey, key);
  assert.equal(again.idempotencyKey, first.idempotencyKey, "the same key");
  assert.deepEqual(toBinary(ReportBatchRequestSchema, again), toBinary(ReportBatchRequestSchema, first), "the same request");
  const q = s.cd.stats().reports;
  assert.deepEqual([q.queued, q.delivered, q.rejected, q.len], [1, 1, 0, 0], "one item for the batch of 3");
  for (const c of cs) assert.notEqual((await s.cd.admit([c])).mirrored, true, "the resend's answer, open, took it out");
});

test("a queued ReportBatch answered Unimplemented is dropped", async () => {
  const s = await setup();
  s.fake.batchScript = [unavailable()];
  s.fake.batchError = unimplemented(); // cooldownd came back older
  await succeed(s.cd, s.conns(3));
  await s.cd.flush({ signal: AbortSignal.timeout(10_000) });
  assert.equal(s.fake.batches.length, 2);
  assert.equal(s.fake.singles.length, 0, "dropped, not split into Reports");
  const q = s.cd.stats().reports;
  assert.deepEqual([q.queued, q.delivered, q.rejected, q.len], [1, 0, 1, 0]);
});

test("a report that goes at once still sends its connection's batch as a Report of its own first (decision 0061)", async () => {
  const s = await setup();
  const [a, b] = s.conns(2) as [Conn, Conn];
  await succeed(s.cd, [a, b]);
  await s.cd.report(await s.cd.admit([a]), { ...success, outcome: Outcome.TransientFailure, retryable: true, httpStatus: 503 });
  assert.equal(s.fake.batches.length, 0, "no ReportBatch before the flush");
  assert.deepEqual(s.fake.singles.map((r) => [hex(r), r.outcome, r.count]),
    [[a.idHex, Outcome.Success as number, 1], [a.idHex, Outcome.TransientFailure as number, 0]]);
  await s.cd.flush({ signal: AbortSignal.timeout(10_000) });
  assert.deepEqual(s.fake.batches.map((x) => x.reports.map(hex)), [[b.idHex]], "the flush carries the other");
});

/** One flush of testdata/report_batch.json (its comment describes them). */
interface BatchFlush {
  at_s: number;
  successes?: { conn: string; count: number; retry?: boolean }[];
  connections?: number;
  batches?: string[][];
  reports?: string[];
  batch_sizes?: number[];
  answer?: string;
  queued?: number;
  warnings?: string[];
}

// The mirror's flush as ReportBatch (decision 0065), the same file the Go client replays (client/batch_trace_test.go).
test("the mirror's flush: testdata/report_batch.json", async (t) => {
  const trace = JSON.parse(readFileSync(join(repoRoot, "testdata", "report_batch.json"), "utf8")) as
    { max_request_bytes: number; cases: { name: string; server: string; label_bytes?: number; flushes: BatchFlush[] }[] };
  assert.ok(trace.cases.length > 0);
  // What cooldownd takes in one request (server.MaxRequestBytes); the Go replay checks it is what the server enforces.
  assert.equal(trace.max_request_bytes, 65536, "max_request_bytes");
  const knownCase = new Set(["name", "server", "label_bytes", "flushes"]);
  const known = new Set(["at_s", "successes", "connections", "batches", "reports", "batch_sizes", "answer", "queued", "warnings"]);
  for (const [ci, tc] of trace.cases.entries()) {
    await t.test(tc.name, async () => {
      for (const k of Object.keys(tc)) assert.ok(knownCase.has(k), `unknown field ${k}`);
      assert.ok(tc.server === "current" || tc.server === "old", `server ${tc.server}`);
      assert.ok(tc.flushes.length > 0);
      const warnings: string[] = []; // what the client logged at warn level, in order
      const s = await setup({ logger: { ...silentLogger, warn: (msg) => { warnings.push(msg); } } });
      if (tc.server === "old") s.fake.batchError = unimplemented(); // every ReportBatch, persistently
      const start = s.clock.now;
      const conns = new Map<string, Conn>();
      const names = new Map<string, string>();
      const connOf = (name: string): Conn => {
        let c = conns.get(name);
        if (!c) {
          // label_bytes: the name, a space, then x repeated, so many bytes in all.
          const label = tc.label_bytes === undefined ? undefined : `${name} ${"x".repeat(tc.label_bytes - name.length - 1)}`;
          c = s.cd.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: `sk-trace-${n}-${ci}-${name}`, label });
          if (label !== undefined) assert.equal(Buffer.byteLength(c.label), tc.label_bytes, "label_bytes");
          conns.set(name, c);
          names.set(c.idHex, name);
        }
        return c;
      };
      const nameOf = (r: ReportRequest): string => {
        const name = names.get(hex(r));
        assert.ok(name, "a report of a connection the case did not use");
        return name;
      };
      const entry = (r: ReportRequest) => `${nameOf(r)} ×${r.count}${r.retry ? " retry" : ""}`;
      const keys = new Set<string>(); // every key the case's requests carried: each one fresh
      for (const [fi, f] of tc.flushes.entries()) {
        const at = `flush ${fi} (at ${f.at_s} s)`;
        for (const k of Object.keys(f)) assert.ok(known.has(k), `${at}: unknown field ${k}`);
        assert.ok((f.successes === undefined) !== (f.connections === undefined), `${at}: successes or connections`);
        assert.ok(f.answer === undefined || f.answer === "resource_exhausted", `${at}: answer ${f.answer}`);
        s.clock.now = start + f.at_s * 1000;
        const b0 = s.fake.batches.length;
        const r0 = s.fake.singles.length;
        const q0 = s.cd.stats().reports.queued;
        const w0 = warnings.length;
        if (f.connections !== undefined) {
          const cs = Array.from({ length: f.connections }, (_, i) => connOf(`c${i}`));
          await succeed(s.cd, cs);
        } else {
          for (const x of f.successes!) {
            const c = connOf(x.conn);
            for (let i = 0; i < x.count; i++) await succeed(s.cd, [c], x.retry === true);
          }
        }
        assert.equal(s.fake.batches.length, b0, `${at}: no ReportBatch before the flush`);
        assert.equal(s.fake.singles.length, r0, `${at}: no Report before the flush`);
        // The flush's requests answered ResourceExhausted: a Report's, a
        // ReportBatch's at its first report (an old one's is Unimplemented first).
        if (f.answer === "resource_exhausted") s.fake.answerReport = () => { throw resourceExhausted(); };
        await s.cd.flush({ signal: AbortSignal.timeout(30_000) });
        s.fake.answerReport = () => ({});
        const batches = s.fake.batches.slice(b0);
        const singles = s.fake.singles.slice(r0);

        for (const [bi, b] of batches.entries()) {
          const size = toBinary(ReportBatchRequestSchema, b).length;
          assert.ok(size <= trace.max_request_bytes, `${at}: ReportBatch ${bi} encodes to ${size} bytes, over max_request_bytes`);
          assert.match(b.idempotencyKey, key, `${at}: ReportBatch ${bi}'s key`);
          assert.ok(!keys.has(b.idempotencyKey), `${at}: ReportBatch ${bi}'s key is fresh`);
          keys.add(b.idempotencyKey);
          assert.equal(b.reporter, s.cd.reporter, `${at}: ReportBatch ${bi}'s reporter is the client's`);
          for (const r of b.reports) {
            assert.equal(r.idempotencyKey, "", `${at}: a report of ReportBatch ${bi} has no key`);
            assert.equal(r.reporter, "", `${at}: a report of ReportBatch ${bi} has no reporter`);
          }
        }
        for (const r of singles) {
          assert.match(r.idempotencyKey, key, `${at}: a Report's key`);
          assert.ok(!keys.has(r.idempotencyKey), `${at}: a Report's key is its own`);
          keys.add(r.idempotencyKey);
        }

        if (f.batch_sizes !== undefined) {
          assert.equal(f.batches, undefined, `${at}: batch_sizes or batches`);
          assert.deepEqual(batches.map((b) => b.reports.length).sort((x, y) => y - x), f.batch_sizes, `${at}: the ReportBatch sizes`);
        } else {
          assert.deepEqual(batches.map((b) => b.reports.map(entry).sort()), (f.batches ?? []).map((b) => [...b].sort()),
            `${at}: the ReportBatch requests`);
        }
        if (f.connections !== undefined) {
          const got = batches.flatMap((b) => b.reports).concat(singles).map(entry).sort();
          const want = Array.from({ length: f.connections }, (_, i) => `c${i} ×1`).sort();
          assert.deepEqual(got, want, `${at}: one success on each connection, once`);
        }
        assert.deepEqual(singles.map(entry).sort(), [...(f.reports ?? [])].sort(), `${at}: the Report requests`);
        assert.equal(s.cd.stats().reports.queued - q0, f.queued ?? 0, `${at}: the requests queued`);
        if (f.warnings !== undefined) assert.deepEqual(warnings.slice(w0), f.warnings, `${at}: the warnings logged`);
      }
    });
  }
});
