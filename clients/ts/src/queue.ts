// The report queue of the Go client (client/queue.go): reports cooldownd
// did not take at once, bounded, leased first, the oldest non-lease
// dropped first, none older than maxAge; a delayed hint carries only what
// is left of it; every resend carries the report's idempotency key. An
// item is one report or one ReportBatch of the mirror's (decision 0065).

import { Outcome } from "./breaker.js";
import type { ReportBatchRequest, ReportRequest } from "./gen/v1/cooldown_pb.js";

export const DefaultReportQueueSize = 1024;
export const DefaultReportQueueMaxAgeMs = 60_000;
export const QueueBackoffBaseMs = 100;
export const QueueBackoffCapMs = 5_000;

/**
 * A report cooldownd has not accepted yet: the request is kept as built,
 * with its idempotency key, and sent again as is (only its delay shrinks,
 * see remainingHint), so cooldownd counts it once.
 */
export interface PendingReport {
  /** One report, or one batch of the mirror's successes (one item, sent as is with its key). */
  req: ReportRequest | ReportBatchRequest;
  /** The report's delay as observed, ms (0 for a batch). */
  hintMs: number;
  observed: number;
}

/** Whether req is a batch of reports. */
export function isBatch(req: ReportRequest | ReportBatchRequest): req is ReportBatchRequest {
  return req.$typeName === "cooldown.v1.ReportBatchRequest";
}

const leased = (p: PendingReport) => !isBatch(p.req) && p.req.leaseToken !== "";

/** Whether p is no longer worth sending; a batch goes stale by its age only. */
export function stale(p: PendingReport, now: number, maxAgeMs: number): boolean {
  const age = now - p.observed;
  if (age > maxAgeMs) return true;
  if (isBatch(p.req) || leased(p) || p.hintMs <= 0 || age < p.hintMs) return false;
  const o = p.req.outcome as number;
  return o === Outcome.Success || o === Outcome.RateLimited || o === Outcome.Overloaded;
}

/** What is left of p's delay now, at least 1 ms; 0 when it has none. */
export function remainingHint(p: PendingReport, now: number): number {
  if (p.hintMs <= 0) return 0;
  return Math.max(p.hintMs - (now - p.observed), 1);
}

/** The counters of the report queue. */
export interface QueueStats {
  len: number; queued: number; delivered: number; dropped: number; stale: number; rejected: number;
}

export class ReportQueue {
  private leasedList: PendingReport[] = [];
  private plain: PendingReport[] = [];
  running = false;
  private inflight = 0;
  readonly stats: Omit<QueueStats, "len"> = { queued: 0, delivered: 0, dropped: 0, stale: 0, rejected: 0 };

  constructor(readonly size: number, readonly maxAgeMs: number) {}

  /** Queues p at the back, or (sent back after a failed try) at the front; true: start a sender. */
  push(p: PendingReport, front: boolean): boolean {
    const list = leased(p) ? this.leasedList : this.plain;
    if (front) {
      list.unshift(p);
      this.inflight--;
    } else {
      list.push(p);
      this.stats.queued++;
    }
    while (this.leasedList.length + this.plain.length > this.size) {
      if (this.plain.length > 0) this.plain.shift();
      else this.leasedList.shift();
      this.stats.dropped++;
    }
    if (this.running) return false;
    this.running = true;
    return true;
  }

  /** Pops the report to send now, leased first, dropping stale ones; undefined: the sender stops. */
  next(now: number): PendingReport | undefined {
    for (const list of [this.leasedList, this.plain]) {
      while (list.length > 0) {
        const p = list.shift()!;
        if (stale(p, now, this.maxAgeMs)) {
          this.stats.stale++;
          continue;
        }
        this.inflight++;
        return p;
      }
    }
    this.running = false;
    return undefined;
  }

  settled(delivered: boolean): void {
    this.inflight--;
    if (delivered) this.stats.delivered++;
    else this.stats.rejected++;
  }

  /** True when reports wait and no sender runs: the caller must start one. */
  kick(): boolean {
    if (this.running || this.leasedList.length + this.plain.length === 0) return false;
    this.running = true;
    return true;
  }

  stop(): void { this.running = false; }

  snapshot(): QueueStats {
    return { ...this.stats, len: this.leasedList.length + this.plain.length + this.inflight };
  }
}
