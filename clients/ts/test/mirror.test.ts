// The mirror hears its own process (issue 22), against a scripted
// cooldownd in process whose unary calls can fail while its watch stream
// stays up; and the watch loop's listeners over many reconnects.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { getEventListeners } from "node:events";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type Client as RpcClient } from "@connectrpc/connect";

import { Client, type Admission, type ClientOptions } from "../src/client.js";
import { Decision, DenyReason, Outcome, outcomeName } from "../src/breaker.js";
import type { Classification } from "../src/classify.js";
import { Conn } from "../src/conn.js";
import { silentLogger } from "../src/log.js";
import { Mirror, type MirrorTicket } from "../src/mirror.js";
import { QueueBackoffCapMs } from "../src/queue.js";
import {
  ConnectionStateSchema, CooldownService, FleetCountsSchema, Override as WireOverride, State as WireState, WatchConnectionsResponseSchema,
  type ReportRequest,
} from "../src/gen/v1/cooldown_pb.js";
import { repoRoot } from "./helpers.js";
import { FakeCooldownd } from "./fakes.js";

const clients: Client[] = [];
after(async () => {
  for (const c of clients) await c.close();
});

let n = 0;
async function setup(opts: ClientOptions = {}): Promise<{ cd: Client; fake: FakeCooldownd; conn: Conn; other: Conn }> {
  const fake = new FakeCooldownd();
  const cd = new Client("http://cooldownd.test", {
    logger: silentLogger, transport: () => fake.transport(), admitTimeoutMs: 5_000, serviceRetryMs: 3_600_000,
    mirror: { intervalMs: 3_600_000 }, ...opts,
  });
  clients.push(cd);
  const conn = cd.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: `sk-mirror-${++n}` });
  const other = cd.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: `sk-mirror-other-${n}` });
  // The stream opens at cooldownd's first answer to an Admit.
  await cd.admit([cd.connection({ provider: "openai", endpoint: "https://warm-up.test", credential: `sk-warm-up-${n}` })]);
  for (let i = 0; i < 200 && !cd.stats().mirror!.live; i++) await new Promise((r) => setTimeout(r, 5));
  assert.ok(cd.stats().mirror!.live, "the watch stream is up");
  fake.admits = 0;
  fake.reports.length = 0;
  return { cd, fake, conn, other };
}

/** Admits conn twice: cooldownd's answer to the first mirrors it, which admits the second. */
async function admitMirrored(cd: Client, conn: Conn): Promise<Admission> {
  await cd.admit([conn]);
  const a = await cd.admit([conn]);
  assert.equal(a.mirrored, true, "admitted from the mirror");
  return a;
}

const base: Classification = { outcome: Outcome.Success, retryable: false, retryAfterMs: 0, httpStatus: 200, errorCode: "", proactiveMs: 0, tooLong: false };
const cl = (c: Partial<Classification>): Classification => ({ ...base, ...c });

test("issue 22: after this process's 429 the mirror admits no first attempt, while cooldownd's unary calls fail and its stream stays up", async () => {
  // On bfb1358: 5 of 5 admitted from the mirror, for up to the entry's 30 s age.
  const s = await setup();
  const adm = await admitMirrored(s.cd, s.conn);
  s.fake.down = true;
  await s.cd.report(adm, cl({ outcome: Outcome.RateLimited, retryable: true, retryAfterMs: 20_000, httpStatus: 429 }));
  let mirrored = 0;
  for (let i = 0; i < 5; i++) {
    const a = await s.cd.admit([s.conn]);
    if (a.mirrored) {
      mirrored++;
      continue;
    }
    assert.equal(a.local, true, `attempt ${i}: decided in-process`);
    assert.equal(a.decision, Decision.Deny, `attempt ${i}: the in-process breaker is open`);
    assert.ok(a.retryAfterMs > 15_000, `attempt ${i}: for the provider's 20 s (${a.retryAfterMs} ms)`);
  }
  assert.equal(mirrored, 0, "first attempts admitted from the mirror after this process's 429");
  assert.equal(s.cd.degraded(), true);
  assert.equal(s.cd.stats().mirror!.live, true, "the watch stream stayed up throughout");
});

