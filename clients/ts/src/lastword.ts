// cooldownd's last word per connection, as this process heard it: the
// in-process fallback honours it, so that a call cooldownd did not answer
// in time never goes to a connection the fleet was told to leave alone (a
// primary skipped for its fallback, a cooldown, an open breaker). The Go
// client's client/lastword.go.

import type { Duration } from "@bufbuild/protobuf/wkt";

import { Decision, DenyReason, Outcome } from "./breaker.js";

/** A denial still in force: until when (Unix ms) and why. */
export interface Word {
  until: number;
  reason: DenyReason;
}

/** One examined candidate of an AdmitResponse. */
export interface HeardDecision {
  decision: number;
  denyReason: number;
  retryAfter?: Duration;
}

export class LastWords {
  private readonly words = new Map<string, Word>();

  constructor(private readonly max: number) {}

  /** What cooldownd said of each candidate it examined: a denial with a wait holds; an admission clears it. */
  learn(now: number, decisions: readonly HeardDecision[], ids: readonly string[]): void {
    for (let i = 0; i < decisions.length && i < ids.length; i++) {
      const d = decisions[i]!;
      if (d.decision === Decision.Allow || d.decision === Decision.AllowProbe) {
        this.words.delete(ids[i]!);
      } else if (d.decision === Decision.Deny && d.retryAfter) {
        const wait = Number(d.retryAfter.seconds) * 1000 + Math.floor(d.retryAfter.nanos / 1e6);
        if (wait > 0) this.hear(ids[i]!, { until: now + wait, reason: d.denyReason as DenyReason });
      }
    }
  }

  /** This process reported a delay that left the connection open: the fallback denies it until the delay runs out. */
  heard(now: number, id: string, outcome: Outcome, delayMs: number): void {
    if (delayMs > 0) this.hear(id, { until: now + delayMs, reason: delayReason(outcome) });
  }

  /** The denial in force for id at now, dropping a spent one. */
  get(id: string, now: number): Word | undefined {
    const w = this.words.get(id);
    if (w === undefined) return undefined;
    if (now >= w.until) {
      this.words.delete(id);
      return undefined;
    }
    return w;
  }

  private hear(id: string, w: Word): void {
    const old = this.words.get(id);
    if (old !== undefined && old.until >= w.until) return;
    if (old === undefined && this.words.size >= this.max) {
      for (const [k, o] of this.words) {
        if (o.until < w.until) {
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
