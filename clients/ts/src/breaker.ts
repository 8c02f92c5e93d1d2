// The breaker state machine of internal/breaker, ported for the in-process
// fallback. It must stay equal to the Go model: test/breaker.test.ts replays
// random operation sequences generated and applied by the Go package
// (tools/breakertrace) and compares every step.
//
// Times are Unix milliseconds and durations milliseconds, as in the Go
// model's integer arithmetic (which the Redis scripts share).

/** A connection's breaker state. The numbers match the wire enum. */
export const Phase = { Closed: 1, Open: 2, HalfOpen: 3 } as const;
export type Phase = (typeof Phase)[keyof typeof Phase];

/** Why a connection is open, or what caused its last transition. */
export const Cause = {
  None: 0, Breaker: 1, RateLimit: 2, Overload: 3, Quota: 4, Auth: 5, Forced: 6, Reset: 7,
  ProbeSuccess: 8, OpenExpired: 9, ForceExpired: 10, OverrideCleared: 11,
} as const;
export type Cause = (typeof Cause)[keyof typeof Cause];

/** What one provider call amounted to. The numbers match the wire enum. */
export const Outcome = {
  Unspecified: 0, Success: 1, TransientFailure: 2, RateLimited: 3, Overloaded: 4,
  QuotaExhausted: 5, AuthFailure: 6, ClientError: 7, Canceled: 8,
} as const;
export type Outcome = (typeof Outcome)[keyof typeof Outcome];

const outcomeNames = ["unspecified", "success", "transient_failure", "rate_limited", "overloaded",
  "quota_exhausted", "auth_failure", "client_error", "canceled"] as const;

/** The snake_case name of an outcome, as the Go client prints it. */
export function outcomeName(o: Outcome): string {
  return outcomeNames[o] ?? `outcome(${o})`;
}

/** Admit's answer. The numbers match the wire enum. */
export const Decision = { Allow: 1, AllowProbe: 2, Deny: 3 } as const;
export type Decision = (typeof Decision)[keyof typeof Decision];

/** Why a call was denied. The numbers match the wire enum; Unavailable is client-side only. */
export const DenyReason = {
  None: 0, Cooldown: 1, Open: 2, ProbeInFlight: 3, Quota: 4, Auth: 5, ForcedOpen: 6, Overloaded: 7,
  /** A retry over the fleet's retry budget: fall back, do not wait. */
  RetryBudget: 8,
  /** The fleet's adaptive throttle rejected this call: fall back or fail it, do not wait. */
  Throttled: 9,
  Unavailable: 100,
} as const;
export type DenyReason = (typeof DenyReason)[keyof typeof DenyReason];

const reasonNames = ["none", "cooldown", "open", "probe_in_flight", "quota", "auth", "forced_open", "overloaded",
  "retry_budget", "throttled"];

/**
 * Whether a denial is a fleet rule's verdict on this one call (retry budget,
 * throttle) rather than on the connection: the caller falls back or fails
 * at once and never waits for its retryAfter.
 */
export function perCall(r: DenyReason): boolean {
  return r === DenyReason.RetryBudget || r === DenyReason.Throttled;
}

/** The snake_case name of a deny reason. */
export function reasonName(r: DenyReason): string {
  if (r === DenyReason.Unavailable) return "unavailable";
  return reasonNames[r] ?? `reason(${r})`;
}

/** An operator's forced state. */
export const Override = { None: 0, ForcedOpen: 1, ForcedClosed: 2 } as const;
export type Override = (typeof Override)[keyof typeof Override];