test("issue 22: every report of this process that says the connection is not healthy takes it out at once; a neutral one does not", async (t) => {
  const cases: { name: string; cl: Classification; leave: boolean }[] = [
    { name: "transient failure", cl: cl({ outcome: Outcome.TransientFailure, httpStatus: 503, retryable: true }), leave: true },
    { name: "rate limited", cl: cl({ outcome: Outcome.RateLimited, httpStatus: 429, retryAfterMs: 20_000 }), leave: true },
    { name: "overloaded", cl: cl({ outcome: Outcome.Overloaded, httpStatus: 529 }), leave: true },
    { name: "quota", cl: cl({ outcome: Outcome.QuotaExhausted, httpStatus: 429, errorCode: "insufficient_quota" }), leave: true },
    { name: "auth", cl: cl({ outcome: Outcome.AuthFailure, httpStatus: 401 }), leave: true },
    { name: "success with a server delay hint", cl: cl({ proactiveMs: 30_000 }), leave: true },
    { name: "client error", cl: cl({ outcome: Outcome.ClientError, httpStatus: 400 }), leave: false },
    { name: "canceled", cl: cl({ outcome: Outcome.Canceled, httpStatus: 0 }), leave: false },
  ];
  for (const c of cases) {
    for (const answers of [true, false]) {
      await t.test(`${c.name}/${answers ? "cooldownd takes the report" : "cooldownd does not answer"}`, async () => {
        const s = await setup({ degradeAfter: 100 });
        const adm = await admitMirrored(s.cd, s.conn);
        s.fake.down = !answers;
        await s.cd.report(adm, c.cl);
        const before = s.fake.admits;
        const a = await s.cd.admit([s.conn]);
        if (!c.leave) {
          assert.equal(a.mirrored, true, "a neutral report leaves the connection in the mirror");
          return;
        }
        assert.notEqual(a.mirrored, true, "out of the mirror at once");
        assert.equal(s.fake.admits, before + 1, "asked cooldownd");
        if (!answers) return;
        await s.cd.report(a, cl({}));
        assert.equal((await s.cd.admit([s.conn])).mirrored, true, "cooldownd answered closed at a revision at least as new: back in the mirror");
      });
    }
  }
});

test("issue 22: cooldownd's answer to a report, not closed or at a newer revision, takes the connection out until it says closed again", async (t) => {
  const cases = [
    { name: "open", state: WireState.OPEN, bump: 1n },
    { name: "half-open", state: WireState.HALF_OPEN, bump: 2n },
    { name: "closed at a newer revision", state: WireState.CLOSED, bump: 3n },
  ];
  for (const c of cases) {
    await t.test(c.name, async () => {
      const s = await setup();
      const adm = await admitMirrored(s.cd, s.conn);
      s.fake.answerReport = () => ({ state: c.state, revision: adm.revision + c.bump });
      // A batch of successes: its answer is the only word of the change (no event).
      await s.cd.report(adm, cl({}));
      await s.cd.flush({ signal: AbortSignal.timeout(10_000) });
      assert.notEqual((await s.cd.admit([s.conn])).mirrored, true, "cooldownd's answer took it out of the mirror");
      s.fake.answerReport = () => ({});
      const rev = adm.revision + c.bump + 1n;
      s.fake.emit(create(WatchConnectionsResponseSchema, {
        connection: create(ConnectionStateSchema, { connection: { id: s.conn.id }, state: WireState.CLOSED, revision: rev, fleet: create(FleetCountsSchema, {}) }),
      }));
      for (let i = 0; i < 400 && s.cd.stats().mirror!.mirrored === 0; i++) await new Promise((r) => setTimeout(r, 5));
      const a = await s.cd.admit([s.conn]);
      assert.equal(a.mirrored, true, "an event closed at a newer revision brings it back");
      assert.equal(a.revision, rev);
    });
  }
});

