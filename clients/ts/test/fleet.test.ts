// The client's side of the fleet rules (decision 0034), against a scripted
// cooldownd in process (Connect's router transport): per-candidate retry
// flags, the reporter id on every report, RETRY_BUDGET and THROTTLED never
// waited for, shadow answers, the in-process fallback's attempts, the last
// word of a throttled call, and the mirror's retries and throttles.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createRouterTransport } from "@connectrpc/connect";

import { Client, type Admission, type ClientOptions } from "../src/client.js";
import { Decision, DenyReason, Outcome } from "../src/breaker.js";
import { classify } from "../src/classify.js";
import { DeniedError } from "../src/errors.js";
import { LastWords } from "../src/lastword.js";
import { silentLogger } from "../src/log.js";
import type { Conn } from "../src/conn.js";
import {
  AdmitResponseSchema, CandidateDecisionSchema, ConnectionStateSchema, CooldownService, FleetCountsSchema, ReportResponseSchema,
  DenyReason as WireDenyReason, State as WireState, WatchConnectionsResponseSchema,
  type AdmitRequest, type AdmitResponse, type ReportRequest, type WatchConnectionsResponse,
} from "../src/gen/v1/cooldown_pb.js";

type AdmitAnswer = (req: AdmitRequest) => AdmitResponse;

/** A cooldownd that answers each Admit with the next scripted answer (the last repeats) and records every request. */
class FakeCooldownd {
  readonly admits: AdmitRequest[] = [];
  readonly reports: ReportRequest[] = [];
  admitScript: AdmitAnswer[] = [allow(0)];
  reportThrottle = 0;
  /** The state and shadow mark every Report answer carries. */
  reportState = WireState.CLOSED;
  reportShadow = false;
  down = false;
  private events: ((m: WatchConnectionsResponse) => void) | undefined;
  watching: Promise<void>;
  private ready!: () => void;

  constructor() {
    this.watching = new Promise((r) => { this.ready = r; });
  }

  transport() {
    return createRouterTransport(({ service }) => {
      service(CooldownService, {
        admit: (req) => {
          if (this.down) throw new ConnectError("down", Code.Unavailable);
          this.admits.push(req);
          const next = this.admitScript.length > 1 ? this.admitScript.shift()! : this.admitScript[0]!;
          return next(req);
        },
        report: (req) => {
          if (this.down) throw new ConnectError("down", Code.Unavailable);
          this.reports.push(req);
          return create(ReportResponseSchema, { revision: req.revision, state: this.reportState, throttleProbability: this.reportThrottle,
            shadow: this.reportShadow });
        },
        extendLease: () => { throw new ConnectError("no", Code.Unimplemented); },
        getConnection: () => { throw new ConnectError("no", Code.Unimplemented); },
        listConnections: () => { throw new ConnectError("no", Code.Unimplemented); },
        watchConnections: (_req, ctx) => this.watch(ctx.signal),
      });
    });
  }

  /** Sends one event to the watch stream. */
  emit(m: WatchConnectionsResponse): void { this.events?.(m); }

  private async *watch(signal: AbortSignal): AsyncIterable<WatchConnectionsResponse> {
    const queue: WatchConnectionsResponse[] = [create(WatchConnectionsResponseSchema, {})]; // the heartbeat: live
    let wake: (() => void) | undefined;
    this.events = (m) => { queue.push(m); wake?.(); };
    signal.addEventListener("abort", () => wake?.(), { once: true });
    while (!signal.aborted) {
      while (queue.length > 0) yield queue.shift()!;
      this.ready();
      await new Promise<void>((r) => { wake = r; });
    }
  }
}

/** The wire's enum value of a deny reason (the numbers are the same). */
const wire = (r: DenyReason) => r as number as WireDenyReason;

function allow(index: number, extra: MessageInitShape<typeof AdmitResponseSchema> = {}): AdmitAnswer {
  return (req) => create(AdmitResponseSchema, {
    decision: Decision.Allow, candidateIndex: index, revision: 7n, state: WireState.CLOSED,
    candidates: req.candidates.slice(0, index + 1).map((_, i) => create(CandidateDecisionSchema, i === index
      ? { decision: Decision.Allow } : { decision: Decision.Deny, denyReason: wire(DenyReason.Cooldown), retryAfter: durationFromMs(5000) })),
    ...extra,
  });
}