// The knob table, Policy, defaultPolicy, the limits and the state's shapes
// are generated from internal/breaker (knobs.gen.ts, by make generate).
import {
  MaxCount, MaxReopens, MaxWindowMs, ThrottleRetryAfterMs, knobs, type Fleet, type Knob, type Lease, type Policy, type Reporter,
  type StateFields, type Window,
} from "./knobs.gen.js";
export {
  MaxCount, MaxDurationMs, MaxProbes, MaxQuorum, MaxReopens, MaxWindowMs, ThrottleRetryAfterMs, defaultPolicy, knobs,
  stateFields, type Fleet, type Knob, type KnobKind, type Lease, type Policy, type Reporter, type StateFields, type Window,
} from "./knobs.gen.js";

function knob(field: keyof Policy): Knob {
  const k = knobs.find((k) => k.field === field);
  if (k === undefined) throw new Error(`breaker: no knob ${field}`);
  return k;
}

/** Caps the retry budget's per-second minimum (the knob's own maximum). */
export const MaxRetryBudgetMin = knob("retryBudgetMin").max;
/** Caps the adaptive throttle's K (the knob's own maximum). */
export const MaxThrottleK = knob("throttleK").max;

function bounds(k: Knob): string {
  const f = (v: number) => (k.kind === "span" ? `${v}ms` : String(v));
  return `[${f(k.min)}, ${f(k.max)}${k.maxExclusive ? ")" : "]"}`;
}

function checkKnob(k: Knob, p: Policy): string | undefined {
  const raw: unknown = p[k.field];
  if (k.kind === "switch") return typeof raw === "boolean" ? undefined : `${k.key} must be true or false, got ${String(raw)}`;
  if (typeof raw !== "number" || Number.isNaN(raw)) return `${k.key} must be in ${bounds(k)}, got ${String(raw)}`;
  const v = raw;
  if (k.kind === "span" && v < 0) return `${k.key} must not be negative, got ${v}ms`;
  if (v < k.min || v > k.max || (k.maxExclusive && v === k.max)) return `${k.key} must be in ${bounds(k)}, got ${k.kind === "span" ? v + "ms" : v}`;
  if (k.kind === "span" && !Number.isInteger(v)) return `${k.key} must be whole milliseconds, got ${v}ms`;
  if (k.kind === "count" && !Number.isInteger(v)) return `${k.key} must be an integer, got ${v}`;
  return undefined;
}

/**
 * Returns the first nonsensical value of p as an error message naming its
 * policy-file key ("jitter must be in [0, 1), got 1"), or undefined: as
 * Policy.Validate, each knob's own bounds first in the knobs' order, then
 * the rules between knobs. Counts must also be integers and spans whole
 * milliseconds.
 */
export function validatePolicy(p: Policy): string | undefined {
  for (const k of knobs) {
    const bad = checkKnob(k, p);
    if (bad !== undefined) return bad;
  }
  const rate = " while failure_rate is on";
  if (p.failureRate > 0 && rateBasisPoints(p) === 0) {
    return `failure_rate must be at least 0.0001 (one basis point) or 0 to disable, got ${p.failureRate}`;
  }
  if (p.failureRate > 0 && p.minCalls < 1) return `min_calls must be in [1, ${MaxCount}]${rate}, got ${p.minCalls}`;
  if (p.failureRate > 0 && (p.windowMs < 1 || p.windowMs > MaxWindowMs)) {
    return `window must be in [1ms, ${MaxWindowMs}ms]${rate}, got ${p.windowMs}ms`;
  }
  if (p.openBaseMs <= 0) return `open_base must be positive, got ${p.openBaseMs}ms`;
  if (p.openMaxMs < p.openBaseMs) return `open_max (${p.openMaxMs}ms) must be at least open_base (${p.openBaseMs}ms)`;
  if (p.retryBudget > 0 && retryBudgetBasisPoints(p) === 0) {
    return `retry_budget must be at least 0.0001 (one basis point) or 0 to disable, got ${p.retryBudget}`;
  }
  if (p.throttleK > 0 && p.throttleK < 1) return `throttle_k must be 0 (off) or in [1, ${MaxThrottleK}], got ${p.throttleK}`;
  if (fleetRulesOn(p) && (p.fleetWindowMs < 1 || p.fleetWindowMs > MaxWindowMs)) {
    return `fleet_window must be in [1ms, ${MaxWindowMs}ms] while retry_budget, throttle_k or trip_quorum is on, got ${p.fleetWindowMs}ms`;
  }
  return undefined;
}

