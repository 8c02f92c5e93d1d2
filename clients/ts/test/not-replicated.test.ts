// Admits and reports answered durability NOT_REPLICATED (issue 28, decision
// 0050) against testdata/not_replicated.json, the steps the Go client is
// checked against too (client/not_replicated_test.go): each answer stands,
// the call is decided by cooldownd, nothing is resent and nothing counts as
// an outage. cooldownd is scripted in process (Connect's router transport).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { durationFromMs, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { createRouterTransport, Code, ConnectError } from "@connectrpc/connect";

import { Client, allowed } from "../src/client.js";
import { Decision } from "../src/breaker.js";
import { classify } from "../src/classify.js";
import { silentLogger } from "../src/log.js";
import {
  AdmitResponseSchema, CandidateDecisionSchema, CooldownService, ReportResponseSchema, WatchConnectionsResponseSchema,
  Decision as WireDecision, DenyReason as WireDenyReason, Durability, State as WireState,
  type WatchConnectionsResponse,
} from "../src/gen/v1/cooldown_pb.js";
import { repoRoot } from "./helpers.js";

interface Step { decision: string; reason?: string; retryAfterMs?: number; report?: number }

/** The enum value a proto name (DECISION_ALLOW_PROBE) stands for in a generated enum (ALLOW_PROBE). */
function named<E extends Record<string, string | number>>(e: E, prefix: string, name: string): number {
  const v = e[name.slice(prefix.length) as keyof E];
  assert.equal(typeof v, "number", `${name} is a value of ${prefix}*`);
  return v as number;
}

const clients: Client[] = [];
after(async () => {
  for (const c of clients) await c.close();
});

test("an admit answered NOT_REPLICATED is the answer: not local, not resent, no outage (testdata/not_replicated.json)", async () => {
  const steps = (JSON.parse(readFileSync(join(repoRoot, "testdata", "not_replicated.json"), "utf8")) as { steps: Step[] }).steps;
  assert.ok(steps.length > 3, "more in a row than degrade the client on errors");
  let step = 0;
  let admits = 0;
  let reports = 0;
  const transport = createRouterTransport(({ service }) => {
    service(CooldownService, {
      admit: (req) => {
        admits++;
        const s = steps[step]!;
        const decision = named(WireDecision, "DECISION_", s.decision) as WireDecision;
        const denyReason = s.reason ? named(WireDenyReason, "DENY_REASON_", s.reason) as WireDenyReason : WireDenyReason.UNSPECIFIED;
        const probe = decision === WireDecision.ALLOW_PROBE;
        return create(AdmitResponseSchema, {
          decision, candidateIndex: 0, revision: 7n, state: probe ? WireState.HALF_OPEN : WireState.CLOSED, denyReason,
          retryAfter: decision === WireDecision.DENY ? durationFromMs(s.retryAfterMs ?? 0) : undefined,
          leaseToken: probe ? "7.0.1.probe" : "", leaseExpiresAt: probe ? timestampFromMs(Date.now() + 60_000) : undefined,
          candidates: req.candidates.slice(0, 1).map(() => create(CandidateDecisionSchema, { decision, denyReason })),
          durability: Durability.NOT_REPLICATED,
        });
      },
      report: (req) => {
        reports++;
        return create(ReportResponseSchema, { revision: req.revision + 1n, state: WireState.CLOSED, accepted: true, changed: true,
          durability: Durability.NOT_REPLICATED });
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
  const cd = new Client("http://cooldownd.test", { logger: silentLogger, transport: () => transport, admitTimeoutMs: 5_000 });
  clients.push(cd);
  const conn = cd.connection({ provider: "openai", endpoint: "https://api.openai.com/v1", credential: `sk-nrep-${process.pid}` });
  let sent = 0;
  for (const [i, s] of steps.entries()) {
    step = i;
    const a = await cd.admit([conn]);
    assert.equal(a.local, false, `step ${i}: decided by cooldownd`);
    assert.equal(a.notReplicated, true, `step ${i}: the admission says NOT_REPLICATED`);
    assert.equal(a.decision, named(WireDecision, "DECISION_", s.decision) as number as Decision, `step ${i}: the decision stands`);
    if (a.decision === Decision.AllowProbe) assert.notEqual(a.leaseToken, "", `step ${i}: the probe is the caller's`);
    if (allowed(a)) {
      await cd.report(a, classify({}, { status: s.report ?? 200, headers: new Headers() }, undefined, undefined));
      sent++;
    }
    assert.equal(cd.degraded(), false, `step ${i}: NOT_REPLICATED is not an outage`);
    assert.equal(admits, i + 1, `step ${i}: each admit sent once`);
  }
  await cd.flush();
  assert.equal(reports, sent, "each report sent once: none queued for a resend");
  assert.equal(cd.stats().localDecisions, 0);
});