/** Every candidate denied for reason (with waitMs), the answer naming the first. */
function deny(reason: DenyReason, waitMs: number): AdmitAnswer {
  return (req) => create(AdmitResponseSchema, {
    decision: Decision.Deny, candidateIndex: 0, revision: 7n, denyReason: wire(reason), retryAfter: durationFromMs(waitMs),
    state: WireState.CLOSED,
    candidates: req.candidates.map(() => create(CandidateDecisionSchema, { decision: Decision.Deny, denyReason: wire(reason), retryAfter: durationFromMs(waitMs) })),
  });
}

const clients: Client[] = [];
after(async () => {
  for (const c of clients) await c.close();
});

interface Setup { cd: Client; fake: FakeCooldownd; sleeps: number[]; a: Conn; b: Conn; }
let n = 0;
function setup(opts: ClientOptions = {}): Setup {
  const fake = new FakeCooldownd();
  const sleeps: number[] = [];
  // Without the mirror unless a test asks for it: these tests count the
  // reports cooldownd gets, one per call.
  const cd = new Client("http://cooldownd.test", {
    logger: silentLogger, transport: () => fake.transport(), admitTimeoutMs: 5_000,
    sleep: async (ms) => { sleeps.push(ms); }, mirror: false, ...opts,
  });
  clients.push(cd);
  const conn = (scope: string) => cd.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: `sk-fleet-${++n}`, scope });
  return { cd, fake, sleeps, a: conn("a"), b: conn("b") };
}

const ok = () => new Response("{}", { status: 200 });
const unavailable = () => new Response("{}", { status: 503 });
const success = () => classify({}, { status: 200, headers: new Headers() }, undefined, undefined);
const transient = () => classify({}, { status: 503, headers: new Headers() }, undefined, undefined);

test("fleet: a shadow policy's open is no switch: the guard backs off before retrying the primary", async (t) => {
  for (const shadow of [false, true]) {
    await t.test(`shadow=${shadow}`, async () => {
      const { cd, fake, sleeps, a, b } = setup({ maxRetries: 2 });
      fake.admitScript = [allow(0)]; // the primary is allowed every time (shadow)
      fake.reportState = WireState.OPEN;
      fake.reportShadow = shadow;
      const calls = [unavailable, unavailable, ok];
      await cd.doFallback([a, b], async () => calls.shift()!());
      if (shadow) {
        // Computed, not enforced: each retry waits its backoff, as without cooldownd.
        assert.equal(sleeps.length, 2);
        for (const ms of sleeps) assert.ok(ms > 0);
      } else {
        // Enforced: the next admit picks another candidate, at once.
        assert.deepEqual(sleeps, []);
      }
    });
  }
});

test("fleet: a call is a retry only on a connection it was already sent to", async (t) => {
  await t.test("do: the second attempt on the same connection is a retry, its report says so", async () => {
    const { cd, fake, a } = setup();
    const calls = [unavailable, ok];
    await cd.do(a, async () => calls.shift()!());
    assert.deepEqual(fake.admits.map((r) => r.retry), [[], [true]]);
    assert.deepEqual(fake.reports.map((r) => r.retry), [false, true]);
  });
  await t.test("doFallback: after a failure on the primary, the fallback's first call is a first attempt", async () => {
    const { cd, fake, a, b } = setup();
    fake.admitScript = [allow(0), allow(1)];
    const calls = [unavailable, ok];
    await cd.doFallback([a, b], async () => calls.shift()!());
    assert.deepEqual(fake.admits.map((r) => r.retry), [[], [true, false]]);
    assert.deepEqual(fake.reports.map((r) => r.retry), [false, false]);
  });
  await t.test("admit by hand: sent marks the candidates, admission.retry the chosen one", async () => {
    const { cd, fake, a, b } = setup();
    fake.admitScript = [allow(1), allow(0)];
    const x = await cd.admit([a, b], { sent: [b] });
    assert.equal(x.retry, true);
    const y = await cd.admit([a, b], { sent: [b] });
    assert.equal(y.retry, false);
    const z = await cd.admit([a], { sent: [b] }); // a conn that is no candidate: no retry anywhere
    assert.equal(z.retry, false);
    assert.deepEqual(fake.admits.map((r) => r.retry), [[false, true], [false, true], []]);
  });
});

