// When cooldownd is slow or down: one failed call is decided for that call
// only; 3 in a row within the window over every endpoint degrade; one
// answer recovers; every admission cooldownd granted is settled through
// the report queue, a probe's first; several endpoints fail over.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Client, allowed, sleep, type Admission, type ClientOptions } from "../src/client.js";
import { Decision, DenyReason } from "../src/breaker.js";
import { classify } from "../src/classify.js";
import { DeniedError, UnavailableError } from "../src/errors.js";
import type { Logger } from "../src/log.js";
import type { Conn } from "../src/conn.js";
import { fastPolicy, freePort, startServer, type Server } from "./helpers.js";
import { FakeProvider, Proxy, blackhole, json } from "./fakes.js";

let server: Server;
let provider: FakeProvider;
const clients: Client[] = [];
let n = 0;

function recordingLogger() {
  const lines: { level: string; msg: string }[] = [];
  const logger: Logger = {
    debug: (msg) => lines.push({ level: "debug", msg }),
    info: (msg) => lines.push({ level: "info", msg }),
    warn: (msg) => lines.push({ level: "warn", msg }),
  };
  return { lines, logger };
}
function newClient(url: string, opts: ClientOptions = {}): Client {
  const c = new Client(url, { logger: recordingLogger().logger, admitTimeoutMs: 150, ...opts });
  clients.push(c);
  return c;
}
function conn(c: Client): Conn {
  return c.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: `sk-deg-${process.pid}-${++n}` });
}
const failure = () => classify({}, { status: 503, headers: new Headers() }, undefined, undefined);
const ok = () => classify({}, { status: 200, headers: new Headers() }, undefined, undefined);

const proxies: Proxy[] = [];
async function proxyUp(): Promise<Proxy> {
  const p = new Proxy(server.port);
  proxies.push(p);
  await p.up();
  return p;
}

before(async () => {
  server = await startServer(fastPolicy);
  provider = await FakeProvider.start();
  // Warm the server (its first scripts load) so that the first timed call below is not the first ever.
  const warm = newClient(server.url, { admitTimeoutMs: 5000 });
  const x = conn(warm);
  await warm.report(await warm.admit([x]), ok());
});
after(async () => {
  for (const p of proxies) await p.cut();
  for (const c of clients) await c.close();
  await provider.close();
  await server.stop();
});

test("one failed call is decided in-process for that call only; three in a row degrade, logged once; one answer recovers", async () => {
  const proxy = await proxyUp();
  const { lines, logger } = recordingLogger();
  const c = newClient(proxy.url, { logger, serviceRetryMs: 100, admitTimeoutMs: 1000 });
  const x = conn(c);
  assert.equal((await c.admit([x])).local, false);
  await proxy.cut();
  const a1 = await c.admit([x]);
  assert.equal(a1.local, true);
  assert.equal(c.degraded(), false, "one failed call does not degrade");
  await c.admit([x]);
  assert.equal(c.degraded(), false);
  await c.admit([x]);
  assert.equal(c.degraded(), true, "the third in a row degrades");
  const t0 = Date.now();
  const a4 = await c.admit([x]);
  assert.ok(a4.local && Date.now() - t0 < 500, "degraded: decided in-process without waiting on cooldownd");
  assert.equal(lines.filter((l) => l.level === "warn" && l.msg.startsWith("cooldownd unreachable")).length, 1);
  assert.equal(c.stats().degradations, 1);
  await proxy.up();
  await sleep(120);
  const back = await c.admit([x]); // the one call per service-retry interval that tries cooldownd
  assert.equal(back.local, false);
  assert.equal(c.degraded(), false);
  assert.equal(lines.filter((l) => l.msg.startsWith("cooldownd reachable again")).length, 1);
  await proxy.cut();
});

test("a hung cooldownd is bounded by the admit timeout; failures spread over the window do not degrade", async () => {
  const hole = await blackhole();
  after(() => hole.close());
  const c = newClient(hole.url, { admitTimeoutMs: 100, degradeWindowMs: 2000 });
  const x = conn(c);
  const t0 = Date.now();
  const a = await c.admit([x]);
  const took = Date.now() - t0;
  assert.ok(a.local, "decided in-process");
  assert.ok(took >= 95 && took < 1500, `took ${took} ms`);
  await c.admit([x]);
  await sleep(2100); // the window passes: the streak starts again
  await c.admit([x]);
  assert.equal(c.degraded(), false);
  await c.admit([x]);
  await c.admit([x]);
  assert.equal(c.degraded(), true);
});

test("fail closed: the call is denied unavailable, the provider is not called", async () => {
  const dead = `http://127.0.0.1:${await freePort()}`;
  const c = newClient(dead, { failMode: "closed" });
  await assert.rejects(c.admit([conn(c)]), (e: unknown) => e instanceof UnavailableError);
  provider.answer(json(200, {}));
  await assert.rejects(c.do(conn(c), () => fetch(provider.url)), (e: unknown) =>
    e instanceof DeniedError && e.reason === DenyReason.Unavailable && e.local);
  assert.equal(provider.requests.length, 0);
});

