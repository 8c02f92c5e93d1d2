// End to end against a real cooldownd started by the test (embedded
// Redis, a sub-second policy): the wire protocols, the guard with a fake
// provider, fallback lists, proactive cooldowns, refusals, and a Go client
// process sharing one cooldown and one probe with this Node process.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client, allowed, sleep, type Admission, type ClientOptions } from "../src/client.js";
import type { Conn } from "../src/conn.js";
import { Decision, DenyReason, Outcome } from "../src/breaker.js";
import { classify } from "../src/classify.js";
import { DeniedError, GuardError, RejectedError } from "../src/errors.js";
import { silentLogger } from "../src/log.js";
import { fastPolicy, freePort, goBinary, startServer, type Server } from "./helpers.js";
import { FakeProvider, GoClient, json } from "./fakes.js";

let server: Server;
let provider: FakeProvider;
const clients: Client[] = [];
let n = 0;

function newClient(opts: ClientOptions = {}, url = server.url): Client {
  // A generous admit timeout: these tests are about decisions, not timeouts
  // (a loaded CI machine must not turn them into local ones).
  const c = new Client(url, { logger: silentLogger, admitTimeoutMs: 2000, ...opts });
  clients.push(c);
  return c;
}
/** A fresh connection of its own for each test. */
function conn(c: Client, scope = "gpt-4o") {
  return c.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: `sk-e2e-${process.pid}-${++n}`, scope });
}
const ok = (status = 200) => classify({}, { status, headers: new Headers() }, undefined, undefined);
const rateLimited = (retryAfterS: number) => classify({}, { status: 429, headers: new Headers({ "retry-after": String(retryAfterS) }) }, undefined, undefined);
const failure = () => classify({}, { status: 503, headers: new Headers() }, undefined, undefined);

/** The guard's sleeps, recorded; real but at most 1.5 s (the server's cooldowns are sub-second). */
function recordingSleep() {
  const waits: number[] = [];
  return { waits, sleep: async (ms: number, signal?: AbortSignal) => { waits.push(ms); await sleep(Math.min(ms, 1500), signal); } };
}

/** Reports failures until the connection is open (a probe's failure re-opens too). */
async function untilOpen(c: Client, x: Conn): Promise<Admission> {
  for (;;) {
    const a = await c.admit([x]);
    if (a.decision === Decision.Deny && a.reason === DenyReason.Open) return a;
    if (allowed(a)) await c.report(a, failure());
    else await sleep(a.retryAfterMs + 10);
  }
}

/** Waits out denials until a probe lease is granted. */
async function untilProbe(c: Client, x: Conn): Promise<Admission> {
  for (;;) {
    const a = await c.admit([x]);
    if (a.decision === Decision.AllowProbe) return a;
    assert.notEqual(a.decision, Decision.Allow);
    await sleep(a.retryAfterMs + 10);
  }
}

before(async () => {
  server = await startServer(fastPolicy);
  provider = await FakeProvider.start();
  const warm = newClient();
  await warm.report(await warm.admit([conn(warm)]), ok());
});
after(async () => {
  for (const c of clients) await c.close();
  await provider.close();
  await server.stop();
});

describe("wire protocols", () => {
  for (const [name, opts] of [
    ["connect over HTTP/2 (h2c)", { protocol: "connect", httpVersion: "2" }],
    ["connect over HTTP/1.1", { protocol: "connect", httpVersion: "1.1" }],
    ["gRPC", { protocol: "grpc" }],
    ["gRPC-Web", { protocol: "grpc-web", httpVersion: "1.1" }],
  ] as [string, ClientOptions][]) {
    test(`${name}: admit, report a 429, the cooldown is shared`, async () => {
      const a = newClient(opts), b = newClient(opts);
      const c = conn(a);
      const adm = await a.admit([c]);
      assert.equal(adm.decision, Decision.Allow);
      assert.equal(adm.local, false);
      assert.ok(adm.revision >= 0n);
      await a.report(adm, rateLimited(2));
      // Another client (another process would do the same) is denied.
      const d = await b.admit([c]);
      assert.equal(d.decision, Decision.Deny);
      assert.equal(d.reason, DenyReason.Cooldown);
      assert.ok(d.retryAfterMs > 1000 && d.retryAfterMs <= 2000, `retry after ${d.retryAfterMs}`);
      assert.equal(a.stats().localDecisions, 0);
    });
  }
});