test("fleet: every report carries the client's reporter id", async (t) => {
  await t.test("a random one per client by default", async () => {
    const s1 = setup(), s2 = setup();
    assert.match(s1.cd.reporter, /^[0-9a-f]{16}$/);
    assert.notEqual(s1.cd.reporter, s2.cd.reporter);
    await s1.cd.report(await s1.cd.admit([s1.a]), transient());
    assert.equal(s1.fake.reports[0]!.reporter, s1.cd.reporter);
  });
  await t.test("the option's, on direct, queued and local reports", async () => {
    const { cd, fake, a } = setup({ reporter: "pod-7.web_1" });
    await cd.report(await cd.admit([a]), success());
    fake.down = true; // the next is decided in-process; its failure is queued for the fleet
    const local = await cd.admit([a]);
    assert.equal(local.local, true);
    await cd.report(local, transient());
    fake.down = false;
    await cd.flush({ signal: AbortSignal.timeout(10_000) });
    assert.deepEqual(fake.reports.map((r) => [r.reporter, r.outcome]), [["pod-7.web_1", Outcome.Success], ["pod-7.web_1", Outcome.TransientFailure]]);
  });
  await t.test("ids outside [A-Za-z0-9._-]{1,64} are refused", () => {
    for (const bad of ["", "a b", "pod/1", "ü", "x".repeat(65), "tab\t"]) {
      assert.throws(() => new Client("http://x.test", { reporter: bad }), /reporter id must be 1 to 64 characters/, JSON.stringify(bad));
    }
    const c = new Client("http://x.test", { reporter: "A".repeat(64) });
    assert.equal(c.reporter, "A".repeat(64));
    void c.close();
  });
});

test("fleet: retry-budget and throttle denials are never waited for", async (t) => {
  const cases: { name: string; reason: DenyReason; fallback: boolean }[] = [
    { name: "a retry over budget, one candidate: fail at once", reason: DenyReason.RetryBudget, fallback: false },
    { name: "a throttled call, one candidate: fail at once", reason: DenyReason.Throttled, fallback: false },
    { name: "a retry over budget: fall back to the next candidate at once", reason: DenyReason.RetryBudget, fallback: true },
    { name: "a throttled call: fall back to the next candidate at once", reason: DenyReason.Throttled, fallback: true },
  ];
  for (const c of cases) {
    await t.test(c.name, async () => {
      const { cd, fake, sleeps, a, b } = setup({ maxWaitMs: 60_000 });
      fake.admitScript = [deny(c.reason, 900), allow(0)];
      let called = 0;
      const call = async () => { called++; return ok(); };
      if (!c.fallback) {
        const err = await cd.do(a, call).catch((e: unknown) => e);
        assert.ok(err instanceof DeniedError, String(err));
        assert.equal(err.reason, c.reason);
        assert.equal(err.retryAfterMs, 900);
        assert.equal(called, 0);
        assert.equal(fake.admits.length, 1);
      } else {
        await cd.doFallback([a, b], call);
        assert.equal(called, 1);
        assert.equal(fake.admits.length, 2);
        assert.equal(fake.admits[1]!.candidates.length, 1, "the denied candidate is dropped");
        assert.deepEqual(fake.admits[1]!.candidates[0]!.id, b.id);
      }
      assert.deepEqual(sleeps, [], "no wait");
    });
  }
  await t.test("a cooldown is still waited for (the control)", async () => {
    const { cd, fake, sleeps, a } = setup({ maxWaitMs: 60_000 });
    fake.admitScript = [deny(DenyReason.Cooldown, 900), allow(0)];
    await cd.do(a, async () => ok());
    assert.equal(sleeps.length, 1);
    assert.ok(sleeps[0]! >= 900);
  });
});

