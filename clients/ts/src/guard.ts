// The guard (client/guard.go): admit → call → classify → report → the next
// step. run does the I/O and the bookkeeping; what to do after a denial or a
// failed call is decided by next, a pure function with the Go guard's inputs
// and outputs (guardPolicy.next, decision 0029). Both are held to one trace,
// testdata/guard_trace.json (client/guard_trace_test.go writes and checks it
// against Go's next, test/guard.test.ts replays it against this one).

import { Decision, DenyReason, Outcome, outcomeName, perCall } from "./breaker.js";
import { classify, type Classification, type Rules } from "./classify.js";
import { readErrorBody, rebuild } from "./body.js";
import type { Admission } from "./admission.js";
import type { Conn } from "./conn.js";
import { DeniedError, GuardError, UnavailableError } from "./errors.js";
import type { Logger } from "./log.js";
import { validConns } from "./admission.js";
import { deniedCause, retryCause, traceAttempt, traceWait, type GuardKind, type Tracing } from "./otel.js";

/** The least delay before retrying an overloaded provider. */
export const OverloadFloorMs = 5_000;
/** The least wait after a denial, so that a denial about to end does not turn into a burst of admits. */
export const MinDenyWaitMs = 10;

/** The knobs of the guard's next step (Go's guardPolicy), in ms. */
export interface GuardPolicy {
  /** Retries of retryable failures, over all candidates. */
  maxRetries: number;
  /** Total wait for denied connections. */
  maxWaitMs: number;
  /** Never wait for a denied connection. */
  noWait: boolean;
  /** Longest wait after ProbeInFlight. */
  probePollMs: number;
  backoffBaseMs: number;
  backoffCapMs: number;
  /** A random whole number in [0, n); n > 0. */
  jitter: (n: number) => number;
}

/** What a guard has used so far, and when it is (Go's budget). */
export interface Budget {
  /** Retries made. */
  retries: number;
  /** Time waited for denied connections, ms. */
  waitedMs: number;
  /** Candidates left. */
  candidates: number;
  /** Unix ms. */
  nowMs: number;
  /** The guard's deadline, Unix ms; undefined: none. */
  deadlineMs?: number | undefined;
}

/** What one round of the guard came to: every candidate denied, or a call that did not succeed (Go's round). */
export type Round =
  | { denied: true; reason: DenyReason; retryAfterMs: number }
  | { denied: false; cl: Pick<Classification, "outcome" | "retryable" | "retryAfterMs">; opened: boolean };

/**
 * What the guard does next: stop (a DeniedError after a denial, the last
 * call's GuardError after a failure); wait delayMs for a denied connection;
 * retry after delayMs (one retry); switch: retry at once, the failed
 * candidate is open now so the next admit picks another (one retry); next:
 * drop the failed (or budget-denied, throttled) candidate and admit the rest.
 */
export type StepKind = "stop" | "wait" | "retry" | "switch" | "next";

export interface Step {
  kind: StepKind;
  /** Of wait and retry; 0 otherwise. */
  delayMs: number;
}

const stop: Step = { kind: "stop", delayMs: 0 };

/**
 * The guard's step after round r, given the budget b. It does no I/O and
 * reads no clock; its only randomness is p.jitter.
 *
 * After a denial it waits the denial's retry-after plus a little jitter
 * (never less, at least MinDenyWaitMs, at most the probe poll when a probe
 * is in flight), unless the guard must not wait, the wait would take the
 * total past the max wait, or it would end past the deadline. A denial that
 * is not a wait for the connection (a retry over the fleet's retry budget,
 * a throttled call) is never waited for: the guard drops that candidate for
 * the next when there is one, else stops.
 *
 * After a failure: a retryable one with retries left is retried, at once on
 * another candidate when its report opened the connection, else after the
 * backoff, unless that would reach the deadline; any other failure of the
 * provider or the credential moves on to the next candidate when there is
 * one; everything else stops.
 */
export function next(p: GuardPolicy, b: Budget, r: Round): Step {
  return r.denied ? afterDenial(p, b, r) : afterFailure(p, b, r);
}

function afterDenial(p: GuardPolicy, b: Budget, r: Extract<Round, { denied: true }>): Step {
  if (perCall(r.reason)) return b.candidates > 1 ? { kind: "next", delayMs: 0 } : stop;
  if (p.noWait) return stop;
  const left = p.maxWaitMs - b.waitedMs;
  let d = Math.max(r.retryAfterMs, MinDenyWaitMs);
  if (r.reason === DenyReason.ProbeInFlight) d = Math.min(d, p.probePollMs);
  if (d > left) return stop;
  d = Math.min(d + p.jitter(Math.floor(d / 10) + 10), left);
  if (b.deadlineMs !== undefined && b.nowMs + d > b.deadlineMs) return stop;
  return { kind: "wait", delayMs: d };
}

