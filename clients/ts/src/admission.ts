// Admit's answer (client/admission.go): the Admission, its checks, and the
// reading of cooldownd's AdmitResponse.

import { create } from "@bufbuild/protobuf";
import type { Duration } from "@bufbuild/protobuf/wkt";
import { timestampMs } from "@bufbuild/protobuf/wkt";

import { ConnectionSchema, Durability, type AdmitResponse, type Connection as WireConnection } from "./gen/v1/cooldown_pb.js";
import { Decision, DenyReason } from "./breaker.js";
import { Conn } from "./conn.js";
import { InvalidConnError } from "./errors.js";

export const MaxCandidates = 16;

/** Admit's answer. */
export interface Admission {
  /** Position among the candidates of the chosen one or, on a denial, of the one available soonest. */
  index: number;
  conn: Conn;
  decision: Decision;
  revision: bigint;
  /** Set on AllowProbe: sent back with the report, which releases the lease. */
  leaseToken: string;
  /** Unix ms when the probe lease lapses (0 unless a probe). */
  leaseExpires: number;
  /** On a denial: ms until a candidate may be available. */
  retryAfterMs: number;
  reason: DenyReason;
  /**
   * The call was already sent to conn (admit's sent): there it is a retry,
   * charged to the connection's fleet retry budget. report() sends it back.
   */
  retry?: boolean;
  /**
   * On an allowed call: why the connection's policy would have denied it —
   * the policy is in shadow mode (computed and published, not enforced).
   * None when not shadowed.
   */
  shadowReason?: DenyReason;
  /** With shadowReason: the wait the policy would have given, ms. */
  shadowRetryAfterMs?: number;
  /** The chosen candidate's adaptive-throttle rejection probability after this decision (0: off or healthy). */
  throttleProbability?: number;
  /** The in-process breaker decided because cooldownd was unreachable. */
  local: boolean;
  /** Admitted from the client's mirror, without a round trip (see the mirror option). */
  mirrored?: boolean;
  /**
   * cooldownd applied what this admit wrote (the probe lease granted, a
   * timed transition) on a Redis master with too few replicas: a failover
   * before they catch up may lose it. The decision stands (a probe is the
   * caller's probe); it is neither an outage nor a reason to ask again
   * (AdmitResponse.durability NOT_REPLICATED).
   */
  notReplicated?: boolean;
}

/** Whether an admission lets the call go. */
export function allowed(a: Admission): boolean {
  return a.decision === Decision.Allow || a.decision === Decision.AllowProbe;
}

/** Throws InvalidConnError unless cands holds 1 to MaxCandidates Conns. */
export function validConns(cands: Conn[]): void {
  if (cands.length === 0 || cands.length > MaxCandidates) {
    throw new InvalidConnError(`need 1 to ${MaxCandidates} candidates, got ${cands.length}`);
  }
  cands.forEach((c, i) => {
    if (!(c instanceof Conn)) throw new InvalidConnError(`candidate ${i} is not a Conn`);
  });
}

export function wireConn(c: Conn): WireConnection {
  return create(ConnectionSchema, { id: c.id, label: c.label });
}

/** The Admission of cooldownd's answer to an admit of cands. */
export function admission(m: AdmitResponse, cands: Conn[], retry: boolean[] | undefined): Admission {
  const i = m.candidateIndex;
  const d = m.decision as number;
  if (i >= cands.length || d < Decision.Allow || d > Decision.Deny) {
    throw new Error(`client: admit: malformed answer (decision ${d}, candidate ${i} of ${cands.length})`);
  }
  const a: Admission = {
    index: i, conn: cands[i]!, decision: d as Decision, revision: m.revision, leaseToken: m.leaseToken,
    leaseExpires: m.leaseExpiresAt ? timestampMs(m.leaseExpiresAt) : 0,
    retryAfterMs: m.retryAfter ? Math.max(durationMs(m.retryAfter), 0) : 0,
    reason: m.denyReason as number as DenyReason, local: false, retry: retry?.[i] ?? false,
    shadowReason: DenyReason.None, shadowRetryAfterMs: 0, throttleProbability: m.throttleProbability,
    notReplicated: m.durability === Durability.NOT_REPLICATED,
  };
  if (allowed(a)) {
    a.shadowReason = m.shadowDenyReason as number as DenyReason;
    if (a.shadowReason !== DenyReason.None && m.shadowRetryAfter) a.shadowRetryAfterMs = Math.max(durationMs(m.shadowRetryAfter), 0);
  }
  return a;
}

/** Per candidate, whether the call was already sent to it; undefined when to none (a first attempt everywhere). */
export function retries(cands: readonly Conn[], sent: readonly Conn[] | undefined): boolean[] | undefined {
  if (!sent || sent.length === 0) return undefined;
  const ids = new Set(sent.map((c) => c.idHex));
  const out = cands.map((c) => ids.has(c.idHex));
  return out.some((x) => x) ? out : undefined;
}

function durationMs(d: Duration): number {
  return Math.ceil(Number(d.seconds) * 1000 + d.nanos / 1e6);
}