/** Whether a rule that reads the fleet window is on. */
function fleetRulesOn(p: Policy): boolean {
  return p.retryBudget > 0 || p.throttleK > 0 || p.tripQuorum > 1;
}

/** RetryBudget in basis points (1..10000), 0 when disabled. */
export function retryBudgetBasisPoints(p: Policy): number {
  return Math.round(p.retryBudget * 10000);
}

/** FailureRate in basis points (1..10000), 0 when disabled. */
export function rateBasisPoints(p: Policy): number {
  // Go's math.Round rounds half away from zero; for the non-negative rates
  // here that is Math.round.
  return Math.round(p.failureRate * 10000);
}

/** The breaker open duration after `reopens` (≥ 1) consecutive re-opens, with jitter r in [0, 1). */
export function openDuration(p: Policy, reopens: number, r: number): number {
  const base = p.openBaseMs, maxD = p.openMaxMs;
  let d = base;
  for (let i = 1; i < reopens && d < maxD; i++) d *= 2;
  d = Math.min(d, maxD);
  if (p.jitter > 0) d += Math.floor(d * p.jitter * (2 * r - 1));
  return Math.max(Math.min(d, maxD), 1);
}

/** The call an admit is for. */
export interface Attempt {
  /** Random, from the caller: a probe lease's token is built from it. */
  nonce: string;
  /** The call was already sent to this connection: a retry, charged to the fleet retry budget. */
  retry?: boolean;
  /** Uniform in [0, 1): the throttle rejects the call when its probability is above it. */
  draw?: number;
}

/** What the fleet rules see at one instant (counts in calls). */
export interface FleetCounts {
  firstAttempts: number; retries: number; requests: number; accepts: number;
  throttleProbability: number; failureReporters: number;
}

/** One state change. */
export interface BreakerEvent {
  at: number; from: Phase; to: Phase; cause: Cause; revision: number; actor: string; reason: string;
}

/** Admit's answer for one connection. */
export interface Verdict {
  decision: Decision; reason: DenyReason; retryAfter: number; revision: number; phase: Phase; lease?: Lease;
  /** In shadow mode: why the policy would have denied the call decision allows (None otherwise), and its wait (ms). */
  shadowed: DenyReason; shadowRetryAfter: number;
}

/** The outcome of one admitted call. */
export interface BreakerReport {
  revision: number; leaseToken: string; outcome: Outcome; retryAfter: number; httpStatus: number; errorCode: string;
  /** How many successes admitted under revision this report stands for (a batch); 0 or absent: one. */
  count?: number;
  /** The call was a retry on this connection: only first attempts are the retry budget's base. */
  retry?: boolean;
  /** The reporting process, for the trip quorum; reports without one count as one reporter together. */
  reporter?: string;
}

/** What a report did. */
export interface ReportResult { accepted: boolean; changed: boolean; }

/** Thrown by extendLease when the token names no live lease. */
export class LeaseNotHeldError extends Error {
  constructor() { super("breaker: lease not held"); this.name = "LeaseNotHeldError"; }
}

/** Formats a lease token: "<revision>.<slot>.<granted ms>.<nonce>". */
export function leaseToken(rev: number, slot: number, granted: number, nonce: string): string {
  return `${rev}.${slot}.${granted}.${nonce}`;
}

function reasonFor(c: Cause): DenyReason {
  switch (c) {
    case Cause.RateLimit: return DenyReason.Cooldown;
    case Cause.Overload: return DenyReason.Overloaded;
    case Cause.Quota: return DenyReason.Quota;
    case Cause.Auth: return DenyReason.Auth;
    case Cause.Forced: return DenyReason.ForcedOpen;
  }
  return DenyReason.Open;
}

