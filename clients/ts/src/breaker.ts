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
  Unavailable: 100,
} as const;
export type DenyReason = (typeof DenyReason)[keyof typeof DenyReason];

const reasonNames = ["none", "cooldown", "open", "probe_in_flight", "quota", "auth", "forced_open", "overloaded"];

/** The snake_case name of a deny reason. */
export function reasonName(r: DenyReason): string {
  if (r === DenyReason.Unavailable) return "unavailable";
  return reasonNames[r] ?? `reason(${r})`;
}

/** An operator's forced state. */
export const Override = { None: 0, ForcedOpen: 1, ForcedClosed: 2 } as const;
export type Override = (typeof Override)[keyof typeof Override];

/** Limits on policy values (internal/breaker). */
export const MaxWindowMs = 10 * 60_000;
export const MaxDurationMs = 7 * 24 * 3600_000;
export const MaxProbes = 16;
export const MaxCount = 100000;
export const MaxReopens = 64;

/** The tunables of one connection's breaker; the same fields as cooldownd's policies. */
export interface Policy {
  /** Trip after this many transient failures in a row (0 disables). Default 5. */
  consecutiveFailures: number;
  /** Trip at this failure fraction over the window, in (0, 1]; 0 disables. Default 0.5. */
  failureRate: number;
  /** Calls the window must hold before failureRate applies. Default 20. */
  minCalls: number;
  /** Sliding window of the failure-rate rule, ms. Default 60 000. */
  windowMs: number;
  /** First breaker open, ms; doubles per consecutive re-open. Default 10 000. */
  openBaseMs: number;
  /** Cap of breaker opens, ms. Default 300 000. */
  openMaxMs: number;
  /** ± fraction of jitter on breaker opens, in [0, 1). Default 0.1. */
  jitter: number;
  /** Cooldown after a 429 without Retry-After, ms. Default 2 000. */
  rateLimitDefaultMs: number;
  /** Least cooldown after an overloaded answer, ms. Default 5 000. */
  overloadFloorMs: number;
  /** Block after an exhausted quota, ms. Default 3 600 000. */
  quotaBlockMs: number;
  /** Block after a rejected credential, ms. Default 300 000. */
  authBlockMs: number;
  /** Probe leases a half-open connection grants at once, 1 to 16. Default 1. */
  maxProbes: number;
  /** A probe lease's time to live, ms. Default 30 000. */
  leaseTtlMs: number;
}

/** cooldownd's documented default policy. */
export function defaultPolicy(): Policy {
  return {
    consecutiveFailures: 5, failureRate: 0.5, minCalls: 20, windowMs: 60_000,
    openBaseMs: 10_000, openMaxMs: 300_000, jitter: 0.1, rateLimitDefaultMs: 2_000,
    overloadFloorMs: 5_000, quotaBlockMs: 3_600_000, authBlockMs: 300_000, maxProbes: 1, leaseTtlMs: 30_000,
  };
}