test("fleet: shadow answers and the throttle probability are on the admission", async () => {
  const { cd, fake, a } = setup();
  fake.admitScript = [
    allow(0, { shadowDenyReason: wire(DenyReason.Open), shadowRetryAfter: durationFromMs(4_500), throttleProbability: 0.25 }),
    (req) => ({ ...deny(DenyReason.Cooldown, 100)(req), shadowDenyReason: wire(DenyReason.Open) }),
    allow(0),
  ];
  const x = await cd.admit([a]);
  assert.equal(x.decision, Decision.Allow);
  assert.equal(x.shadowReason, DenyReason.Open);
  assert.equal(x.shadowRetryAfterMs, 4_500);
  assert.equal(x.throttleProbability, 0.25);
  const y = await cd.admit([a]); // a real denial is not shadowed
  assert.equal(y.decision, Decision.Deny);
  assert.equal(y.shadowReason, DenyReason.None);
  const z = await cd.admit([a]);
  assert.equal(z.shadowReason, DenyReason.None);
  assert.equal(z.shadowRetryAfterMs, 0);
});

test("fleet: the in-process fallback runs the fleet rules on this process's calls", async (t) => {
  const realRandom = Math.random;
  t.after(() => { Math.random = realRandom; });
  await t.test("a retry is charged to the local budget; a first attempt is not", async () => {
    const { cd, fake, a } = setup({ localPolicy: { retryBudget: 1, retryBudgetMin: 0 } });
    fake.down = true;
    const retry = await cd.admit([a], { sent: [a] });
    assert.equal(retry.local, true);
    assert.equal(retry.decision, Decision.Deny);
    assert.equal(retry.reason, DenyReason.RetryBudget);
    assert.equal(retry.retry, true);
    const first = await cd.admit([a]);
    assert.equal(first.decision, Decision.Allow);
    await cd.report(first, success()); // one first attempt: room for one retry (ratio 1)
    assert.equal((await cd.admit([a], { sent: [a] })).decision, Decision.Allow);
  });
  await t.test("the throttle draws per call", async () => {
    const { cd, fake, a } = setup({ localPolicy: { throttleK: 1, consecutiveFailures: 0, failureRate: 0 } });
    fake.down = true;
    for (let i = 0; i < 4; i++) await cd.report(await cd.admit([a]), transient()); // requests 4, accepts 0: p = 4/5
    Math.random = () => 0.7;
    const low = await cd.admit([a]);
    Math.random = () => 0.95;
    const high = await cd.admit([a]);
    Math.random = realRandom;
    assert.equal(low.decision, Decision.Deny);
    assert.equal(low.reason, DenyReason.Throttled);
    assert.ok(low.throttleProbability! > 0.7);
    assert.equal(high.decision, Decision.Allow);
  });
  await t.test("shadow: the local breaker allows what it would deny and says why", async () => {
    const { cd, fake, a } = setup({ localPolicy: { shadow: true, consecutiveFailures: 1, failureRate: 0, jitter: 0 } });
    fake.down = true;
    await cd.report(await cd.admit([a]), transient());
    const x = await cd.admit([a]);
    assert.equal(x.decision, Decision.Allow);
    assert.equal(x.shadowReason, DenyReason.Open);
    assert.ok(x.shadowRetryAfterMs! > 0);
  });
  await t.test("a trip quorum does not hold back the local breaker (one process is one reporter)", async () => {
    const { cd, fake, a } = setup({ localPolicy: { tripQuorum: 3, consecutiveFailures: 2, failureRate: 0 } });
    fake.down = true;
    for (let i = 0; i < 2; i++) await cd.report(await cd.admit([a]), transient());
    const x = await cd.admit([a]);
    assert.equal(x.decision, Decision.Deny);
    assert.equal(x.reason, DenyReason.Open);
  });
  await t.test("the local policy's new knobs are validated", () => {
    assert.throws(() => new Client("http://x.test", { localPolicy: { throttleK: 0.5 } }), /local policy: throttle_k must be 0 \(off\) or in \[1, 10\]/);
    assert.throws(() => new Client("http://x.test", { localPolicy: { tripQuorum: 17 } }), /local policy: trip_quorum must be in \[0, 16\]/);
    assert.throws(() => new Client("http://x.test", { localPolicy: { fleetWindowMs: 600_001 } }), /local policy: fleet_window/);
  });
});