function afterFailure(p: GuardPolicy, b: Budget, r: Extract<Round, { denied: false }>): Step {
  const cl = r.cl;
  if (cl.retryable && b.retries < p.maxRetries) {
    if (r.opened && b.candidates > 1) return { kind: "switch", delayMs: 0 };
    const d = retryDelay(p, b.retries + 1, cl);
    if (b.deadlineMs !== undefined && b.nowMs + d >= b.deadlineMs) return stop;
    return { kind: "retry", delayMs: d };
  }
  if (providerFault(cl.outcome) && b.candidates > 1) return { kind: "next", delayMs: 0 };
  return stop;
}

/**
 * The wait before retry n (from 1): exponential backoff with equal jitter,
 * capped; at least the overload floor when overloaded; never shorter than
 * the provider's Retry-After.
 */
export function retryDelay(p: GuardPolicy, n: number, cl: Pick<Classification, "outcome" | "retryAfterMs">): number {
  let d = p.backoffBaseMs;
  for (let i = 1; i < n && d < p.backoffCapMs; i++) d *= 2;
  d = Math.min(d, p.backoffCapMs);
  d = Math.floor(d / 2) + p.jitter(Math.floor(d / 2) + 1);
  if (cl.outcome === Outcome.Overloaded) d = Math.max(d, OverloadFloorMs);
  return Math.max(d, cl.retryAfterMs);
}

/** Whether an outcome is the provider's (or the credential's) failure, after which another candidate may do better. */
export function providerFault(o: Outcome): boolean {
  return o === Outcome.TransientFailure || o === Outcome.RateLimited || o === Outcome.Overloaded ||
    o === Outcome.QuotaExhausted || o === Outcome.AuthFailure;
}

/** A random whole number in [0, n) (0 when n ≤ 0). */
export const randN = (n: number) => (n <= 0 ? 0 : Math.floor(Math.random() * n));

/** What a guarded call receives on each attempt. */
export interface AttemptContext {
  /** The caller's signal (never replaced): pass it to fetch. */
  signal: AbortSignal | undefined;
  /** The admission the attempt runs under (a probe: decision AllowProbe). */
  admission: Admission;
  /** The candidate to call. */
  conn: Conn;
  /** 1 for the first attempt. */
  attempt: number;
}

/** Per-call options of the guards. */
export interface GuardOptions {
  /** The caller's cancellation: never retried, never overridden. */
  signal?: AbortSignal;
  /** A deadline for the whole guarded call, ms from now: waits that would pass it are not made. */
  timeoutMs?: number;
}

/** What the guard needs of the client. */
export interface GuardHost {
  admit(cands: Conn[], opts: { signal?: AbortSignal | undefined; sent?: readonly Conn[] }): Promise<Admission>;
  /** Reports and says whether the connection is open after it. */
  reportOpen(a: Admission, cl: Classification): Promise<boolean>;
  readonly log: Logger;
  readonly rules: Rules;
  now(): number;
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /** The client's spans (otel.ts). */
  readonly tracing?: Tracing;
}

/** Runs one guarded call over the candidates, in order of preference (Go's Client.guard). */
export function run(h: GuardHost, p: GuardPolicy, cands: Conn[], call: (ctx: AttemptContext) => Promise<Response>,
  opts: GuardOptions, kind: GuardKind = "do"): Promise<Response> {
  if (!h.tracing) return guarded(h, p, cands, call, opts);
  return h.tracing.guard(kind, cands.length, () => guarded(h, p, cands, call, opts));
}

