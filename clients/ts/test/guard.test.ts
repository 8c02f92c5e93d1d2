// The guard's next step (src/guard.ts next) against testdata/guard_trace.json,
// the trace Go's guardPolicy.next writes and is checked against
// (client/guard_trace_test.go): both guards decide wait, retry, switch, move
// on or stop alike, with the same delays and the same jitter bounds.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { DenyReason, Outcome, outcomeName, reasonName } from "../src/breaker.js";
import { next, type Budget, type GuardPolicy, type Round, type Step } from "../src/guard.js";
import { repoRoot } from "./helpers.js";

/** One case of testdata/guard_trace.json (its comment describes them); a field left out is 0 or false. */
interface TraceCase {
  policy: { maxRetries: number; maxWaitMs: number; noWait?: boolean; probePollMs: number; backoffBaseMs: number; backoffCapMs: number };
  budget: { retries: number; waitedMs: number; candidates: number; nowMs: number; deadlineMs?: number };
  round: { denied: boolean; reason?: string; retryAfterMs: number; outcome?: string; retryable?: boolean; opened?: boolean };
  jitter: number;
  want: { kind: string; delayMs?: number; jitterBoundMs?: number };
}

const reasons = new Map(Object.values(DenyReason).map((r) => [reasonName(r), r]));
const outcomes = new Map(Object.values(Outcome).map((o) => [outcomeName(o), o]));

function named<T>(m: Map<string, T>, name: string | undefined, what: string): T {
  const v = m.get(name ?? "");
  if (v === undefined) throw new Error(`no ${what} ${String(name)}`);
  return v;
}

/** Runs the TS next on a case: its step and the bound it drew the jitter with (0: no draw). */
function run(tc: TraceCase): { kind: string; delayMs: number; jitterBoundMs: number } {
  let bound = 0;
  const p: GuardPolicy = {
    maxRetries: tc.policy.maxRetries, maxWaitMs: tc.policy.maxWaitMs, noWait: tc.policy.noWait ?? false,
    probePollMs: tc.policy.probePollMs, backoffBaseMs: tc.policy.backoffBaseMs, backoffCapMs: tc.policy.backoffCapMs,
    jitter: (n) => {
      assert.equal(bound, 0, "next draws the jitter once at most");
      assert.ok(n > 0, `a jitter bound ${n} > 0`);
      bound = Math.ceil(n);
      return Math.floor(tc.jitter * bound);
    },
  };
  const b: Budget = { retries: tc.budget.retries, waitedMs: tc.budget.waitedMs, candidates: tc.budget.candidates, nowMs: tc.budget.nowMs,
    deadlineMs: tc.budget.deadlineMs || undefined };
  const r: Round = tc.round.denied
    ? { denied: true, reason: named(reasons, tc.round.reason, "deny reason"), retryAfterMs: tc.round.retryAfterMs }
    : { denied: false, opened: tc.round.opened ?? false,
      cl: { outcome: named(outcomes, tc.round.outcome, "outcome"), retryable: tc.round.retryable ?? false, retryAfterMs: tc.round.retryAfterMs } };
  const st: Step = next(p, b, r);
  assert.ok(Number.isInteger(st.delayMs), `a delay in whole ms, got ${st.delayMs}`);
  return { kind: st.kind, delayMs: st.delayMs, jitterBoundMs: bound };
}

function load(): TraceCase[] {
  const trace = JSON.parse(readFileSync(join(repoRoot, "testdata", "guard_trace.json"), "utf8")) as { cases: TraceCase[] };
  assert.ok(trace.cases.length > 0);
  return trace.cases;
}

/** The cases where the TS next disagrees with the trace, as messages. */
function disagreements(cases: TraceCase[]): string[] {
  const out: string[] = [];
  cases.forEach((tc, i) => {
    const got = run(tc);
    const want = { kind: tc.want.kind, delayMs: tc.want.delayMs ?? 0, jitterBoundMs: tc.want.jitterBoundMs ?? 0 };
    if (got.kind !== want.kind || got.delayMs !== want.delayMs || got.jitterBoundMs !== want.jitterBoundMs) {
      out.push(`case ${i}: want ${JSON.stringify(want)}, got ${JSON.stringify(got)}: ${JSON.stringify(tc)}`);
    }
  });
  return out;
}

test("the guard's next step: testdata/guard_trace.json", () => {
  const cases = load();
  const bad = disagreements(cases);
  assert.deepEqual(bad.slice(0, 5), [], `${bad.length} of ${cases.length} cases differ from Go's next`);
  // The trace reaches every step after a denial and after a failure (Go's
  // test counts the finer branches).
  const reached = new Set(cases.map((c) => `${c.round.denied ? "denial" : "failure"}/${c.want.kind}`));
  for (const k of ["denial/stop", "denial/wait", "denial/next", "failure/stop", "failure/retry", "failure/switch", "failure/next"]) {
    assert.ok(reached.has(k), `the trace never reaches ${k}`);
  }
});

test("a trace that disagrees with next fails the replay", () => {
  // The replay compares the kind, the delay and the jitter's bound: a case
  // changed in any of them is caught.
  const cases = load();
  const wait = cases.find((c) => c.want.kind === "wait" && (c.want.jitterBoundMs ?? 0) > 0)!;
  for (const edit of [
    (c: TraceCase) => { c.want.kind = "stop"; },
    (c: TraceCase) => { c.want.delayMs = (c.want.delayMs ?? 0) + 1; },
    (c: TraceCase) => { c.want.jitterBoundMs = (c.want.jitterBoundMs ?? 0) + 1; },
  ]) {
    const c = structuredClone(wait);
    edit(c);
    assert.equal(disagreements([c]).length, 1);
  }
  assert.deepEqual(disagreements([wait]), []);
});

test("next with the real jitter stays within the documented bounds", () => {
  const p: GuardPolicy = { maxRetries: 5, maxWaitMs: 1000, noWait: false, probePollMs: 1000, backoffBaseMs: 100, backoffCapMs: 300,
    jitter: (n) => Math.floor(Math.random() * n) };
  const b: Budget = { retries: 0, waitedMs: 0, candidates: 1, nowMs: 0 };
  for (let i = 0; i < 1000; i++) {
    const st = next(p, b, { denied: true, reason: DenyReason.Cooldown, retryAfterMs: 200 });
    assert.equal(st.kind, "wait");
    assert.ok(st.delayMs >= 200 && st.delayMs < 230, `wait ${st.delayMs}`);
    [100, 200, 300, 300].forEach((want, r) => {
      const s = next(p, { ...b, retries: r }, { denied: false, opened: false, cl: { outcome: Outcome.TransientFailure, retryable: true, retryAfterMs: 0 } });
      assert.equal(s.kind, "retry");
      assert.ok(s.delayMs >= want / 2 && s.delayMs <= want, `retry ${r + 1}: ${s.delayMs}`);
    });
  }
});