function nextRevision(rev: number, at: number): number {
  return rev === 0 && at > 0 ? at : rev + 1;
}

/** One connection's breaker state; a new State is a connection never seen (closed, revision 0). */
export class State implements StateFields {
  phase: Phase | 0 = 0;
  cause: Cause = Cause.None;
  revision = 0;
  openUntil = 0;
  reopens = 0;
  consecutive = 0;
  window: Window = emptyWindow();
  override: Override = Override.None;
  overrideUntil = 0;
  leases: Lease[] = [];
  successes = 0;
  failures = 0;
  lastStatus = 0;
  lastOutcome: Outcome = Outcome.Unspecified;
  lastErrorCode = "";
  changedAt = 0;
  updatedAt = 0;
  /** The fleet rules' counts. */
  fleet: Fleet = emptyFleet(0);
  /** The trip quorum's recent reporters of ambiguous failures, oldest first. */
  reporters: Reporter[] = [];

  /** The phase, closed for a connection never seen. */
  currentPhase(): Phase { return this.phase === 0 ? Phase.Closed : this.phase; }

  private transition(at: number, to: Phase, cause: Cause, actor: string, reason: string): BreakerEvent {
    this.revision = nextRevision(this.revision, at);
    const ev: BreakerEvent = { at, from: this.currentPhase(), to, cause, revision: this.revision, actor, reason };
    this.phase = to;
    this.cause = cause;
    this.changedAt = at;
    this.successes = 0;
    this.failures = 0;
    this.leases = [];
    if (to !== Phase.Open) this.openUntil = 0;
    return ev;
  }

  private resetCounts(): void {
    this.consecutive = 0;
    this.window = emptyWindow();
    this.reporters = [];
  }

  /** Applies what time alone does: leases lapse, an override ends, an ended open turns half-open. */
  settle(now: number): BreakerEvent[] {
    if (this.leases.some((l) => l.expires <= now)) this.leases = this.leases.filter((l) => l.expires > now);
    const evs: BreakerEvent[] = [];
    if (this.override !== Override.None && this.overrideUntil > 0 && now >= this.overrideUntil) {
      const forced = this.override, at = this.overrideUntil;
      this.override = Override.None;
      this.overrideUntil = 0;
      if (forced === Override.ForcedOpen) {
        evs.push(this.transition(at, Phase.HalfOpen, Cause.ForceExpired, "", ""));
      } else {
        this.resetCounts();
        evs.push(this.transition(at, Phase.Closed, Cause.ForceExpired, "", ""));
      }
    }
    if (this.override === Override.None && this.currentPhase() === Phase.Open && now >= this.openUntil) {
      evs.push(this.transition(this.openUntil, Phase.HalfOpen, Cause.OpenExpired, "", ""));
    }
    return evs;
  }

