// A report answered durability NOT_REPLICATED (issue 28 point 2, decision
// 0050) is an answer, as the Go client's TestNotReplicatedIsAnAnswer
// (client/durability_test.go) holds it: cooldownd applied the report on a
// master that has no replica yet (after a failover), so the client neither
// resends it nor counts it as an outage, however many arrive in a row, and
// its admits keep going to cooldownd. The control is what cooldownd
// answered before the field existed (unavailable after the full WAIT): the
// same client counts those as outages and degrades at the third, so the
// first case would fail if the client took NOT_REPLICATED for a failure.
// cooldownd is scripted in process (Connect's router transport).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { createRouterTransport, Code, ConnectError } from "@connectrpc/connect";

import { Client } from "../src/client.js";
import { classify } from "../src/classify.js";
import { silentLogger } from "../src/log.js";
import {
  AdmitResponseSchema, CandidateDecisionSchema, CooldownService, ReportResponseSchema, WatchConnectionsResponseSchema,
  Decision as WireDecision, Durability, State as WireState,
  type ReportResponse, type WatchConnectionsResponse,
} from "../src/gen/v1/cooldown_pb.js";

const clients: Client[] = [];
after(async () => {
  for (const c of clients) await c.close();
});

/** Opening reports in a row: more than the three failures that degrade the client. */
const n = 6;

const rateLimited = () => classify({}, { status: 429, headers: new Headers({ "retry-after": "30" }) }, undefined, undefined);

/**
 * A scripted cooldownd whose admits allow (durability unset: no transition)
 * and whose reports are answered by answer; it counts both.
 */
function scripted(answer: (rev: bigint) => ReportResponse) {
  const count = { admits: 0, reports: 0 };
  const transport = createRouterTransport(({ service }) => {
    service(CooldownService, {
      admit: (req) => {
        count.admits++;
        return create(AdmitResponseSchema, {
          decision: WireDecision.ALLOW, candidateIndex: 0, revision: 3n, state: WireState.CLOSED,
          candidates: req.candidates.slice(0, 1).map(() => create(CandidateDecisionSchema, { decision: WireDecision.ALLOW })),
        });
      },
      report: (req) => {
        count.reports++;
        return answer(req.revision);
      },
      extendLease: () => { throw new ConnectError("no", Code.Unimplemented); },
      getConnection: () => { throw new ConnectError("no", Code.Unimplemented); },
      listConnections: () => { throw new ConnectError("no", Code.Unimplemented); },
      watchConnections: async function* (_req, ctx): AsyncIterable<WatchConnectionsResponse> {
        yield create(WatchConnectionsResponseSchema, {});
        await new Promise<void>((r) => ctx.signal.addEventListener("abort", () => r(), { once: true }));
      },
    });
  });
  const c = new Client("http://cooldownd.test", { logger: silentLogger, transport: () => transport, admitTimeoutMs: 5_000 });
  clients.push(c);
  return { c, count };
}

/** n admissions by cooldownd, one per connection, admitted before any is reported. */
async function admitted(c: Client, who: string) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const x = c.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: `sk-nrep-${who}-${process.pid}`, scope: `gpt-${i}` });
    const a = await c.admit([x]);
    assert.equal(a.local, false, `admit ${i}: decided by cooldownd`);
    out.push(a);
  }
  return out;
}

test("reports answered NOT_REPLICATED are answers: not resent, not an outage, never degraded (client/durability_test.go)", async () => {
  const { c, count } = scripted((rev) => create(ReportResponseSchema, {
    revision: rev + 1n, state: WireState.OPEN, accepted: true, changed: true, durability: Durability.NOT_REPLICATED,
  }));
  // The reports come in a row, no admit's answer between them: the
  // degradation rule's three consecutive failures, had they been failures.
  for (const [i, a] of (await admitted(c, "answer")).entries()) {
    await c.report(a, rateLimited());
    assert.equal(c.degraded(), false, `report ${i}: NOT_REPLICATED is not an outage`);
  }
  await c.flush({ signal: AbortSignal.timeout(10_000) });
  assert.equal(count.reports, n, "each report sent once: none queued for a resend");
  assert.equal(count.admits, n);
  assert.equal(c.stats().degradations, 0);
  assert.equal(c.stats().localDecisions, 0);
  // Its admits still go to cooldownd.
  const x = c.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: `sk-nrep-answer-${process.pid}`, scope: "gpt-next" });
  assert.equal((await c.admit([x])).local, false);
});

test("control: the same reports failed unavailable (cooldownd before NOT_REPLICATED) are outages: degraded at the third", async () => {
  const { c, count } = scripted(() => {
    throw new ConnectError("store: acknowledged by 0 of 1 replicas within 50ms", Code.Unavailable);
  });
  let degradedAt = -1;
  for (const [i, a] of (await admitted(c, "control")).entries()) {
    await c.report(a, rateLimited());
    if (c.degraded() && degradedAt < 0) degradedAt = i;
  }
  assert.equal(degradedAt, 2, "three failed reports in a row degrade the client");
  assert.equal(c.stats().degradations, 1);
  assert.ok(count.reports >= 3, "the first three went to cooldownd");
});