/** Returns the first nonsensical value of p as an error message, or undefined. */
export function validatePolicy(p: Policy): string | undefined {
  const durations: [string, number][] = [
    ["window", p.windowMs], ["open_base", p.openBaseMs], ["open_max", p.openMaxMs],
    ["rate_limit_default", p.rateLimitDefaultMs], ["overload_floor", p.overloadFloorMs],
    ["quota_block", p.quotaBlockMs], ["auth_block", p.authBlockMs], ["lease_ttl", p.leaseTtlMs],
  ];
  for (const [name, d] of durations) {
    if (!Number.isInteger(d)) return `${name} must be whole milliseconds, got ${d}`;
    if (d < 0) return `${name} must not be negative, got ${d}`;
    if (d > MaxDurationMs) return `${name} must be at most ${MaxDurationMs}ms, got ${d}`;
  }
  const int = (n: number) => Number.isInteger(n);
  if (!int(p.consecutiveFailures) || p.consecutiveFailures < 0 || p.consecutiveFailures > MaxCount)
    return `consecutive_failures must be in [0, ${MaxCount}]`;
  if (Number.isNaN(p.failureRate) || p.failureRate < 0 || p.failureRate > 1)
    return "failure_rate must be in (0, 1] or 0 to disable";
  if (p.failureRate > 0 && rateBasisPoints(p) === 0) return "failure_rate must be at least 0.0001 or 0 to disable";
  if (p.failureRate > 0 && (!int(p.minCalls) || p.minCalls < 1 || p.minCalls > MaxCount))
    return `min_calls must be in [1, ${MaxCount}]`;
  if (p.failureRate > 0 && (p.windowMs < 1 || p.windowMs > MaxWindowMs)) return "window must be in [1ms, 10m]";
  if (p.openBaseMs <= 0) return "open_base must be positive";
  if (p.openMaxMs < p.openBaseMs) return "open_max must be at least open_base";
  if (Number.isNaN(p.jitter) || p.jitter < 0 || p.jitter >= 1) return "jitter must be in [0, 1)";
  if (!int(p.maxProbes) || p.maxProbes < 1 || p.maxProbes > MaxProbes) return `max_probes must be in [1, ${MaxProbes}]`;
  if (p.leaseTtlMs < 1) return "lease_ttl must be positive";
  return undefined;
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

/** One probe lease of a half-open connection. */
export interface Lease { slot: number; token: string; granted: number; expires: number; }

/** The failure-rate rule's two aligned buckets. */
export interface Window { start: number; prevCalls: number; prevFails: number; curCalls: number; curFails: number; }

/** One state change. */
export interface BreakerEvent {
  at: number; from: Phase; to: Phase; cause: Cause; revision: number; actor: string; reason: string;
}

/** Admit's answer for one connection. */
export interface Verdict {
  decision: Decision; reason: DenyReason; retryAfter: number; revision: number; phase: Phase; lease?: Lease;
}

/** The outcome of one admitted call. */
export interface BreakerReport {
  revision: number; leaseToken: string; outcome: Outcome; retryAfter: number; httpStatus: number; errorCode: string;
  /** How many successes admitted under revision this report stands for (a batch); 0 or absent: one. */
  count?: number;
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
export class State {
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

  /** Decides whether one call may go now; on AllowProbe it grants a lease built from nonce. */
  admit(p: Policy, now: number, nonce: string): [Verdict, BreakerEvent[]] {
    const evs = this.settle(now);
    const v: Verdict = { decision: Decision.Allow, reason: DenyReason.None, retryAfter: 0, revision: this.revision, phase: this.currentPhase() };
    if (this.override === Override.ForcedOpen) {
      v.decision = Decision.Deny;
      v.reason = DenyReason.ForcedOpen;
      v.retryAfter = this.overrideUntil > 0 ? this.overrideUntil - now : p.openMaxMs;
    } else if (this.override === Override.ForcedClosed || this.currentPhase() === Phase.Closed) {
      v.decision = Decision.Allow;
    } else if (this.currentPhase() === Phase.Open) {
      v.decision = Decision.Deny;
      v.reason = reasonFor(this.cause);
      v.retryAfter = this.openUntil - now;
    } else if (this.leases.length >= p.maxProbes) {
      v.decision = Decision.Deny;
      v.reason = DenyReason.ProbeInFlight;
      v.retryAfter = Math.min(...this.leases.map((l) => l.expires - now));
    } else {
      const slot = this.freeSlot();
      const l: Lease = { slot, token: leaseToken(this.revision, slot, now, nonce), granted: now, expires: now + p.leaseTtlMs };
      this.leases = [...this.leases, l];
      v.decision = Decision.AllowProbe;
      v.lease = { ...l };
    }
    return [v, evs];
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
    if (r.outcome === Outcome.Canceled || this.override !== Override.None) return [res, evs];
    const before = evs.length;
    if (res.accepted) evs = this.verdict(p, now, r.outcome, Math.max(r.count ?? 0, 1), jitter, evs);
    const [d, cause] = hint(p, r);
    if (d > 0) evs = this.cool(now, now + d, cause, evs);
    res.changed = evs.length > before;
    return [res, evs];
  }

  private verdict(p: Policy, now: number, o: Outcome, n: number, jitter: number, evs: BreakerEvent[]): BreakerEvent[] {
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
          if ((p.consecutiveFailures > 0 && this.consecutive >= p.consecutiveFailures) || this.rateTripped(p, now)) {
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

  /** Sets an operator override until untilMs (0: until changed); None clears it and closes. */
  force(now: number, o: Override, untilMs: number, actor: string, reason: string): BreakerEvent[] {
    const evs = this.settle(now);
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