  /**
   * Decides whether one call may go now; on AllowProbe it grants a lease
   * built from a.nonce. The fleet rules may deny a call the breaker admits:
   * while closed the throttle (a.draw), then for a retry, closed or
   * half-open, the retry budget. A shadow policy allows what it would deny
   * and says why in shadowed; overrides are enforced whatever the policy.
   */
  admit(p: Policy, now: number, a: Attempt): [Verdict, BreakerEvent[]] {
    const evs = this.settle(now);
    const v: Verdict = {
      decision: Decision.Allow, reason: DenyReason.None, retryAfter: 0, revision: this.revision, phase: this.currentPhase(),
      shadowed: DenyReason.None, shadowRetryAfter: 0,
    };
    if (this.override === Override.ForcedOpen) {
      v.decision = Decision.Deny;
      v.reason = DenyReason.ForcedOpen;
      v.retryAfter = this.overrideUntil > 0 ? this.overrideUntil - now : p.openMaxMs;
      return [v, evs];
    }
    if (this.override === Override.ForcedClosed) return [v, evs];
    const phase = this.currentPhase();
    if (phase === Phase.Closed) {
      this.fleetRules(p, now, a, v);
    } else if (phase === Phase.Open) {
      v.decision = Decision.Deny;
      v.reason = reasonFor(this.cause);
      v.retryAfter = this.openUntil - now;
    } else if (this.leases.length >= p.maxProbes) {
      v.decision = Decision.Deny;
      v.reason = DenyReason.ProbeInFlight;
      v.retryAfter = Math.min(...this.leases.map((l) => l.expires - now));
    } else {
      v.decision = Decision.AllowProbe;
      this.fleetRules(p, now, a, v);
      if (v.decision === Decision.AllowProbe) {
        const slot = this.freeSlot();
        const l: Lease = { slot, token: leaseToken(this.revision, slot, now, a.nonce), granted: now, expires: now + p.leaseTtlMs };
        this.leases = [...this.leases, l];
        v.lease = { ...l };
      }
    }
    if (v.decision === Decision.Deny && p.shadow) {
      v.shadowed = v.reason;
      v.shadowRetryAfter = v.retryAfter;
      v.decision = Decision.Allow;
      v.reason = DenyReason.None;
      v.retryAfter = 0;
    }
    // An admit never creates a state: a connection never reported nor forced counts nothing here.
    if (!this.seen()) {
      // nothing counted
    } else if (v.decision === Decision.Deny && v.reason === DenyReason.Throttled) {
      // A rejected call is one of the throttle's requests (an allowed one counts when it is reported).
      this.countFleet(p, now, (f) => { f.curRequests++; });
    } else if (a.retry && v.decision !== Decision.Deny && retryBudgetBasisPoints(p) > 0) {
      this.countFleet(p, now, (f) => { f.curRetries++; });
    }
    return [v, evs];
  }

  /** Whether the connection has a state: it was reported on, or changed (forced) at least once. */
  private seen(): boolean {
    return this.revision > 0 || this.updatedAt > 0;
  }

  /** Denies a call the breaker admits when a fleet rule says so. */
  private fleetRules(p: Policy, now: number, a: Attempt, v: Verdict): void {
    if (this.currentPhase() === Phase.Closed && (a.draw ?? 0) < this.throttleProbability(p, now)) {
      v.decision = Decision.Deny;
      v.reason = DenyReason.Throttled;
      v.retryAfter = ThrottleRetryAfterMs;
    } else if (a.retry && !this.budgetAllows(p, now)) {
      const w = p.fleetWindowMs;
      v.decision = Decision.Deny;
      v.reason = DenyReason.RetryBudget;
      v.retryAfter = w - (now % w);
    }
  }

  /** The fleet counts as of now, rotated without writing: the view a decision reads. */
  private fleetAt(p: Policy, now: number): Fleet {
    const w = p.fleetWindowMs;
    const start = now - (now % w);
    const f = this.fleet;
    if (f.start === start) return { ...f };
    if (f.start === start - w) {
      return { ...emptyFleet(start), prevFirsts: f.curFirsts, prevRetries: f.curRetries, prevRequests: f.curRequests, prevAccepts: f.curAccepts };
    }
    return emptyFleet(start);
  }

  /**
   * The adaptive throttle's rejection probability at now, max(0, (requests −
   * K·accepts) / (requests + 1)) over the fleet window in weighted units, 0
   * when the throttle is off. The same float operations as the Go model
   * (which rounds K·accepts on its own, no fused multiply-add).
   */
  throttleProbability(p: Policy, now: number): number {
    if (!(p.throttleK > 0)) return 0;
    const f = this.fleetAt(p, now), w = p.fleetWindowMs;
    const e = now - f.start;
    const rq = weighted(f.prevRequests, f.curRequests, w, e), ac = weighted(f.prevAccepts, f.curAccepts, w, e);
    return Math.max(0, (rq - p.throttleK * ac) / (rq + w));
  }

