// The differential test of the breaker port: tools/breakertrace applies
// random operation sequences to the Go model (internal/breaker) and writes
// each step's answer, events and whole state; this test replays the same
// operations through the TypeScript port and fails on the first step that
// differs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  Cause, Decision, DenyReason, Outcome, Phase, State, defaultPolicy, knobs, stateFields, validatePolicy, type Policy, type BreakerReport,
  LeaseNotHeldError,
} from "../src/breaker.js";
import { repoRoot } from "./helpers.js";

interface Op {
  kind: string; nonce?: string; retry?: boolean; draw: number; report?: BreakerReport; jitter: number; token?: string; ttl?: number;
  override: number; until: number; actor?: string; reason?: string;
}
interface Step {
  now: number; op: Op; verdict?: unknown; accepted?: boolean; changed?: boolean; lease?: unknown; err?: string;
  events: unknown[]; state: Record<string, unknown>; counts: unknown;
}
interface Trace { policy: Policy; steps: Step[]; }

export const SEQUENCES = 400;
export const STEPS = 150;

/** The port's state by the fields knobs.gen.ts declares (internal/breaker's State's, generated). */
function stateOf(s: State): Record<string, unknown> {
  return Object.fromEntries(stateFields.map((f) => [f, structuredClone(s[f])]));
}

/** How often the traces reached each fleet rule: the differential test is only as good as what it exercised. */
export interface Reached {
  retryBudgetDenials: number; throttleDenials: number; shadowAllows: number; quorumBlockedTrips: number;
  quorumTrips: number; throttleProbabilities: number;
}

function copyState(s: State): State {
  return Object.assign(new State(), structuredClone({ ...s }));
}

