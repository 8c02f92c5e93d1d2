// The differential test of the breaker port: tools/breakertrace applies
// random operation sequences to the Go model (internal/breaker) and writes
// each step's answer, events and whole state; this test replays the same
// operations through the TypeScript port and fails on the first step that
// differs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { State, type Policy, type BreakerReport, LeaseNotHeldError } from "../src/breaker.js";
import { repoRoot } from "./helpers.js";

interface Op {
  kind: string; nonce?: string; report?: BreakerReport; jitter: number; token?: string; ttl?: number;
  override: number; until: number; actor?: string; reason?: string;
}
interface Step {
  now: number; op: Op; verdict?: unknown; accepted?: boolean; changed?: boolean; lease?: unknown; err?: string;
  events: unknown[]; state: Record<string, unknown>;
}
interface Trace { policy: Policy; steps: Step[]; }

export const SEQUENCES = 400;
export const STEPS = 150;

function stateOf(s: State): Record<string, unknown> {
  return {
    phase: s.phase, cause: s.cause, revision: s.revision, openUntil: s.openUntil, reopens: s.reopens, consecutive: s.consecutive,
    window: { ...s.window }, override: s.override, overrideUntil: s.overrideUntil, leases: s.leases.map((l) => ({ ...l })),
    successes: s.successes, failures: s.failures, lastStatus: s.lastStatus, lastOutcome: s.lastOutcome,
    lastErrorCode: s.lastErrorCode, changedAt: s.changedAt, updatedAt: s.updatedAt,
  };
}

function replay(tr: Trace, name: string): number {
  const s = new State();
  const p = tr.policy;
  tr.steps.forEach((st, k) => {
    const o = st.op;
    const got: Record<string, unknown> = {};
    switch (o.kind) {
      case "admit": {
        const [v, evs] = s.admit(p, st.now, o.nonce!);
        const verdict: Record<string, unknown> = { decision: v.decision, reason: v.reason, retryAfter: v.retryAfter, revision: v.revision, phase: v.phase };
        if (v.lease) verdict.lease = v.lease;
        got.verdict = verdict;
        got.events = evs;
        break;
      }
      case "report": {
        const [res, evs] = s.report(p, st.now, o.report!, o.jitter);
        got.accepted = res.accepted;
        got.changed = res.changed;
        got.events = evs;
        break;
      }
      case "extend":
        try {
          const [l, evs] = s.extendLease(st.now, o.token!, o.ttl!);
          got.lease = l;
          got.events = evs;
        } catch (e) {
          assert.ok(e instanceof LeaseNotHeldError);
          got.err = "lease_not_held";
          got.events = (e as unknown as { events: unknown[] }).events;
        }
        break;
      case "force":
        got.events = s.force(st.now, o.override as 0 | 1 | 2, o.until, o.actor ?? "", o.reason ?? "");
        break;
      case "reset":
        got.events = s.reset(st.now, o.actor ?? "", o.reason ?? "");
        break;
      case "settle":
        got.events = s.settle(st.now);
        break;
      default:
        assert.fail(`unknown op ${o.kind}`);
    }
    const want: Record<string, unknown> = { events: st.events };
    for (const key of ["verdict", "accepted", "changed", "lease", "err"] as const) if (st[key] !== undefined) want[key] = st[key];
    const where = `${name} step ${k} (${JSON.stringify(o)})`;
    assert.deepStrictEqual(got, want, where + ": answer differs");
    assert.deepStrictEqual(stateOf(s), st.state, where + ": state differs");
  });
  return tr.steps.length;
}

test(`breaker: the port equals internal/breaker on ${SEQUENCES} random sequences per seed`, () => {
  let steps = 0, sequences = 0;
  for (const seed of [1, 2]) {
    const out = execFileSync("go", ["run", "./clients/ts/tools/breakertrace", "-seed", String(seed), "-sequences", String(SEQUENCES),
      "-steps", String(STEPS)], { cwd: repoRoot, maxBuffer: 1 << 30, encoding: "utf8" });
    const lines = out.trim().split("\n");
    assert.equal(lines.length, SEQUENCES);
    lines.forEach((line, i) => {
      steps += replay(JSON.parse(line) as Trace, `seed ${seed} sequence ${i}`);
      sequences++;
    });
  }
  // Fail loudly if the generator stopped producing work.
  assert.ok(steps > sequences * STEPS * 0.8, `only ${steps} steps`);
  console.log(`breaker differential: ${sequences} sequences, ${steps} steps compared`);
});

test("breaker: the replay notices a divergence", () => {
  // A trace whose recorded state is wrong on purpose must fail the replay,
  // so a port that drifts cannot pass by comparing nothing.
  const out = execFileSync("go", ["run", "./clients/ts/tools/breakertrace", "-seed", "3", "-sequences", "1", "-steps", "60"],
    { cwd: repoRoot, encoding: "utf8" });
  const tr = JSON.parse(out) as Trace;
  const last = tr.steps[tr.steps.length - 1]!;
  last.state.revision = (last.state.revision as number) + 1;
  assert.throws(() => replay(tr, "tampered"), /state differs/);
});