test("several endpoints: a dead one is failed over within the call, no outage", async () => {
  const dead = `http://127.0.0.1:${await freePort()}`;
  for (let i = 0; i < 4; i++) {
    // The start endpoint is random per client: try a few.
    const c = newClient(`${dead},${server.url}`, { admitTimeoutMs: 2000 });
    for (let k = 0; k < 5; k++) assert.equal((await c.admit([conn(c)])).local, false);
    assert.equal(c.degraded(), false);
    assert.equal(c.stats().localDecisions, 0);
  }
});

test("a probe's report that cooldownd could not take is queued and releases the lease when it answers", async () => {
  const proxy = await proxyUp();
  const c = newClient(proxy.url, { degradeAfter: 100, admitTimeoutMs: 1000 });
  const direct = newClient(server.url, { admitTimeoutMs: 2000 });
  const x = conn(c);
  // Open the connection, wait for half-open, take the probe through the proxy.
  for (;;) {
    const a = await direct.admit([x]);
    if (a.decision === Decision.Deny && a.reason === DenyReason.Open) break;
    if (allowed(a)) await direct.report(a, failure());
  }
  let probe: Admission;
  for (;;) {
    probe = await c.admit([x]);
    if (probe.decision === Decision.AllowProbe) break;
    await sleep(probe.retryAfterMs + 10);
  }
  assert.equal(probe.local, false);
  await proxy.cut();
  await c.report(probe, ok()); // resolves: queued, not lost
  assert.equal(c.stats().reports.len, 1);
  assert.equal((await direct.admit([x])).reason, DenyReason.ProbeInFlight, "the lease is still held");
  await proxy.up();
  await c.flush({ signal: AbortSignal.timeout(5000) });
  const s = c.stats().reports;
  assert.equal(s.delivered, 1);
  assert.equal(s.len, 0);
  assert.equal((await direct.admit([x])).decision, Decision.Allow, "the queued success closed it long before the 3 s lease TTL");
  await proxy.cut();
});

test("outcomes decided in-process that the fleet must learn are queued and delivered", async () => {
  const proxy = await proxyUp();
  const c = newClient(proxy.url, { admitTimeoutMs: 1000 });
  const direct = newClient(server.url, { admitTimeoutMs: 2000 });
  const x = conn(c);
  await c.admit([x]); // learn a revision
  await proxy.cut();
  const a = await c.admit([x]);
  assert.ok(a.local);
  await c.report(a, classify({}, { status: 429, headers: new Headers({ "retry-after": "3" }) }, undefined, undefined));
  await c.report(await c.admit([x]).then((b) => ({ ...b, decision: Decision.Allow })), ok()); // a plain success is not queued
  assert.equal(c.stats().reports.queued, 1);
  await sleep(300);
  await proxy.up();
  await c.flush({ signal: AbortSignal.timeout(5000) });
  const d = await direct.admit([x]);
  assert.equal(d.reason, DenyReason.Cooldown);
  assert.ok(d.retryAfterMs <= 2800, `the delayed hint carries what was left, got ${d.retryAfterMs} ms`);
  await proxy.cut();
});

test("the in-process fallback keeps cooldownd's last word: a primary skipped for its fallback, a Retry-After this process reported", async () => {
  const proxy = await proxyUp();
  let clock = Date.now();
  const c = newClient(proxy.url, { admitTimeoutMs: 2000, degradeAfter: 1, now: () => clock });
  const primary = conn(c), fallback = conn(c), limited = conn(c);
  const quota = classify({}, { status: 429, headers: new Headers({ "retry-after": "3600" }) },
    new TextEncoder().encode(JSON.stringify({ error: { code: "insufficient_quota" } })), undefined);
  const limitedFor30 = classify({}, { status: 429, headers: new Headers({ "retry-after": "30" }) }, undefined, undefined);
  await c.report(await c.admit([primary]), quota);
  await c.report(await c.admit([limited]), limitedFor30);
  const viaService = await c.admit([primary, fallback]);
  assert.equal(viaService.local, false);
  assert.equal(viaService.index, 1, "cooldownd sends the call to the fallback");

  await proxy.cut();
  const a = await c.admit([primary, fallback]);
  assert.equal(a.local, true);
  assert.equal(a.index, 1, "the exhausted primary stays skipped");
  assert.equal(a.decision, Decision.Allow);
  const d = await c.admit([limited]);
  assert.equal(d.decision, Decision.Deny, "the Retry-After this process reported holds");
  assert.equal(d.reason, DenyReason.Cooldown);
  assert.ok(Math.abs(d.retryAfterMs - 30_000) < 1000, `retryAfterMs ${d.retryAfterMs}`);
  clock += 31_000;
  assert.equal((await c.admit([limited])).decision, Decision.Allow, "and runs out");
});
