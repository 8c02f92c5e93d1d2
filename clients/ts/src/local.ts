// The in-process fallback (client/local.go): one breaker state per
// connection, run with the client's local policy for the calls cooldownd
// does not decide, and the denials cooldownd last gave (lastword.ts).

import { randomBytes } from "node:crypto";

import { Decision, DenyReason, Phase, State, type Policy } from "./breaker.js";
import type { Classification } from "./classify.js";
import type { Admission } from "./admission.js";
import type { Conn } from "./conn.js";
import { LastWords } from "./lastword.js";
import type { Logger } from "./log.js";
import { reportDelay } from "./report.js";
import { codeName } from "./transport.js";

/** How many connections the local breaker keeps before it drops the quiet ones. */
const maxLocalStates = 4096;

export class Local {
  private readonly states = new Map<string, State>();
  /** cooldownd's denials still in force. */
  readonly words = new LastWords(maxLocalStates);
  /** Calls decided in-process. */
  decisions = 0;
  private capLogged = false;

  /** policy has no trip quorum: one process is one reporter. */
  constructor(private readonly policy: Policy, private readonly reporter: string, private readonly log: Logger,
    private readonly now: () => number) {}

  /** Records that cooldownd refused a new connection (the tenant's cap); logged once per client. */
  capped(err: unknown): void {
    if (this.capLogged) return;
    this.capLogged = true;
    this.log.warn("cooldownd cannot track more connections of this tenant; their outcomes are not shared", { code: codeName(err) });
  }

  /** Drops the local states: cooldownd is the truth again. */
  forget(): void {
    this.states.clear();
  }

  private state(id: string): State {
    let s = this.states.get(id);
    if (s) return s;
    if (this.states.size >= maxLocalStates) {
      for (const [k, st] of this.states) {
        if (st.phase !== Phase.Open && st.phase !== Phase.HalfOpen && st.consecutive === 0) this.states.delete(k);
      }
    }
    s = new State();
    this.states.set(id, s);
    return s;
  }

  /**
   * Decides with the in-process breakers: the first candidate that may go,
   * else a denial for the one available soonest. A candidate cooldownd last
   * denied is denied until that denial runs out; retry[i] marks the
   * candidates the call was already sent to (the local retry budget charges
   * them), and the throttle draws for every candidate.
   */
  admit(cands: Conn[], retry: boolean[] | undefined): Admission {
    this.decisions++;
    const now = this.now();
    let best: Admission | undefined;
    for (let i = 0; i < cands.length; i++) {
      const c = cands[i]!;
      const r = retry?.[i] ?? false;
      const w = this.words.get(c.idHex, now, r);
      if (w !== undefined) {
        const d: Admission = { index: i, conn: c, decision: Decision.Deny, revision: 0n, leaseToken: "", leaseExpires: 0,
          retryAfterMs: w.until - now, reason: w.reason, local: true, retry: r, shadowReason: DenyReason.None, shadowRetryAfterMs: 0 };
        if (best === undefined || d.retryAfterMs < best.retryAfterMs) best = d;
        continue;
      }
      const st = this.state(c.idHex);
      const [v] = st.admit(this.policy, now, { nonce: randomBytes(9).toString("base64url"), retry: r, draw: Math.random() });
      const a: Admission = { index: i, conn: c, decision: v.decision, revision: BigInt(v.revision), leaseToken: "",
        leaseExpires: 0, retryAfterMs: 0, reason: DenyReason.None, local: true, retry: r, shadowReason: v.shadowed,
        shadowRetryAfterMs: Math.max(v.shadowRetryAfter, 0), throttleProbability: st.throttleProbability(this.policy, now) };
      if (v.decision === Decision.AllowProbe) {
        a.leaseToken = v.lease!.token;
        a.leaseExpires = v.lease!.expires;
        return a;
      }
      if (v.decision === Decision.Allow) return a;
      a.reason = v.reason;
      a.retryAfterMs = Math.max(v.retryAfter, 0);
      if (best === undefined || a.retryAfterMs < best.retryAfterMs) best = a;
    }
    return best!;
  }

  /**
   * Applies a's outcome to its local breaker and says whether it is open
   * after it; fresh: the call was admitted by cooldownd, so the local
   * state's own revision applies.
   */
  report(a: Admission, cl: Classification, fresh: boolean): boolean {
    const s = this.state(a.conn.idHex);
    const rev = fresh ? s.revision : Number(a.revision);
    s.report(this.policy, this.now(), {
      revision: rev, leaseToken: a.leaseToken, outcome: cl.outcome, retryAfter: reportDelay(cl),
      httpStatus: cl.httpStatus, errorCode: cl.errorCode, retry: a.retry ?? false, reporter: this.reporter,
    }, Math.random());
    return s.phase === Phase.Open;
  }

  /** Keeps a local probe's lease for ttlMs (≤ 0: the policy's) and returns its new expiry. */
  extend(a: Admission, ttlMs: number): number {
    const s = this.state(a.conn.idHex);
    const [l] = s.extendLease(this.now(), a.leaseToken, ttlMs > 0 ? ttlMs : this.policy.leaseTtlMs);
    return l.expires;
  }
}

/** The revisions cooldownd last answered per connection, for the reports decided in-process. */
export class Revisions {
  private readonly revs = new Map<string, bigint>();

  see(conn: Conn, rev: bigint): void {
    if (this.revs.size >= maxRevisions) this.revs.clear();
    this.revs.set(conn.idHex, rev);
  }

  last(conn: Conn): bigint {
    return this.revs.get(conn.idHex) ?? 0n;
  }
}

const maxRevisions = 4096;