describe("the guard", () => {
  test("retries a 503 with backoff, then returns the 2xx with its body unread", async () => {
    const { waits, sleep } = recordingSleep();
    const c = newClient({ sleep, backoffBaseMs: 100, backoffCapMs: 1000 });
    // One failure: the server trips after two (--consecutive-failures 2).
    provider.answer(json(503, { error: { type: "server_error" } }), json(200, { ok: true }));
    const resp = await c.do(conn(c), (ctx) => fetch(provider.url + "/v1/x", { signal: ctx.signal }));
    assert.equal(resp.status, 200);
    assert.deepEqual(await resp.json(), { ok: true });
    assert.equal(provider.requests.length, 2);
    assert.equal(waits.length, 1);
    assert.ok(waits[0]! >= 50 && waits[0]! <= 100, `backoff ${waits[0]}`);
  });

  test("waits at least the provider's Retry-After, and the overload floor", async () => {
    const { waits, sleep } = recordingSleep();
    const c = newClient({ sleep, backoffBaseMs: 10 });
    provider.answer(json(429, {}, { "retry-after-ms": "1200" }), json(529, { type: "error", error: { type: "overloaded_error" } }), json(200, {}));
    const c1 = conn(c);
    const resp = await c.do(c1, (ctx) => fetch(provider.url, { signal: ctx.signal }));
    assert.equal(resp.status, 200);
    // The 429's wait is ≥ 1.2 s; the 529's ≥ 5 s (the denial waits in between are the shared cooldowns).
    assert.ok(waits.some((w) => w >= 1200 && w < 1500), `waits ${waits}`);
    assert.ok(waits.some((w) => w >= 5000), `waits ${waits}`);
  });

  test("a 400 is never retried and comes back as a GuardError with its body", async () => {
    const c = newClient();
    provider.answer(json(400, { error: { type: "invalid_request_error", code: "context_length_exceeded" } })); // without x-should-retry
    const e = await c.do(conn(c), () => fetch(provider.url)).then(() => undefined, (x: unknown) => x);
    assert.ok(e instanceof GuardError);
    assert.equal(e.lastOutcome, Outcome.ClientError);
    assert.equal(e.errorCode, "context_length_exceeded");
    assert.equal(e.attempts, 1);
    assert.equal(((await e.response!.json()) as { error: { code: string } }).error.code, "context_length_exceeded");
    assert.equal(provider.requests.length, 1);
  });

  test("a Retry-After above 30 s is not waited for (TooLong) and denies the next call", async () => {
    const c = newClient({ noWait: true });
    const c1 = conn(c);
    provider.answer(json(429, {}, { "retry-after": "60" }));
    await assert.rejects(c.do(c1, () => fetch(provider.url)), (e: unknown) => e instanceof GuardError && e.tooLong && e.attempts === 1);
    await assert.rejects(c.do(c1, () => fetch(provider.url)), (e: unknown) => e instanceof DeniedError && e.reason === DenyReason.Cooldown && e.retryAfterMs > 50_000);
    assert.equal(provider.requests.length, 1);
  });

  test("the caller's abort is passed through, never retried, and reported", async () => {
    const c = newClient({ backoffBaseMs: 10 });
    const ctl = new AbortController();
    let seen: AbortSignal | undefined;
    provider.answer((_req, res) => { setTimeout(() => { res.writeHead(200).end(); }, 2000); });
    const p = c.do(conn(c), (ctx) => { seen = ctx.signal; return fetch(provider.url, { signal: ctx.signal }); }, { signal: ctl.signal });
    setTimeout(() => ctl.abort(), 100);
    await assert.rejects(p, (e: unknown) => e instanceof GuardError && e.lastOutcome === Outcome.Canceled && e.attempts === 1);
    assert.equal(seen, ctl.signal, "the caller's signal is not replaced");
    assert.equal(provider.requests.length, 1);
  });

  test("a started stream is never replayed", async () => {
    const c = newClient({ backoffBaseMs: 10 });
    provider.answer((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("data: one\n\n");
      setTimeout(() => res.destroy(), 50); // the stream breaks after its headers
    });
    const resp = await c.do(conn(c), () => fetch(provider.url));
    assert.equal(resp.status, 200);
    await assert.rejects(resp.text());
    assert.equal(provider.requests.length, 1);
  });

  test("a refused connection is retried (conn_refused) and the outcome reported", async () => {
    const { sleep } = recordingSleep();
    const c = newClient({ sleep, maxRetries: 1 });
    const closed = `http://127.0.0.1:${await freePort()}/`;
    await assert.rejects(c.do(conn(c), () => fetch(closed)), (e: unknown) =>
      e instanceof GuardError && e.errorCode === "conn_refused" && e.attempts === 2);
  });

  test("a proactive cooldown from rate-limit headers denies the next call before any 429", async () => {
    const c = newClient({ noWait: true });
    const c1 = conn(c);
    provider.answer(json(200, {}, { "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "3s" }));
    assert.equal((await c.do(c1, () => fetch(provider.url))).status, 200);
    await assert.rejects(c.do(c1, () => fetch(provider.url)), (e: unknown) => e instanceof DeniedError && e.reason === DenyReason.Cooldown);
    assert.equal(provider.requests.length, 1);
  });

  test("doFallback moves on after quota and skips the exhausted candidate next time", async () => {
    const c = newClient();
    const primary = conn(c, "gpt-4o"), fallback = conn(c, "gpt-4o-mini");
    provider.answer((req, res, _b) => {
      const quota = req.url === "/gpt-4o";
      res.writeHead(quota ? 429 : 200, { "content-type": "application/json" });
      res.end(quota ? JSON.stringify({ error: { type: "insufficient_quota", code: "insufficient_quota" } }) : "{}");
    });
    const call = (ctx: { conn: typeof primary }) => fetch(provider.url + "/" + (ctx.conn === primary ? "gpt-4o" : "gpt-4o-mini"));
    assert.equal((await c.doFallback([primary, fallback], call)).status, 200);
    assert.deepEqual(provider.requests.map((r) => r.url), ["/gpt-4o", "/gpt-4o-mini"]);
    provider.requests.length = 0;
    assert.equal((await c.doFallback([primary, fallback], call)).status, 200);
    assert.deepEqual(provider.requests.map((r) => r.url), ["/gpt-4o-mini"], "cooldownd skips the exhausted primary");
  });

  test("probes: one lease, others wait probe_in_flight, the probe's success closes", async () => {
    const a = newClient(), b = newClient();
    const c1 = conn(a);
    await untilOpen(a, c1); // --consecutive-failures 2
    const open = await b.admit([c1]);
    assert.equal(open.reason, DenyReason.Open);
    const probe = await untilProbe(a, c1);
    assert.ok(probe.leaseToken !== "" && probe.leaseExpires > Date.now());
    const other = await b.admit([c1]);
    assert.equal(other.reason, DenyReason.ProbeInFlight);
    const until = await a.extendLease(probe, 5000);
    assert.ok(until > Date.now() + 4000);
    await a.report(probe, ok());
    assert.ok(allowed(await b.admit([c1])));
  });
});

describe("refusals are never an outage", () => {
  let authed: Server;
  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), "cooldownd-ts-"));
    const file = join(dir, "tokens.yaml");
    writeFileSync(file, "tokens:\n  - {name: app, tenant: team-a, role: client, token: \"a-long-random-client-token\"}\n");
    authed = await startServer(["--tokens-file", file]);
  });
  after(() => authed.stop());

  test("a bad token is a RejectedError, the provider is never called, whatever the fail mode", async () => {
    for (const failMode of ["open", "closed"] as const) {
      const c = newClient({ token: "wrong", failMode }, authed.url);
      provider.answer(json(200, {}));
      await assert.rejects(c.do(conn(c), () => fetch(provider.url)), (e: unknown) =>
        e instanceof RejectedError && e.op === "admit" && e.code === 16 /* unauthenticated */);
      assert.equal(provider.requests.length, 0);
      assert.equal(c.stats().localDecisions, 0);
      assert.equal(c.degraded(), false);
    }
    const good = newClient({ token: "a-long-random-client-token" }, authed.url);
    assert.ok(allowed(await good.admit([conn(good)])));
  });

  test("a label cooldownd refuses is invalid_argument", async () => {
    const c = newClient();
    const bad = c.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: "sk-other", label: "key sk-proj-abcdefghijklmnop1234" });
    await assert.rejects(c.admit([bad]), (e: unknown) => e instanceof RejectedError && e.code === 3 /* invalid_argument */);
  });
});

