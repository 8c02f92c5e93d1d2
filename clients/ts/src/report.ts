// The reports of calls (client/report.go): what an outcome decided
// in-process must tell the fleet, the delay a report carries, and the wire
// report with its idempotency key.

import { randomBytes } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";

import { ReportRequestSchema, type ReportRequest } from "./gen/v1/cooldown_pb.js";
import { Outcome } from "./breaker.js";
import type { Classification } from "./classify.js";
import type { Conn } from "./conn.js";
import { MaxHintMs } from "./headers.js";
import { remainingHint, type PendingReport } from "./queue.js";
import { wireConn } from "./admission.js";

/** Whether an outcome decided in-process holds something the fleet must learn. */
export function informs(cl: Classification): boolean {
  switch (cl.outcome) {
    case Outcome.TransientFailure: case Outcome.RateLimited: case Outcome.Overloaded:
    case Outcome.QuotaExhausted: case Outcome.AuthFailure:
      return true;
    case Outcome.Success:
      return cl.proactiveMs > 0;
  }
  return false;
}

/** The delay a report carries: the server's delay or the proactive cooldown, at most a day. */
export function reportDelay(cl: Classification): number {
  return Math.min(Math.max(cl.retryAfterMs, cl.proactiveMs), MaxHintMs);
}

/**
 * The wire report of one call, with a fresh idempotency key (16 random
 * bytes, unpadded base64url, as the Go client's): every send of it (the
 * first try, another endpoint, the report queue's resends) carries it, so
 * cooldownd counts the report once however many of its answers are lost.
 * retry: the call was a retry on conn; reporter: the client's id.
 */
export function reportRequest(conn: Conn, rev: bigint, lease: string, retry: boolean, reporter: string, cl: Classification): ReportRequest {
  const req = create(ReportRequestSchema, {
    connection: wireConn(conn), revision: rev, leaseToken: lease, outcome: cl.outcome as number,
    httpStatus: Math.max(cl.httpStatus, 0), errorCode: cl.errorCode, idempotencyKey: randomBytes(16).toString("base64url"),
    retry, reporter,
  });
  const d = reportDelay(cl);
  if (d > 0) req.retryAfter = durationFromMs(d);
  return req;
}

/** A queued report as it is sent now: its hint less the time it waited. */
export function withHint(p: PendingReport, now: number): ReportRequest {
  const left = remainingHint(p, now);
  if (left > 0) p.req.retryAfter = durationFromMs(left);
  return p.req;
}