test("issue 22: while the client is degraded every call is decided in-process, a mirrored connection's too", async () => {
  const s = await setup();
  await admitMirrored(s.cd, s.conn);
  s.fake.down = true;
  for (let i = 0; i < 3; i++) await s.cd.admit([s.other]);
  assert.equal(s.cd.degraded(), true);
  assert.equal(s.cd.stats().mirror!.live, true, "the watch stream stayed up");
  for (let i = 0; i < 3; i++) {
    const a = await s.cd.admit([s.conn]);
    assert.notEqual(a.mirrored, true, `call ${i} while degraded: not from the mirror`);
    assert.equal(a.local, true, `call ${i}: decided in-process`);
  }
  assert.equal(s.cd.stats().mirror!.mirrored, 0, "degrading empties the mirror");
});

test("the mirror's watch loop keeps one abort listener on the close signal, however many times it reconnects", async (t) => {
  // On bfb1358 each backoff wait added one and never removed it: about 720
  // an hour during an outage, MaxListenersExceededWarning after the 11th.
  t.mock.timers.enable({ apis: ["setTimeout"] });
  const closed = new AbortController();
  let streams = 0;
  const rpc = {
    watchConnections: () => {
      streams++;
      return { [Symbol.asyncIterator]: () => ({ next: () => Promise.reject(new ConnectError("down", Code.Unavailable)) }) };
    },
  } as unknown as RpcClient<typeof CooldownService>;
  const m = new Mirror({
    now: () => 0, log: silentLogger, closed: closed.signal, rpc: () => rpc, rejected: () => false,
    sendBatch: async () => {}, sendBatches: async () => true,
  }, 3_600_000);
  m.start();
  // The stream opens at cooldownd's first answer to an Admit.
  m.learn({ conn: new Conn(new Uint8Array(32), "x"), decision: Decision.Deny, revision: 0n }, WireState.OPEN, 0, m.ticket(), 0);
  let most = 0;
  for (let i = 0; i < 100; i++) {
    await new Promise((r) => setImmediate(r));
    most = Math.max(most, getEventListeners(closed.signal, "abort").length);
    t.mock.timers.tick(QueueBackoffCapMs);
  }
  assert.ok(streams >= 90, `the loop reconnected ${streams} times`);
  assert.ok(most <= 1, `at most one listener on the close signal, saw ${most}`);
  closed.abort();
  await m.stop();
  assert.equal(getEventListeners(closed.signal, "abort").length, 0, "none once closed");
});

/** One step of testdata/mirror.json (its comment describes them). */
interface TraceStep {
  do: string; conn?: string; want?: string; retry?: boolean; ticket?: string; decision?: string; state?: string;
  revision?: number; throttle?: number; shadowed?: boolean; override?: boolean; outcome?: string;
  retry_after_ms?: number; proactive_ms?: number; ms?: number;
}

const traceStates: Record<string, WireState> = { closed: WireState.CLOSED, open: WireState.OPEN, half_open: WireState.HALF_OPEN };
const traceDecisions: Record<string, Decision> = { allow: Decision.Allow, allow_probe: Decision.AllowProbe, deny: Decision.Deny };
const traceOutcome = (name: string): Outcome => {
  for (const o of Object.values(Outcome)) if (outcomeName(o) === name) return o;
  throw new Error(`unknown outcome ${name}`);
};