  /** Whether one more retry fits the fleet retry budget, in exact integers (every product below 2^53). */
  private budgetAllows(p: Policy, now: number): boolean {
    const bp = retryBudgetBasisPoints(p);
    if (bp <= 0) return true;
    const f = this.fleetAt(p, now), w = p.fleetWindowMs;
    const e = now - f.start;
    const retries = weighted(f.prevRetries, f.curRetries, w, e) + w;
    const firsts = weighted(f.prevFirsts, f.curFirsts, w, e);
    return retries * 10000 <= Math.max(p.retryBudgetMin * w * w * 10, bp * firsts);
  }

  private countFleet(p: Policy, now: number, add: (f: Fleet) => void): void {
    const f = this.fleetAt(p, now);
    add(f);
    f.curFirsts = Math.min(f.curFirsts, MaxCount);
    f.curRetries = Math.min(f.curRetries, MaxCount);
    f.curRequests = Math.min(f.curRequests, MaxCount);
    f.curAccepts = Math.min(f.curAccepts, MaxCount);
    this.fleet = f;
  }

  /** Counts a reported call for the rules that are on. */
  private countReport(p: Policy, now: number, r: BreakerReport): void {
    const firsts = retryBudgetBasisPoints(p) > 0 && !r.retry;
    const throttle = p.throttleK > 0;
    if (r.outcome === Outcome.Canceled || (!firsts && !throttle)) return;
    const n = r.outcome === Outcome.Success ? Math.max(r.count ?? 0, 1) : 1;
    this.countFleet(p, now, (f) => {
      if (firsts) f.curFirsts += n;
      if (throttle) {
        f.curRequests += n;
        if (r.outcome === Outcome.Success || r.outcome === Outcome.ClientError) f.curAccepts += n;
      }
    });
  }

  /** How many distinct reporters saw an ambiguous failure within the fleet window before now. */
  failureReporters(p: Policy, now: number): number {
    const cut = now - p.fleetWindowMs;
    return this.reporters.filter((r) => r.at > cut).length;
  }

  private sawFailure(p: Policy, now: number, id: string): void {
    if (p.tripQuorum <= 1) return;
    const cut = now - p.fleetWindowMs;
    let rs = this.reporters.filter((r) => !(r.at <= cut || r.id === id));
    rs.push({ id, at: now });
    if (rs.length > p.tripQuorum) rs = rs.slice(rs.length - p.tripQuorum);
    this.reporters = rs;
  }

  private quorate(p: Policy, now: number): boolean {
    return p.tripQuorum <= 1 || this.failureReporters(p, now) >= p.tripQuorum;
  }

  /** The fleet rules' view at now under p, for display. */
  fleetCounts(p: Policy, now: number): FleetCounts {
    const c: FleetCounts = {
      firstAttempts: 0, retries: 0, requests: 0, accepts: 0,
      throttleProbability: this.throttleProbability(p, now), failureReporters: this.failureReporters(p, now),
    };
    const w = p.fleetWindowMs;
    if (!(w > 0)) return c;
    const f = this.fleetAt(p, now);
    const e = now - f.start;
    const calls = (prev: number, cur: number) => weighted(prev, cur, w, e) / w;
    c.firstAttempts = calls(f.prevFirsts, f.curFirsts);
    c.retries = calls(f.prevRetries, f.curRetries);
    c.requests = calls(f.prevRequests, f.curRequests);
    c.accepts = calls(f.prevAccepts, f.curAccepts);
    return c;
  }

  private freeSlot(): number {
    for (let slot = 0; ; slot++) if (!this.leases.some((l) => l.slot === slot)) return slot;
  }

  private leaseIndex(token: string): number {
    return token === "" ? -1 : this.leases.findIndex((l) => l.token === token);
  }

