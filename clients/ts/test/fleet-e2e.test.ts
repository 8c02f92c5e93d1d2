// The fleet rules end to end against a real cooldownd (embedded Redis):
// the trip quorum counts this client's reporter id, a retry over the
// fleet's budget is not waited for, and a shadow policy's answers reach the
// admission.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Client, type ClientOptions } from "../src/client.js";
import type { Conn } from "../src/conn.js";
import { Decision, DenyReason } from "../src/breaker.js";
import { classify } from "../src/classify.js";
import { DeniedError } from "../src/errors.js";
import { silentLogger } from "../src/log.js";
import { fastPolicy, startServer, type Server } from "./helpers.js";
import { FakeProvider, json } from "./fakes.js";

let fleet: Server;
let shadow: Server;
let provider: FakeProvider;
const clients: Client[] = [];
let n = 0;

before(async () => {
  // Quorum 2 over a long fleet window, two failures in a row trip; no
  // retry without first attempts (a budget minimum of 0).
  fleet = await startServer([...fastPolicy, "--trip-quorum", "2", "--fleet-window", "60s", "--retry-budget", "0.2",
    "--retry-budget-min", "0", "--failure-rate", "0"]);
  shadow = await startServer([...fastPolicy, "--shadow=true", "--consecutive-failures", "1", "--failure-rate", "0",
    "--open-base", "20s", "--open-max", "20s"]);
  provider = await FakeProvider.start();
});
after(async () => {
  for (const c of clients) await c.close();
  await provider.close();
  await fleet.stop();
  await shadow.stop();
});

function newClient(url: string, opts: ClientOptions = {}): Client {
  // Without the mirror: these tests read another process's word on the
  // very next call, which the mirror gives one watch event later (its
  // trade, tested in e2e.test.ts's "the mirror").
  const c = new Client(url, { logger: silentLogger, admitTimeoutMs: 2000, mirror: false, ...opts });
  clients.push(c);
  return c;
}
/** The same connection as seen by each client (no salt: equal ids). */
function conn(cs: Client[], credential: string): Conn[] {
  return cs.map((c) => c.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential, scope: "fleet" }));
}
const failure = () => classify({}, { status: 503, headers: new Headers() }, undefined, undefined);

async function failOnce(c: Client, x: Conn): Promise<void> {
  const a = await c.admit([x]);
  assert.equal(a.decision, Decision.Allow, "still closed");
  await c.report(a, failure());
}

test("fleet e2e: the trip quorum counts distinct reporters", async (t) => {
  const cases = [
    { name: "one process's failures alone do not trip; a second reporter's do", reporters: ["node-a", "node-b"], trips: true },
    { name: "two clients sharing one reporter id are one reporter (the control)", reporters: ["same", "same"], trips: false },
  ];
  for (const c of cases) {
    await t.test(c.name, async () => {
      const [c1, c2] = [newClient(fleet.url, { reporter: c.reporters[0] }), newClient(fleet.url, { reporter: c.reporters[1] })];
      const [x1, x2] = conn([c1!, c2!], `sk-fleet-e2e-${process.pid}-${++n}`);
      for (let i = 0; i < 3; i++) await failOnce(c1!, x1!); // consecutive 3 ≥ 2, one reporter
      assert.equal((await c1!.admit([x1!])).decision, Decision.Allow, "held back by the quorum");
      await c2!.report(await c2!.admit([x2!]), failure());
      const after = await c1!.admit([x1!]);
      if (c.trips) {
        assert.equal(after.decision, Decision.Deny);
        assert.equal(after.reason, DenyReason.Open);
      } else {
        assert.equal(after.decision, Decision.Allow);
        await c1!.report(after, classify({}, { status: 200, headers: new Headers() }, undefined, undefined));
      }
    });
  }
});

test("fleet e2e: a retry over the fleet's budget fails at once, without waiting for the bucket's end", async () => {
  const waits: number[] = [];
  const cd = newClient(fleet.url, { sleep: async (ms) => { waits.push(ms); }, maxWaitMs: 120_000 });
  const [x] = conn([cd], `sk-fleet-e2e-budget-${process.pid}`);
  provider.answer(json(503, { error: { type: "server_error" } }), json(200, {}));
  const err = await cd.do(x!, ({ signal }) => fetch(provider.url + "/v1/chat", { method: "POST", signal })).catch((e: unknown) => e);
  assert.ok(err instanceof DeniedError, String(err));
  assert.equal(err.reason, DenyReason.RetryBudget);
  assert.equal(err.attempts, 1);
  assert.ok(err.retryAfterMs > 0 && err.retryAfterMs <= 60_000, String(err.retryAfterMs));
  assert.equal(provider.requests.length, 1, "the retry never reached the provider");
  assert.ok(waits.every((w) => w < err.retryAfterMs), `no wait for the budget: ${waits.join(",")}`);
});

test("fleet e2e: a shadow policy allows what it would deny and the admission says why", async () => {
  const cd = newClient(shadow.url);
  const [x] = conn([cd], `sk-fleet-e2e-shadow-${process.pid}`);
  await cd.report(await cd.admit([x!]), failure()); // trips (shadowed): open for 20 s
  const a = await cd.admit([x!]);
  assert.equal(a.decision, Decision.Allow);
  assert.equal(a.shadowReason, DenyReason.Open);
  assert.ok(a.shadowRetryAfterMs! > 10_000 && a.shadowRetryAfterMs! <= 20_000, String(a.shadowRetryAfterMs));
});