// The mirror's rules, the same file the Go client replays (client/mirror_trace_test.go).
test("the mirror's rules: testdata/mirror.json", async (t) => {
  const trace = JSON.parse(readFileSync(join(repoRoot, "testdata", "mirror.json"), "utf8")) as { cases: { name: string; steps: TraceStep[] }[] };
  assert.ok(trace.cases.length > 0);
  for (const tc of trace.cases) {
    await t.test(tc.name, () => {
      const m = new Mirror({
        now: () => 0, log: silentLogger, closed: new AbortController().signal, rpc: () => { throw new Error("no stream here"); },
        rejected: () => false, sendBatch: async () => {}, sendBatches: async () => true,
      }, 3_600_000);
      let now = 1_700_000_000_000;
      let degraded = false;
      const tickets = new Map<string, MirrorTicket>();
      const conns = new Map<string, Conn>();
      const connOf = (name = "a"): Conn => {
        let c = conns.get(name);
        if (!c) {
          const id = new Uint8Array(32);
          id[0] = conns.size + 1;
          c = new Conn(id, name);
          conns.set(name, c);
        }
        return c;
      };
      const state = (s = "") => {
        const v = traceStates[s];
        if (v === undefined) throw new Error(`unknown state ${s}`);
        return v;
      };
      tc.steps.forEach((s, i) => {
        const conn = connOf(s.conn);
        const rev = BigInt(s.revision ?? 0);
        switch (s.do) {
          case "live": m.up(); break;
          case "down": m.down(); break;
          case "degrade": degraded = true; m.outage(); break;
          case "recover": degraded = false; break;
          case "advance": now += s.ms ?? 0; break;
          case "admit": {
            const got = m.admit(conn, s.retry ?? false, degraded, now);
            if (s.want === "mirrored") {
              assert.equal(got, rev, `step ${i}: admitted from the mirror under revision ${rev}`);
            } else if (s.want === "sent") {
              assert.equal(got, undefined, `step ${i}: asked of cooldownd`);
              if (s.ticket) tickets.set(s.ticket, m.ticket());
            } else {
              throw new Error(`step ${i}: unknown want ${s.want}`);
            }
            break;
          }
          case "admit_answer": {
            const tk = tickets.get(s.ticket ?? "");
            assert.ok(tk, `step ${i}: ticket ${s.ticket} taken`);
            const decision = traceDecisions[s.decision ?? ""];
            assert.ok(decision !== undefined, `step ${i}: decision ${s.decision}`);
            m.learn({ conn, decision, revision: rev, shadowReason: s.shadowed ? DenyReason.Throttled : DenyReason.None },
              state(s.state), s.throttle ?? 0, tk, now);
            break;
          }
          case "report":
            m.reported(conn, rev, { outcome: traceOutcome(s.outcome ?? ""), retryAfterMs: s.retry_after_ms ?? 0, proactiveMs: s.proactive_ms ?? 0 });
            break;
          case "report_answer":
            m.reportAnswer(conn, { state: state(s.state), revision: rev, throttleProbability: s.throttle ?? 0 });
            break;
          case "event":
            m.event(create(ConnectionStateSchema, {
              connection: { id: conn.id }, state: state(s.state), revision: rev,
              override: s.override ? WireOverride.FORCED_OPEN : WireOverride.UNSPECIFIED,
              fleet: create(FleetCountsSchema, { throttleProbability: s.throttle ?? 0 }),
            }), now);
            break;
          default:
            throw new Error(`step ${i}: unknown step ${s.do}`);
        }
      });
    });
  }
});

// The mirror on by default (issue 25 point 2), as the Go client's
// TestMirrorOnByDefault, TestDefaultMirrorAsksCooldowndWhereItMust and
// TestMirrorRefusedWorksWithout.

/** A client on a fake cooldownd with opts, nothing said of the mirror unless opts do. */
function plain(fake: FakeCooldownd, opts: ClientOptions = {}): Client {
  const cd = new Client("http://cooldownd.test", {
    logger: silentLogger, transport: () => fake.transport(), admitTimeoutMs: 5_000, serviceRetryMs: 3_600_000, ...opts,
  });
  clients.push(cd);
  return cd;
}

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 400 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
  assert.ok(cond(), what);
}

const success: Classification = { outcome: Outcome.Success, retryable: false, retryAfterMs: 0, httpStatus: 200, errorCode: "", proactiveMs: 0, tooLong: false };