  /** Moves a live lease's expiry to now+ttl; throws LeaseNotHeldError. */
  extendLease(now: number, token: string, ttl: number): [Lease, BreakerEvent[]] {
    const evs = this.settle(now);
    const i = this.leaseIndex(token);
    if (i < 0) throw Object.assign(new LeaseNotHeldError(), { events: evs });
    this.leases = this.leases.map((l, j) => (j === i ? { ...l, expires: now + ttl } : l));
    return [{ ...this.leases[i]! }, evs];
  }

  /** Applies the outcome of one call; jitter in [0, 1) spreads a breaker open. */
  report(p: Policy, now: number, r: BreakerReport, jitter: number): [ReportResult, BreakerEvent[]] {
    let evs = this.settle(now);
    this.updatedAt = now;
    this.lastStatus = r.httpStatus;
    this.lastOutcome = r.outcome;
    this.lastErrorCode = r.errorCode;
    const li = this.leaseIndex(r.leaseToken);
    const res: ReportResult = {
      accepted: li >= 0 || (r.revision === this.revision && this.currentPhase() !== Phase.HalfOpen),
      changed: false,
    };
    if (li >= 0) this.leases = this.leases.filter((_, j) => j !== li);
    this.countReport(p, now, r);
    if (r.outcome === Outcome.Canceled || this.override !== Override.None) return [res, evs];
    const before = evs.length;
    if (res.accepted) evs = this.verdict(p, now, r, jitter, evs);
    const [d, cause] = hint(p, r);
    if (d > 0) evs = this.cool(now, now + d, cause, evs);
    res.changed = evs.length > before;
    return [res, evs];
  }

  /**
   * Applies a live report's outcome. An ambiguous failure trips a closed
   * breaker only with the trip quorum; a probe's failure re-opens it
   * whoever reported it.
   */
  private verdict(p: Policy, now: number, r: BreakerReport, jitter: number, evs: BreakerEvent[]): BreakerEvent[] {
    const o = r.outcome, n = Math.max(r.count ?? 0, 1);
    const phase = this.currentPhase();
    switch (o) {
      case Outcome.Success:
      case Outcome.ClientError:
        if (phase === Phase.HalfOpen) {
          this.reopens = 0;
          this.resetCounts();
          return [...evs, this.transition(now, Phase.Closed, Cause.ProbeSuccess, "", "")];
        }
        if (phase === Phase.Closed && o === Outcome.Success) {
          this.successes = Math.min(this.successes + n, MaxCount);
          this.consecutive = 0;
          this.count(p, now, false, n);
        }
        break;
      case Outcome.TransientFailure:
        if (phase === Phase.HalfOpen) return [...evs, this.trip(p, now, jitter)];
        if (phase === Phase.Closed) {
          this.failures = Math.min(this.failures + 1, MaxCount);
          this.consecutive = Math.min(this.consecutive + 1, MaxCount);
          this.count(p, now, true, 1);
          this.sawFailure(p, now, r.reporter ?? "");
          if (((p.consecutiveFailures > 0 && this.consecutive >= p.consecutiveFailures) || this.rateTripped(p, now)) &&
            this.quorate(p, now)) {
            return [...evs, this.trip(p, now, jitter)];
          }
        }
        break;
    }
    return evs;
  }

  private trip(p: Policy, now: number, jitter: number): BreakerEvent {
    this.reopens = Math.min(this.reopens + 1, MaxReopens);
    this.resetCounts();
    const ev = this.transition(now, Phase.Open, Cause.Breaker, "", "");
    this.openUntil = now + openDuration(p, this.reopens, jitter);
    return ev;
  }

  private cool(now: number, until: number, cause: Cause, evs: BreakerEvent[]): BreakerEvent[] {
    if (this.currentPhase() === Phase.Open && this.openUntil >= until) return evs;
    const ev = this.transition(now, Phase.Open, cause, "", "");
    this.openUntil = until;
    return [...evs, ev];
  }

