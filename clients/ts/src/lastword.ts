// cooldownd's last word per connection, as this process heard it: the
// in-process fallback honours it, so that a call cooldownd did not answer
// in time never goes to a connection the fleet was told to leave alone (a
// primary skipped for its fallback, a cooldown, an open breaker). The Go
// client's client/lastword.go.
//
// A denial of every call (until) and one of retries only (retryUntil: the
// fleet's retry budget was spent) are kept apart: a spent budget says
// nothing against first attempts. A throttled call leaves no word: the
// throttle rejects a share of calls at random, it is not a wait for the
// connection, so the fallback does not deny every call for its retry-after
// (the local breaker's own throttle applies to this process's calls).

import type { Duration } from "@bufbuild/protobuf/wkt";

import { Decision, DenyReason, Outcome } from "./breaker.js";

/** A denial still in force: until when (Unix ms) and why. */
export interface Word {
  until: number;
  reason: DenyReason;
}

/** What is kept per connection: a denial of every call, and one of retries only. */
interface Entry {
  until: number;
  reason: DenyReason;
  retryUntil: number;
}

/** One examined candidate of an AdmitResponse. */
export interface HeardDecision {
  decision: number;
  denyReason: number;
  retryAfter?: Duration;
}

function waitMs(d: Duration | undefined): number {
  return d ? Number(d.seconds) * 1000 + Math.floor(d.nanos / 1e6) : 0;
}

export class LastWords {
  private readonly words = new Map<string, Entry>();

  constructor(private readonly max: number) {}

  /**
   * What cooldownd said of each candidate it examined (retry[i]: the call
   * was a retry there):
   * - a denial with a wait holds until it runs out;
   * - a retry-budget denial holds for retries only, until its wait runs
   *   out; like a throttled call, it says the breaker would admit the call,
   *   so an earlier denial of every call is spent;
   * - an admission clears the word (of a retry: the retry word too, the
   *   budget had room).
   */
  learn(now: number, decisions: readonly HeardDecision[], ids: readonly string[], retry?: readonly boolean[]): void {
    for (let i = 0; i < decisions.length && i < ids.length; i++) {
      const d = decisions[i]!;
      const id = ids[i]!;
      const old = this.words.get(id);
      const w: Entry = old ? { ...old } : { until: 0, reason: DenyReason.None, retryUntil: 0 };
      if (d.decision === Decision.Allow || d.decision === Decision.AllowProbe) {
        if (retry?.[i]) w.retryUntil = 0;
        w.until = 0;
        w.reason = DenyReason.None;
      } else if (d.decision !== Decision.Deny) {
        continue;
      } else if (d.denyReason === DenyReason.Throttled) {
        w.until = 0;
        w.reason = DenyReason.None;
      } else if (d.denyReason === DenyReason.RetryBudget) {
        w.until = 0;
        w.reason = DenyReason.None;
        w.retryUntil = Math.max(w.retryUntil, now + waitMs(d.retryAfter));
      } else {
        const wait = waitMs(d.retryAfter);
        if (wait > 0) this.hear(id, { until: now + wait, reason: d.denyReason as DenyReason, retryUntil: 0 });
        continue;
      }
      if (w.until <= now && w.retryUntil <= now) this.words.delete(id);
      else if (old) this.words.set(id, w);
      else this.hear(id, w);
    }
  }

  /** This process reported a delay that left the connection open: the fallback denies it until the delay runs out. */
  heard(now: number, id: string, outcome: Outcome, delayMs: number): void {
    if (delayMs > 0) this.hear(id, { until: now + delayMs, reason: delayReason(outcome), retryUntil: 0 });
  }

  /** The denial in force for id at now for a call (retry: a retry there), dropping a spent one. */
  get(id: string, now: number, retry = false): Word | undefined {
    const w = this.words.get(id);
    if (w === undefined) return undefined;
    if (now >= w.until && now >= w.retryUntil) {
      this.words.delete(id);
      return undefined;
    }
    if (now < w.until) return { until: w.until, reason: w.reason };
    if (retry) return { until: w.retryUntil, reason: DenyReason.RetryBudget };
    return undefined;
  }

  /** Merges w into the word of id: each deadline the later of the two (a denial of every call keeps its reason). */
  private hear(id: string, w: Entry): void {
    const old = this.words.get(id);
    if (old !== undefined) {
      const merged = { ...w };
      if (old.until >= w.until) {
        merged.until = old.until;
        merged.reason = old.reason;
      }
      merged.retryUntil = Math.max(w.retryUntil, old.retryUntil);
      this.words.set(id, merged);
      return;
    }
    if (this.words.size >= this.max) {
      const last = (e: Entry) => Math.max(e.until, e.retryUntil);
      for (const [k, o] of this.words) {
        if (last(o) < last(w)) {
          this.words.delete(k);
          break;
        }
      }
      if (this.words.size >= this.max) return;
    }
    this.words.set(id, w);
  }
}

/** The reason cooldownd gives for the delay of a report with outcome o. */
function delayReason(o: Outcome): DenyReason {
  switch (o) {
    case Outcome.QuotaExhausted:
      return DenyReason.Quota;
    case Outcome.AuthFailure:
      return DenyReason.Auth;
    case Outcome.Overloaded:
      return DenyReason.Overloaded;
  }
  return DenyReason.Cooldown;
}