test("the mirror is on by default; mirror: false turns it off", async (t) => {
  const calls = 50;
  for (const tc of [
    { name: "default", opts: {}, mirror: true },
    { name: "mirror: false", opts: { mirror: false } as ClientOptions, mirror: false },
  ]) {
    await t.test(tc.name, async () => {
      const fake = new FakeCooldownd();
      const cd = plain(fake, tc.opts);
      const conn = cd.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: `sk-default-${++n}` });
      await new Promise((r) => setTimeout(r, 20));
      assert.equal(fake.watches, 0, "no stream before the first answer");
      const first = await cd.admit([conn]);
      assert.notEqual(first.mirrored, true, "the first call asks cooldownd");
      assert.equal(fake.admits, 1);
      if (tc.mirror) await until(() => cd.stats().mirror!.live, "the stream opens at the first answer");
      fake.admits = 0;
      fake.reports.length = 0;
      for (let i = 0; i < calls; i++) await cd.report(await cd.admit([conn]), success);
      if (tc.mirror) {
        assert.equal(fake.admits, 1, "once more under the live stream, then from the mirror");
        assert.equal(cd.stats().mirror!.admits, calls - 1);
        assert.equal(fake.reports.length, 0, "the successes wait for their batch");
        await cd.flush();
        assert.deepEqual(fake.reports.map((r) => r.count), [calls], "one batch, every success counted");
        assert.equal(fake.watches, 1);
      } else {
        assert.equal(fake.admits, calls);
        assert.equal(fake.reports.length, calls);
        assert.equal(cd.stats().mirror, undefined);
        assert.equal(fake.watches, 0, "no stream without the mirror");
      }
    });
  }
});

test("with the default mirror a retry and the first call after this process's failure ask cooldownd; a failure is reported at once", async () => {
  const fake = new FakeCooldownd();
  const cd = plain(fake);
  await cd.admit([cd.connection({ provider: "openai", endpoint: "https://warm-up.test", credential: `sk-warm-up-${++n}` })]);
  await until(() => cd.stats().mirror!.live, "the watch stream is up");
  fake.admits = 0;
  const conn = cd.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: `sk-default-${++n}` });
  assert.notEqual((await cd.admit([conn])).mirrored, true, "the first call to a connection asks cooldownd");
  const adm = await cd.admit([conn]);
  assert.equal(adm.mirrored, true);
  assert.equal(fake.admits, 1);
  const retry = await cd.admit([conn], { sent: [conn] });
  assert.notEqual(retry.mirrored, true, "a retry is cooldownd's to admit");
  assert.equal(fake.admits, 2);
  await cd.report(adm, { ...success, outcome: Outcome.TransientFailure, retryable: true, httpStatus: 500 });
  assert.equal(fake.reports.length, 1, "a failure is reported at once");
  assert.equal(fake.reports[0]!.outcome, Outcome.TransientFailure);
  assert.notEqual((await cd.admit([conn])).mirrored, true, "after its own failure the process asks cooldownd");
  assert.equal(fake.admits, 3);
});

test("a cooldownd that refuses the watch leaves the default client working as without the mirror", async (t) => {
  for (const tc of [
    { name: "token may not watch", err: new ConnectError("WatchConnections needs a token of role viewer", Code.PermissionDenied) },
    { name: "cooldownd without the watch", err: new ConnectError("not implemented", Code.Unimplemented) },
  ]) {
    await t.test(tc.name, async () => {
      const fake = new FakeCooldownd();
      fake.watchError = tc.err;
      const warns: string[] = [];
      const cd = plain(fake, { logger: { ...silentLogger, warn: (msg: string) => { warns.push(msg); } } });
      const conn = cd.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: `sk-refused-${++n}` });
      await cd.admit([conn]);
      await until(() => cd.stats().mirror!.refused > 0, "the stream was asked for and refused");
      fake.admits = 0;
      fake.reports.length = 0;
      const calls = 20;
      for (let i = 0; i < calls; i++) {
        const r = await cd.do(conn, async () => new Response("ok", { status: 200 }));
        assert.equal(r.status, 200, "a refused stream never fails a call");
      }
      assert.equal(fake.admits, calls, "every call asks cooldownd");
      assert.equal(fake.reports.length, calls, "every success is reported at once, before any flush");
      for (const r of fake.reports) assert.ok(r.count <= 1, "no batch: such a cooldownd would count one as one success");
      const st = cd.stats().mirror!;
      assert.equal(st.live, false);
      assert.equal(st.admits, 0);
      assert.equal(st.batched, 0);
      assert.equal(st.refused, 1, "asked for again only after about 30 s");
      assert.equal(fake.watches, 1);
      assert.equal(warns.filter((w) => w.includes("refused the mirror's watch stream")).length, 1, "logged once");
    });
  }
});