describe("a Go client process and this Node process on the same connection", () => {
  const spec = { provider: "OpenAI ", endpoint: "https://API.openai.com/v1/", credential: `sk-cross-${process.pid}`, scope: "gpt-4o" };
  const salt = Buffer.from("000102030405060708090a0b0c0d0e0f", "hex");
  let goc: GoClient;
  before(() => {
    const bin = goBinary("./clients/ts/tools/goclient", "goclient");
    goc = GoClient.start(bin, ["-server", server.url, "-provider", spec.provider, "-endpoint", spec.endpoint, "-scope", spec.scope,
      "-salt", salt.toString("hex")], spec.credential);
  });
  after(() => goc.stop());

  test("they derive the same id, share one cooldown and one probe", async () => {
    const ts = newClient({ salt, noWait: true });
    const c = ts.connection(spec);
    assert.equal((await goc.send({ op: "id" })).id, c.idHex);

    // A cooldown set by Node is obeyed by Go.
    const a = await ts.admit([c]);
    await ts.report(a, rateLimited(1));
    const g1 = await goc.send({ op: "admit" });
    assert.equal(g1.decision, "deny");
    assert.equal(g1.reason, "cooldown");
    assert.equal(g1.local, false);

    // A cooldown set by Go is obeyed by Node.
    await sleep(1050);
    assert.match(String((await goc.send({ op: "admit" })).decision), /^allow/); // a probe: the cooldown ended half-open
    assert.equal((await goc.send({ op: "report", outcome: "rate_limited", retry_after_ms: 1500, http_status: 429 })).ok, true);
    const d = await ts.admit([c]);
    assert.equal(d.decision, Decision.Deny);
    assert.equal(d.reason, DenyReason.Cooldown);
    provider.answer(json(200, {}));
    await assert.rejects(ts.do(c, () => fetch(provider.url)), (e: unknown) => e instanceof DeniedError);
    assert.equal(provider.requests.length, 0, "the Node guard never called the provider");

    // One probe for both: Node trips the breaker, Go holds the probe, Node waits, Go's success closes it.
    const open = await untilOpen(ts, c);
    await sleep(open.retryAfterMs + 20);
    const probe = await goc.send({ op: "admit" });
    assert.equal(probe.decision, "allow_probe");
    assert.equal(probe.lease, true);
    const waiting = await ts.admit([c]);
    assert.equal(waiting.reason, DenyReason.ProbeInFlight);
    assert.equal((await goc.send({ op: "report", outcome: "success", http_status: 200 })).ok, true);
    assert.equal((await ts.admit([c])).decision, Decision.Allow);

    // And the other way round: Node holds the probe, Go is denied probe_in_flight.
    await untilOpen(ts, c);
    const tsProbe = await untilProbe(ts, c);
    const g2 = await goc.send({ op: "do", url: provider.url });
    assert.equal(g2.denied, "probe_in_flight");
    await ts.report(tsProbe, ok());
    assert.equal((await goc.send({ op: "do", url: provider.url })).status, 200);
  });
});