function replay(tr: Trace, name: string, reached?: Reached): number {
  const s = new State();
  const p = tr.policy;
  tr.steps.forEach((st, k) => {
    const o = st.op;
    const got: Record<string, unknown> = {};
    switch (o.kind) {
      case "admit": {
        const [v, evs] = s.admit(p, st.now, { nonce: o.nonce!, retry: o.retry ?? false, draw: o.draw });
        const verdict: Record<string, unknown> = {
          decision: v.decision, reason: v.reason, retryAfter: v.retryAfter, revision: v.revision, phase: v.phase,
          shadowed: v.shadowed, shadowRetryAfter: v.shadowRetryAfter,
        };
        if (v.lease) verdict.lease = v.lease;
        got.verdict = verdict;
        got.events = evs;
        if (reached) {
          const r = v.reason || v.shadowed;
          if (r === DenyReason.RetryBudget) reached.retryBudgetDenials++;
          if (r === DenyReason.Throttled) reached.throttleDenials++;
          if (v.shadowed !== DenyReason.None && v.decision === Decision.Allow) reached.shadowAllows++;
        }
        break;
      }
      case "report": {
        // Would the same report have tripped with the quorum off? Then a
        // trip the real policy did not make was held back by the quorum.
        const without = reached && p.tripQuorum > 1 && o.report!.outcome === Outcome.TransientFailure
          ? copyState(s) : undefined;
        const [res, evs] = s.report(p, st.now, o.report!, o.jitter);
        if (without && reached) {
          const [, evs2] = without.report({ ...p, tripQuorum: 0 }, st.now, o.report!, o.jitter);
          const tripped = (e: typeof evs) => e.some((x) => x.to === Phase.Open && x.cause === Cause.Breaker);
          if (tripped(evs2) && !tripped(evs)) reached.quorumBlockedTrips++;
          if (tripped(evs)) reached.quorumTrips++;
        }
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
    const counts = s.fleetCounts(p, st.now);
    assert.deepStrictEqual(counts, st.counts, where + ": fleet counts differ");
    if (reached && counts.throttleProbability > 0) reached.throttleProbabilities++;
  });
  return tr.steps.length;
}

test(`breaker: the port equals internal/breaker on ${SEQUENCES} random sequences per seed`, () => {
  let steps = 0, sequences = 0;
  const reached: Reached = { retryBudgetDenials: 0, throttleDenials: 0, shadowAllows: 0, quorumBlockedTrips: 0, quorumTrips: 0, throttleProbabilities: 0 };
  for (const seed of [1, 2]) {
    const out = execFileSync("go", ["run", "./clients/ts/tools/breakertrace", "-seed", String(seed), "-sequences", String(SEQUENCES),
      "-steps", String(STEPS)], { cwd: repoRoot, maxBuffer: 1 << 30, encoding: "utf8" });
    const lines = out.trim().split("\n");
    assert.equal(lines.length, SEQUENCES);
    lines.forEach((line, i) => {
      steps += replay(JSON.parse(line) as Trace, `seed ${seed} sequence ${i}`, reached);
      sequences++;
    });
  }
  // Fail loudly if the generator stopped producing work.
  assert.ok(steps > sequences * STEPS * 0.8, `only ${steps} steps`);
  // ... and every fleet rule was reached, both ways.
  for (const [rule, n] of Object.entries(reached)) assert.ok(n > 0, `the traces never reached ${rule}: ${JSON.stringify(reached)}`);
  console.log(`breaker differential: ${sequences} sequences, ${steps} steps compared; reached ${JSON.stringify(reached)}`);
});

test("breaker: validatePolicy refuses the knob Policy.Validate refuses, on 4000 random policies", () => {
  const out = execFileSync("go", ["run", "./clients/ts/tools/breakertrace", "-seed", "4", "-policies", "4000"],
    { cwd: repoRoot, maxBuffer: 1 << 28, encoding: "utf8" });
  const cases = out.trim().split("\n").map((l) => JSON.parse(l) as { policy: Policy; refused: string });
  assert.equal(cases.length, 4000);
  const refused = new Map<string, number>();
  for (const c of cases) {
    const msg = validatePolicy(c.policy);
    const key = msg === undefined ? "" : msg.split(" ")[0]!;
    assert.equal(key, c.refused, `${JSON.stringify(c.policy)}: got ${msg}`);
    refused.set(key, (refused.get(key) ?? 0) + 1);
  }
  // Every knob refused at least once, and some policies valid.
  for (const k of ["", ...knobs.filter((k) => k.kind !== "switch").map((k) => k.key)]) {
    assert.ok((refused.get(k) ?? 0) > 0, `no case refused by ${k || "nothing"}: ${JSON.stringify([...refused])}`);
  }
});

test("breaker: the generated knob table is the port's Policy, its defaults and its bounds", () => {
  const def = defaultPolicy();
  assert.deepStrictEqual(Object.keys(def).sort(), knobs.map((k) => k.field).sort(), "one Policy field per knob");
  for (const k of knobs) {
    assert.equal(def[k.field], k.default, `${k.key}'s default`);
    assert.equal(validatePolicy(def), undefined);
    if (k.kind === "switch") {
      assert.match(validatePolicy({ ...def, [k.field]: 1 }) ?? "", new RegExp(`^${k.key} must be true or false`));
      continue;
    }
    // Just past each of the knob's own bounds is refused, naming the knob and the bounds.
    const step = k.kind === "ratio" ? 0.001 : 1;
    const unit = k.unit === "ms" ? "ms" : "";
    const range = `[${k.min}${unit}, ${k.max}${unit}${k.maxExclusive ? ")" : "]"}`;
    for (const v of [k.min - step, k.maxExclusive ? k.max : k.max + step]) {
      const got = validatePolicy({ ...def, [k.field]: v });
      const want = k.kind === "span" && v < 0 ? `${k.key} must not be negative` : `${k.key} must be in ${range}, got ${v}`;
      assert.ok(got?.startsWith(want), `${k.key} = ${v}: got ${got}, want ${want}`);
    }
  }
});

test("breaker: validatePolicy's own rules for values Go cannot hold", () => {
  const base = defaultPolicy();
  const cases: [string, Partial<Record<keyof Policy, unknown>>, string | undefined][] = [
    ["defaults", {}, undefined],
    ["fleet rules on", { throttleK: 2, tripQuorum: 2, shadow: true }, undefined],
    ["fractional count", { tripQuorum: 1.5 }, "trip_quorum must be an integer, got 1.5"],
    ["fractional budget minimum", { retryBudgetMin: 0.5 }, "retry_budget_min must be an integer, got 0.5"],
    ["NaN ratio", { throttleK: NaN }, "throttle_k must be in [0, 10], got NaN"],
    ["missing ratio", { retryBudget: undefined }, "retry_budget must be in [0, 1], got undefined"],
    ["shadow not a boolean", { shadow: 1 }, "shadow must be true or false, got 1"],
    ["K below 1", { throttleK: 0.5 }, "throttle_k must be 0 (off) or in [1, 10], got 0.5"],
    ["no fleet window with a rule on", { fleetWindowMs: 0 },
      "fleet_window must be in [1ms, 600000ms] while retry_budget, throttle_k or trip_quorum is on, got 0ms"],
    ["no fleet window, every rule off", { fleetWindowMs: 0, retryBudget: 0, tripQuorum: 1 }, undefined],
  ];
  for (const [name, over, want] of cases) {
    assert.equal(validatePolicy({ ...base, ...over } as Policy), want, name);
  }
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