/** One case of testdata/report_order.json (its comment describes them). */
interface OrderCase {
  name: string;
  reports: { conn: string; outcome: string; status?: number; proactive_ms?: number }[];
  sent: Record<string, string[]>;
  flushed: Record<string, string[]>;
}

/** The report requests, per connection name, each its outcome with ×count for a batch. */
function wireOrder(names: Map<string, string>, reqs: ReportRequest[]): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const r of reqs) {
    const name = names.get(Buffer.from(r.connection!.id).toString("hex"));
    assert.ok(name, "a report of an unknown connection");
    (out[name] ??= []).push(outcomeName(r.outcome as number as Outcome) + (r.count > 0 ? `×${r.count}` : ""));
  }
  return out;
}

// Decision 0061's rule, the same file the Go client replays (client/mirror_order_test.go):
// a report that goes at once first sends the batched successes of its connection.
test("a report sent at once goes after its connection's batch: testdata/report_order.json", async (t) => {
  const trace = JSON.parse(readFileSync(join(repoRoot, "testdata", "report_order.json"), "utf8")) as { cases: OrderCase[] };
  assert.ok(trace.cases.length > 0);
  for (const tc of trace.cases) {
    await t.test(tc.name, async () => {
      const s = await setup();
      const conns: Record<string, Conn> = { a: s.conn, b: s.other };
      const names = new Map(Object.entries(conns).map(([n, c]) => [c.idHex, n]));
      for (const [i, r] of tc.reports.entries()) {
        const conn = conns[r.conn];
        assert.ok(conn, `report ${i}: conn ${r.conn}`);
        const a = await s.cd.admit([conn]);
        assert.equal(a.decision, Decision.Allow, `report ${i}`);
        await s.cd.report(a, cl({ outcome: traceOutcome(r.outcome), httpStatus: r.status ?? 200, proactiveMs: r.proactive_ms ?? 0 }));
      }
      const sent = [...s.fake.reports];
      await s.cd.flush();
      const flushed = s.fake.reports.slice(sent.length);
      assert.deepEqual(wireOrder(names, sent), tc.sent, "before the flush");
      assert.deepEqual(wireOrder(names, flushed), tc.flushed, "at the flush");
    });
  }
});

/** Sends the report queue alone until it is empty, as its sender does once cooldownd is back (the mirror's flush is an hour away). */
async function drainQueue(cd: Client): Promise<void> {
  const inner = cd as unknown as { queue: { kick(): boolean }; startSender(): void };
  for (let i = 0; i < 4000 && cd.stats().reports.len > 0; i++) {
    if (inner.queue.kick()) inner.startSender();
    await new Promise((r) => setTimeout(r, 5));
  }
  assert.equal(cd.stats().reports.len, 0, "the queue drains");
}

for (const local of [false, true]) {
  test(`a degraded client queues the batched successes ahead of a failure (${local ? "admitted in-process" : "admitted by cooldownd"}): decision 0061`, async () => {
    const s = await setup({ degradeAfter: 1 });
    let adm = await s.cd.admit([s.conn]);
    await s.cd.report(adm, cl({}));
    if (!local) adm = await s.cd.admit([s.conn]);
    s.fake.down = true;
    const o = await s.cd.admit([s.other]);
    await s.cd.report(o, cl({ outcome: Outcome.TransientFailure, httpStatus: 503 }));
    assert.equal(s.cd.stats().degraded, true);
    if (local) {
      adm = await s.cd.admit([s.conn]);
      assert.equal(adm.local, true, "decided in-process");
    }
    const before = s.fake.reports.length;
    await s.cd.report(adm, cl({ outcome: Outcome.TransientFailure, httpStatus: 503 }));
    s.fake.down = false;
    await drainQueue(s.cd);
    await s.cd.flush();
    const names = new Map([[s.conn.idHex, "a"], [s.other.idHex, "b"]]);
    const got = (wireOrder(names, s.fake.reports.slice(before)).a ?? []).filter((x, i, xs) => i === 0 || xs[i - 1] !== x);
    assert.deepEqual(got, ["success×1", "transient_failure"], "the batch, then the failure");
  });
}