  private count(p: Policy, now: number, failed: boolean, n: number): void {
    if (p.failureRate <= 0) return;
    this.rotate(p, now);
    this.window.curCalls = Math.min(this.window.curCalls + n, MaxCount);
    if (failed) this.window.curFails = Math.min(this.window.curFails + 1, MaxCount);
  }

  private rotate(p: Policy, now: number): void {
    const w = p.windowMs;
    const start = now - (now % w);
    if (this.window.start === start) return;
    if (this.window.start === start - w) {
      this.window = { start, prevCalls: this.window.curCalls, prevFails: this.window.curFails, curCalls: 0, curFails: 0 };
    } else {
      this.window = { ...emptyWindow(), start };
    }
  }

  private rateTripped(p: Policy, now: number): boolean {
    const bp = rateBasisPoints(p);
    if (bp <= 0) return false;
    const w = p.windowMs;
    const e = now - this.window.start;
    const callsW = this.window.prevCalls * (w - e) + this.window.curCalls * w;
    const failsW = this.window.prevFails * (w - e) + this.window.curFails * w;
    return callsW >= p.minCalls * w && failsW * 10000 >= bp * callsW;
  }

  /** Sets an operator override until untilMs (0: until changed); None clears it and closes (with no override, once settled, nothing changes). */
  force(now: number, o: Override, untilMs: number, actor: string, reason: string): BreakerEvent[] {
    const evs = this.settle(now);
    if (o === Override.None && this.override === Override.None) return evs;
    this.override = o;
    this.overrideUntil = untilMs;
    if (o === Override.ForcedOpen) {
      const ev = this.transition(now, Phase.Open, Cause.Forced, actor, reason);
      this.openUntil = untilMs;
      return [...evs, ev];
    }
    if (o === Override.ForcedClosed) {
      this.resetCounts();
      return [...evs, this.transition(now, Phase.Closed, Cause.Forced, actor, reason)];
    }
    this.overrideUntil = 0;
    this.resetCounts();
    return [...evs, this.transition(now, Phase.Closed, Cause.OverrideCleared, actor, reason)];
  }

  /** Clears the connection back to closed, keeping the revision increasing. */
  reset(now: number, actor: string, reason: string): BreakerEvent[] {
    const evs = this.settle(now);
    this.override = Override.None;
    this.overrideUntil = 0;
    this.reopens = 0;
    this.resetCounts();
    return [...evs, this.transition(now, Phase.Closed, Cause.Reset, actor, reason)];
  }
}

/** A count pair over the sliding window in count·ms: exact integers below 2^53. */
function weighted(prev: number, cur: number, w: number, e: number): number {
  return prev * (w - e) + cur * w;
}

function emptyFleet(start: number): Fleet {
  return { start, prevFirsts: 0, curFirsts: 0, prevRetries: 0, curRetries: 0, prevRequests: 0, curRequests: 0, prevAccepts: 0, curAccepts: 0 };
}

function emptyWindow(): Window {
  return { start: 0, prevCalls: 0, prevFails: 0, curCalls: 0, curFails: 0 };
}

/** The cooldown a report asks for whatever its revision, merged with the policy's block. */
function hint(p: Policy, r: BreakerReport): [number, Cause] {
  switch (r.outcome) {
    case Outcome.RateLimited:
      return [r.retryAfter > 0 ? r.retryAfter : p.rateLimitDefaultMs, Cause.RateLimit];
    case Outcome.Overloaded:
      return [Math.max(r.retryAfter, p.overloadFloorMs), Cause.Overload];
    case Outcome.QuotaExhausted:
      return [Math.max(r.retryAfter, p.quotaBlockMs), Cause.Quota];
    case Outcome.AuthFailure:
      return [Math.max(r.retryAfter, p.authBlockMs), Cause.Auth];
  }
  return [r.retryAfter, Cause.RateLimit];
}
