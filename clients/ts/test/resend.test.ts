// A report whose reply is lost after cooldownd applied it is sent again by
// the report queue with the same idempotency key, and a real cooldownd
// counts it once (as the Go client's TestQueuedReportResentAfterALostReplyCountsOnce);
// so is the mirror's ReportBatch, or, from a cooldownd without it, its Reports.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";

import { Client, sleep, type ClientOptions } from "../src/client.js";
import { classify } from "../src/classify.js";
import { silentLogger } from "../src/log.js";
import type { Conn } from "../src/conn.js";
import { CooldownService, State as WireState, type ReportBatchRequest, type ReportRequest } from "../src/gen/v1/cooldown_pb.js";
import { fastPolicy, startServer, type Server } from "./helpers.js";

let server: Server;
const clients: Client[] = [];
let n = 0;

before(async () => {
  server = await startServer(fastPolicy); // trips after 2 consecutive failures
});
after(async () => {
  for (const c of clients) await c.close();
  await server.stop();
});

interface Losing {
  /** Replies still to lose. */
  lose: number;
  /** Strip the key before sending (the control: what a keyless client does). */
  stripKey: boolean;
  /** Every Report and ReportBatch request cooldownd took: its method, key and count (a batch's: the sum of its reports'). */
  sent: { method: string; key: string; count: number }[];
}

/** A transport whose next `lose` Report or ReportBatch replies are lost after cooldownd applied the request. */
function losing(l: Losing): ClientOptions["transport"] {
  const drop: Interceptor = (next) => async (req) => {
    const method = req.method.name;
    if (method !== "Report" && method !== "ReportBatch") return next(req);
    const m = req.message as ReportRequest | ReportBatchRequest;
    if (l.stripKey) m.idempotencyKey = "";
    const count = "reports" in m ? m.reports.reduce((a, r) => a + r.count, 0) : m.count;
    const res = await next(req); // applied by the store (a cooldownd without ReportBatch throws Unimplemented)
    l.sent.push({ method, key: m.idempotencyKey, count });
    if (l.lose > 0) {
      l.lose--;
      throw new ConnectError("the reply was lost", Code.Unavailable);
    }
    return res;
  };
  return (baseUrl, interceptors) => createConnectTransport({ baseUrl, httpVersion: "1.1", interceptors: [...interceptors, drop] });
}

const rpc = () => createClient(CooldownService, createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" }));
const failure = () => classify({}, { status: 503, headers: new Headers() }, undefined, undefined);
const ok = () => classify({}, { status: 200, headers: new Headers() }, undefined, undefined);

function setup(l: Losing, opts: ClientOptions = {}): { c: Client; x: Conn } {
  // Without the mirror unless a test asks for it: each report on its own.
  const c = new Client(server.url, { logger: silentLogger, admitTimeoutMs: 5_000, transport: losing(l), mirror: false, ...opts });
  clients.push(c);
  return { c, x: c.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: `sk-resend-${process.pid}-${++n}` }) };
}

const cases: { name: string; lose: number; stripKey?: boolean; failures: number; state: WireState }[] = [
  { name: "a failure, one reply lost: counted once", lose: 1, failures: 1, state: WireState.CLOSED },
  { name: "a failure, three replies lost: counted once", lose: 3, failures: 1, state: WireState.CLOSED },
  // Without the key each send counts: the resend is the second failure and trips.
  { name: "control: without the key the resend trips", lose: 1, stripKey: true, failures: 0, state: WireState.OPEN },
];

for (const tc of cases) {
  test(`the report queue: ${tc.name}`, async () => {
    const l: Losing = { lose: tc.lose, stripKey: tc.stripKey ?? false, sent: [] };
    const { c, x } = setup(l);
    await c.report(await c.admit([x]), failure());
    await c.flush({ signal: AbortSignal.timeout(20_000) });
    assert.equal(l.sent.length, tc.lose + 1, "the first send and a resend per lost reply");
    if (!tc.stripKey) {
      assert.match(l.sent[0]!.key, /^[A-Za-z0-9_-]{22}$/, "16 random bytes, unpadded base64url");
      for (const s of l.sent) assert.equal(s.key, l.sent[0]!.key, "every send of one report carries its key");
    }
    assert.equal(c.stats().reports.delivered, 1);
    const st = (await rpc().getConnection({ id: x.id })).connection!;
    assert.equal(st.state, tc.state);
    assert.equal(st.consecutiveFailures, tc.failures);
  });
}

test("the mirror: a batch of successes whose reply was lost is counted once", async () => {
  const l: Losing = { lose: 0, stripKey: false, sent: [] };
  const { c, x } = setup(l, { mirror: { intervalMs: 3_600_000 } }); // batches go at flush only
  await c.admit([c.connection({ provider: "openai", endpoint: "https://warm-up.test", credential: `sk-warm-up-${process.pid}` })]); // the stream opens at the first answer
  const deadline = Date.now() + 20_000;
  while (!c.stats().mirror!.live && Date.now() < deadline) await sleep(20);
  assert.ok(c.stats().mirror!.live, "the watch stream is live");
  for (let i = 0; i < 20; i++) await c.report(await c.admit([x]), ok());
  l.lose = 1;
  await c.flush({ signal: AbortSignal.timeout(20_000) });
  // One ReportBatch; from a cooldownd without it, one Report.
  assert.deepEqual(l.sent.map((s) => s.count), [20, 20], "one batch, sent again as it was");
  assert.equal(l.sent[1]!.method, l.sent[0]!.method);
  assert.equal(l.sent[1]!.key, l.sent[0]!.key);
  const st = (await rpc().getConnection({ id: x.id })).connection!;
  assert.equal(st.recentSuccesses, 20n, "every success once");
});

test("each report has a key of its own", async () => {
  const l: Losing = { lose: 0, stripKey: false, sent: [] };
  const { c, x } = setup(l);
  for (let i = 0; i < 5; i++) await c.report(await c.admit([x]), ok());
  assert.equal(new Set(l.sent.map((s) => s.key)).size, 5);
});