test("fleet: one throttled call is not a connection-wide wait for the fallback", async (t) => {
  const cases: { name: string; answer: AdmitAnswer; first: DenyReason | undefined; retry: DenyReason | undefined }[] = [
    { name: "throttled: no word", answer: deny(DenyReason.Throttled, 1_000), first: undefined, retry: undefined },
    { name: "retry budget: retries only", answer: deny(DenyReason.RetryBudget, 20_000), first: undefined, retry: DenyReason.RetryBudget },
    { name: "a cooldown: every call (the control)", answer: deny(DenyReason.Cooldown, 20_000), first: DenyReason.Cooldown, retry: DenyReason.Cooldown },
  ];
  for (const c of cases) {
    await t.test(c.name, async () => {
      const { cd, fake, a } = setup();
      fake.admitScript = [c.answer];
      await cd.admit([a], { sent: [a] });
      fake.down = true; // cooldownd stops answering: its last word decides
      const first = await cd.admit([a]);
      const retry = await cd.admit([a], { sent: [a] });
      assert.equal(first.local && retry.local, true);
      assert.equal(first.decision === Decision.Deny ? first.reason : undefined, c.first, "first attempt");
      assert.equal(retry.decision === Decision.Deny ? retry.reason : undefined, c.retry, "retry");
    });
  }
});

test("lastword: the words of the fleet rules", () => {
  const w = new LastWords(8);
  const d = (decision: Decision, denyReason: DenyReason, ms: number) => ({ decision, denyReason, retryAfter: durationFromMs(ms) });
  w.learn(1_000, [d(Decision.Deny, DenyReason.Cooldown, 5_000)], ["x"]);
  w.learn(2_000, [d(Decision.Deny, DenyReason.Throttled, 1_000)], ["x"]); // the breaker would admit: the cooldown is spent
  assert.equal(w.get("x", 2_001), undefined);
  w.learn(3_000, [d(Decision.Deny, DenyReason.RetryBudget, 4_000)], ["x"], [true]);
  assert.equal(w.get("x", 3_500), undefined);
  assert.deepEqual(w.get("x", 3_500, true), { until: 7_000, reason: DenyReason.RetryBudget });
  w.learn(4_000, [d(Decision.Allow, DenyReason.None, 0)], ["x"], [false]); // a first attempt's admission keeps the retry word
  assert.deepEqual(w.get("x", 4_500, true), { until: 7_000, reason: DenyReason.RetryBudget });
  w.learn(5_000, [d(Decision.Allow, DenyReason.None, 0)], ["x"], [true]); // a retry's admission: the budget had room
  assert.equal(w.get("x", 5_001, true), undefined);
  w.learn(6_000, [d(Decision.Deny, DenyReason.RetryBudget, 1_000)], ["x"], [true]);
  w.learn(6_000, [d(Decision.Deny, DenyReason.Open, 3_000)], ["x"]);
  assert.deepEqual(w.get("x", 6_500), { until: 9_000, reason: DenyReason.Open });
  assert.deepEqual(w.get("x", 6_500, true), { until: 9_000, reason: DenyReason.Open });
  assert.equal(w.get("x", 9_000, true), undefined);
});

