// The degradation rule of the Go client (client/health.go): one failed
// call is decided for that call only; the client leaves cooldownd after
// `after` consecutive no-answer calls within `windowMs` that reached every
// endpoint, and comes back after one answer.

import type { Logger } from "./log.js";

export class Health {
  private fails = 0;
  private first = 0;
  private failed = new Set<number>();
  private degraded = false;
  private nextTry = 0;
  outages = 0;

  constructor(
    private readonly after: number,
    private readonly windowMs: number,
    private readonly everyMs: number,
    private readonly endpoints: number,
    private readonly failMode: string,
    private readonly log: Logger,
    /** The client degrades: calls are decided in-process (the mirror is emptied). */
    private readonly onDown: () => void,
    private readonly onUp: () => void,
  ) {}

  /** Whether a call should go to cooldownd now; while degraded, once per retry interval. */
  useService(now: number): boolean {
    if (!this.degraded) return true;
    if (now < this.nextTry) return false;
    this.nextTry = now + this.everyMs;
    return true;
  }

  isDegraded(): boolean { return this.degraded; }

  /** Records a call that none of the endpoints it tried answered. */
  failure(now: number, op: string, tried: number[], code: string, err: unknown): boolean {
    if (this.degraded) {
      this.nextTry = now + this.everyMs;
      return true;
    }
    if (this.fails === 0 || now - this.first > this.windowMs) {
      this.fails = 0;
      this.first = now;
      this.failed.clear();
    }
    this.fails++;
    for (const e of tried) this.failed.add(e);
    if (this.fails < this.after || this.failed.size < this.endpoints) {
      this.log.debug("cooldownd call failed; this call is decided in-process", { op, code, consecutive: this.fails });
      return false;
    }
    this.degraded = true;
    this.nextTry = now + this.everyMs;
    this.outages++;
    this.onDown();
    this.log.warn("cooldownd unreachable; deciding in-process until it answers again", {
      op, code, consecutive_failures: this.fails, fail_mode: this.failMode,
      error: err instanceof Error ? err.message : String(err),
    });
    return true;
  }

  /** Records an answer: the streak ends, an outage ends (logged once). */
  success(): void {
    if (this.fails !== 0) {
      this.fails = 0;
      this.failed.clear();
    }
    const was = this.degraded;
    this.degraded = false;
    if (was) {
      this.log.info("cooldownd reachable again; deciding through it", {});
      this.onUp();
    }
  }
}
