// The reports of calls (client/report.go): what an outcome decided
// in-process must tell the fleet, the delay a report carries, the wire
// report with its idempotency key, and the mirror's batches of successes.

import { randomBytes } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";

import {
  ReportBatchRequestSchema, ReportRequestSchema, type ReportBatchRequest, type ReportBatchResponse, type ReportRequest, type ReportResponse,
} from "./gen/v1/cooldown_pb.js";
import { Outcome } from "./breaker.js";
import type { Classification } from "./classify.js";
import { MaxHintMs } from "./headers.js";
import { isBatch, remainingHint, type PendingReport } from "./queue.js";
import { wireConn } from "./admission.js";
import { Conn } from "./conn.js";

/** A fresh idempotency key: 16 random bytes, unpadded base64url (22 characters), as the Go client's. */
export function reportKey(): string {
  return randomBytes(16).toString("base64url");
}

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
    httpStatus: Math.max(cl.httpStatus, 0), errorCode: cl.errorCode, idempotencyKey: reportKey(),
    retry, reporter,
  });
  const d = reportDelay(cl);
  if (d > 0) req.retryAfter = durationFromMs(d);
  return req;
}

/**
 * The report of count successes on conn under rev (retry: retries there),
 * without a reporter or key: an entry of a ReportBatch as is, or, given
 * both, the report of one batch on its own.
 */
export function successReport(conn: Conn, rev: bigint, count: number, retry: boolean): ReportRequest {
  return create(ReportRequestSchema, { connection: wireConn(conn), revision: rev, outcome: Outcome.Success, httpStatus: 200, count, retry });
}

/** The ReportBatch of entries (at most MaxReportBatch, 512), from reporter, with a fresh key kept by every resend. */
export function batchRequest(entries: ReportRequest[], reporter: string): ReportBatchRequest {
  return create(ReportBatchRequestSchema, { reports: entries, reporter, idempotencyKey: reportKey() });
}

/** Each answer of a ReportBatch with its entry's connection; none when the answers do not match the entries one to one. */
export function batchAnswers(req: ReportBatchRequest, res: ReportBatchResponse): [Conn, ReportResponse][] {
  if (res.reports.length !== req.reports.length) return [];
  const out: [Conn, ReportResponse][] = [];
  req.reports.forEach((r, i) => {
    if (r.connection && r.connection.id.length === 32) out.push([new Conn(r.connection.id, r.connection.label), res.reports[i]!]);
  });
  return out;
}

/** A queued report as it is sent now: its hint less the time it waited (a batch has none). */
export function withHint(p: PendingReport, now: number): ReportRequest | ReportBatchRequest {
  if (isBatch(p.req)) return p.req;
  const left = remainingHint(p, now);
  if (left > 0) p.req.retryAfter = durationFromMs(left);
  return p.req;
}