test("fleet: the mirror admits no retry and no throttled connection", async (t) => {
  const mirrored = async (cd: Client, conn: Conn, opts: { sent?: Conn[] } = {}): Promise<Admission> => cd.admit([conn], opts);
  const live = async (s: Setup) => {
    await s.cd.admit([s.cd.connection({ provider: "openai", endpoint: "https://warm-up.test", credential: "sk-warm-up" })]); // the stream opens at the first answer
    await s.fake.watching;
    for (let i = 0; i < 100 && !s.cd.stats().mirror!.live; i++) await new Promise((r) => setTimeout(r, 5));
    assert.ok(s.cd.stats().mirror!.live);
    s.fake.admits.length = 0;
  };
  await t.test("a retry goes to cooldownd; a first attempt is mirrored", async () => {
    const s = setup({ mirror: { intervalMs: 60_000 } });
    await live(s);
    await mirrored(s.cd, s.a); // cooldownd: closed, allowed, no throttle
    assert.equal((await mirrored(s.cd, s.a)).mirrored, true);
    const r = await mirrored(s.cd, s.a, { sent: [s.a] });
    assert.notEqual(r.mirrored, true);
    assert.equal(r.retry, true);
    assert.equal(s.fake.admits.length, 2);
  });
  await t.test("an Admit answer with a throttle above 0 is not mirrored", async () => {
    const s = setup({ mirror: { intervalMs: 60_000 } });
    await live(s);
    s.fake.admitScript = [allow(0, { throttleProbability: 0.1 }), allow(0)];
    await mirrored(s.cd, s.a);
    assert.notEqual((await mirrored(s.cd, s.a)).mirrored, true, "throttled: not mirrored");
    assert.equal((await mirrored(s.cd, s.a)).mirrored, true, "0 again: mirrored");
  });
  await t.test("a shadowed allow is not mirrored", async () => {
    const s = setup({ mirror: { intervalMs: 60_000 } });
    await live(s);
    s.fake.admitScript = [allow(0, { shadowDenyReason: wire(DenyReason.Throttled) }), allow(0)];
    await mirrored(s.cd, s.a);
    assert.notEqual((await mirrored(s.cd, s.a)).mirrored, true);
  });
  await t.test("a report answer or an event with a throttle above 0 ends the local admits", async () => {
    const s = setup({ mirror: { intervalMs: 60_000 } });
    await live(s);
    await mirrored(s.cd, s.a);
    const m = await mirrored(s.cd, s.a);
    assert.equal(m.mirrored, true);
    s.fake.reportThrottle = 0.5;
    await s.cd.report(await mirrored(s.cd, s.b), transient()); // b's answer says nothing of a
    assert.equal((await mirrored(s.cd, s.a)).mirrored, true);
    await s.cd.report(m, transient()); // a failure goes to cooldownd at once; its answer shows the throttle
    assert.notEqual((await mirrored(s.cd, s.a)).mirrored, true);
    s.fake.reportThrottle = 0;
    assert.equal((await mirrored(s.cd, s.a)).mirrored, true, "the next Admit answer with 0 mirrors it again");
    const before = s.fake.admits.length;
    s.fake.emit(create(WatchConnectionsResponseSchema, {
      connection: create(ConnectionStateSchema, {
        connection: { id: s.a.id }, state: WireState.CLOSED, revision: 8n, fleet: create(FleetCountsSchema, { throttleProbability: 0.3 }),
      }),
    }));
    for (let i = 0; i < 100; i++) {
      if ((await mirrored(s.cd, s.a)).mirrored !== true) break;
      await new Promise((r) => setTimeout(r, 5));
    }
    assert.ok(s.fake.admits.length > before, "the event ended the mirror's admits");
  });
  await t.test("batched successes keep retries apart", async () => {
    const s = setup({ mirror: { intervalMs: 60_000 } });
    await live(s);
    const first = await mirrored(s.cd, s.a);
    const retry = await mirrored(s.cd, s.a, { sent: [s.a] });
    const again = await mirrored(s.cd, s.a);
    for (const x of [first, retry, again]) await s.cd.report(x, success());
    await s.cd.flush({ signal: AbortSignal.timeout(10_000) });
    const got = s.fake.reports.map((r) => ({ retry: r.retry, count: r.count || 1, reporter: r.reporter })).sort((x, y) => Number(x.retry) - Number(y.retry));
    assert.deepEqual(got, [{ retry: false, count: 2, reporter: s.cd.reporter }, { retry: true, count: 1, reporter: s.cd.reporter }]);
  });
});