describe("the mirror", () => {
  test("healthy calls are admitted without a round trip and their successes reported in batches", async () => {
    const c = newClient({ mirror: { intervalMs: 100 } });
    const x = conn(c);
    provider.answer(json(200, {}));
    await c.admit([conn(c)]); // the stream opens at cooldownd's first answer to an Admit
    // Wait for the watch stream to be live (its first message, a heartbeat, may take up to 15 s: poll).
    const deadline = Date.now() + 20_000;
    while (!c.stats().mirror!.live && Date.now() < deadline) await sleep(20);
    assert.ok(c.stats().mirror!.live, "the watch stream is live");
    const start = Date.now();
    for (let i = 0; i < 200; i++) assert.equal((await c.do(x, () => fetch(provider.url))).status, 200);
    const elapsed = Date.now() - start;
    const s = c.stats().mirror!;
    assert.ok(s.admits >= 199, `mirrored admits ${s.admits}`);
    assert.equal(s.batched, 200);
    await c.flush({ signal: AbortSignal.timeout(5000) });
    const { createClient } = await import("@connectrpc/connect");
    const { createConnectTransport } = await import("@connectrpc/connect-node");
    const { CooldownService } = await import("../src/gen/v1/cooldown_pb.js");
    const rpc = createClient(CooldownService, createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" }));
    const got = await rpc.getConnection({ id: x.id });
    assert.equal(got.connection?.recentSuccesses, 200n, "the batches counted as 200 successes");
    // One batch per interval at most (and the flush's): the calls' wall time sets how many
    // intervals passed, so a loaded machine is not a failure.
    const bound = Math.ceil(elapsed / 100) + 2;
    assert.ok(c.stats().mirror!.batches <= bound, `batches ${c.stats().mirror!.batches} over ${elapsed} ms (at most ${bound})`);
    assert.ok(c.stats().mirror!.batches < 200, "batched, not one report per call");
  });

  test("another process's cooldown stops the mirror's local admits when its event arrives", async () => {
    const c = newClient({ mirror: { intervalMs: 100 }, noWait: true });
    const other = newClient();
    const x = conn(c);
    await c.admit([conn(c)]); // the stream opens at cooldownd's first answer to an Admit
    const deadline = Date.now() + 20_000;
    while (!c.stats().mirror!.live && Date.now() < deadline) await sleep(20);
    await c.admit([x]); // enters the mirror
    assert.equal((await c.admit([x])).mirrored, true);
    await other.report(await other.admit([x]), rateLimited(5));
    const t0 = Date.now();
    let a = await c.admit([x]);
    while (a.mirrored && Date.now() - t0 < 2000) {
      await sleep(5);
      a = await c.admit([x]);
    }
    assert.equal(a.mirrored, undefined, "admitted through cooldownd again");
    assert.equal(a.decision, Decision.Deny);
    assert.equal(a.reason, DenyReason.Cooldown);
    console.log(`mirror: the other process's cooldown stopped local admits after ${Date.now() - t0} ms`);
  });
});