async function guarded(h: GuardHost, p: GuardPolicy, cands: Conn[], call: (ctx: AttemptContext) => Promise<Response>,
  opts: GuardOptions): Promise<Response> {
  validConns(cands);
  let signal = opts.signal;
  let deadline: number | undefined;
  if (opts.timeoutMs !== undefined && opts.timeoutMs > 0) {
    deadline = h.now() + opts.timeoutMs;
    const t = AbortSignal.timeout(opts.timeoutMs);
    signal = signal ? AbortSignal.any([signal, t]) : t;
  }
  let live = [...cands];
  let attempts = 0;
  const b: Budget = { retries: 0, waitedMs: 0, candidates: 0, nowMs: 0, deadlineMs: deadline };
  const at = (): Budget => ({ ...b, candidates: live.length, nowMs: h.now() });
  let last: GuardError | undefined;
  const sent: Conn[] = []; // the candidates this call went to: on them it is a retry
  for (;;) {
    if (signal?.aborted) throw ended(signal, last, live[0]!);
    let adm: Admission;
    try {
      adm = await h.admit(live, { signal, sent });
    } catch (e) {
      if (signal?.aborted) throw ended(signal, last, live[0]!);
      if (e instanceof UnavailableError) {
        throw new DeniedError({ conn: live[0]!, reason: DenyReason.Unavailable, retryAfterMs: 0, local: true, attempts, cause: e });
      }
      throw e;
    }
    if (adm.decision === Decision.Deny) {
      const st = next(p, at(), { denied: true, reason: adm.reason, retryAfterMs: adm.retryAfterMs });
      if (st.kind === "stop") {
        throw new DeniedError({ conn: adm.conn, reason: adm.reason, retryAfterMs: adm.retryAfterMs, local: adm.local, attempts, cause: last });
      }
      if (st.kind === "next") {
        // A retry over the fleet's budget or a throttled call: not a wait
        // for the connection; waiting would spend the budget others need.
        h.log.debug("falling back from a fleet rule's denial", { conn: adm.conn.toJSON(), reason: adm.reason });
        live = live.filter((x) => x.idHex !== adm.conn.idHex);
        continue;
      }
      h.log.debug("waiting for a denied connection", { conn: adm.conn.toJSON(), wait_ms: st.delayMs });
      traceWait(st.delayMs, deniedCause(adm.reason));
      try {
        await h.sleep(st.delayMs, signal);
      } catch {
        throw ended(signal!, last, adm.conn);
      }
      b.waitedMs += st.delayMs;
      continue;
    }

    attempts++;
    if (!adm.retry && !sent.some((x) => x.idHex === adm.conn.idHex)) sent.push(adm.conn);
    const { resp, cl, err } = await traceAttempt(adm, attempts, () => attempt(h.rules, adm, attempts, call, signal));
    let open = false;
    try {
      open = await h.reportOpen(adm, cl);
    } catch (e) {
      h.log.debug("report failed", { conn: adm.conn.toJSON(), error: String(e) });
    }
    if (cl.outcome === Outcome.Success) return resp!;
    last = new GuardError({ conn: adm.conn, attempts, lastOutcome: cl.outcome, errorCode: cl.errorCode, httpStatus: cl.httpStatus,
      retryAfterMs: cl.retryAfterMs, tooLong: cl.tooLong, response: resp, cause: err });
    if (signal?.aborted) throw ended(signal, last, adm.conn);
    const st = next(p, at(), { denied: false, cl, opened: open });
    switch (st.kind) {
      case "retry":
        b.retries++;
        h.log.debug("retrying provider call", { conn: adm.conn.toJSON(), attempt: attempts, outcome: outcomeName(cl.outcome),
          http_status: cl.httpStatus, error_code: cl.errorCode, delay_ms: st.delayMs });
        traceWait(st.delayMs, retryCause(cl.outcome));
        try {
          await h.sleep(st.delayMs, signal);
        } catch {
          throw ended(signal!, last, adm.conn);
        }
        break;
      case "switch":
        b.retries++; // the next admit picks another candidate at once
        break;
      case "next":
        h.log.debug("moving on to the next candidate", { conn: adm.conn.toJSON(), outcome: outcomeName(cl.outcome), error_code: cl.errorCode });
        live = live.filter((x) => x.idHex !== adm.conn.idHex);
        break;
      default:
        throw last;
    }
  }
}

/** Makes one call and classifies it; a non-2xx response's body is read (bounded) and put back. */
async function attempt(rules: Rules, adm: Admission, n: number, call: (ctx: AttemptContext) => Promise<Response>,
  signal: AbortSignal | undefined): Promise<{ resp?: Response; cl: Classification; err?: unknown }> {
  let resp: Response | undefined;
  let err: unknown;
  try {
    resp = await call({ signal, admission: adm, conn: adm.conn, attempt: n });
    if (!resp) err = new Error("client: call returned no response");
  } catch (e) {
    err = e;
  }
  let body: Uint8Array | undefined;
  if (resp && (resp.status < 200 || resp.status > 299)) {
    body = await readErrorBody(resp, rules.maxBodyBytes!, signal);
    resp = rebuild(resp, body);
  }
  const abortReason = signal?.aborted ? (signal.reason ?? true) : undefined;
  return { resp, cl: classify(rules, resp, body, err, abortReason), err };
}

/** The error of a guard whose signal ended: the last attempt's, or a canceled-only one when no call was made. */
function ended(signal: AbortSignal, last: GuardError | undefined, conn: Conn): Error {
  if (last) return last;
  const reason = signal.reason;
  const timeout = typeof reason === "object" && reason !== null && (reason as Error).name === "TimeoutError";
  return new GuardError({ conn, attempts: 0, lastOutcome: Outcome.Canceled, errorCode: timeout ? "deadline_exceeded" : "canceled",
    httpStatus: 0, retryAfterMs: 0, tooLong: false, cause: reason });
}
