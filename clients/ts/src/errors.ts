// The errors of the client, as in the Go client (client/errors.go).

import { Code, ConnectError } from "@connectrpc/connect";
import { outcomeName, reasonName, type DenyReason, type Outcome } from "./breaker.js";
import type { Conn } from "./conn.js";

/** cooldownd is unreachable and the client fails closed. */
export class UnavailableError extends Error {
  constructor(options?: { cause?: unknown }) {
    super("cooldownd unavailable", options);
    this.name = "UnavailableError";
  }
}

/** A zero, invalid or badly labelled connection. */
export class InvalidConnError extends Error {
  constructor(message: string) {
    super("client: invalid connection: " + message);
    this.name = "InvalidConnError";
  }
}

/**
 * No candidate may be called now and waiting is not an option: the wait
 * would pass the max wait or the deadline, noWait is set, a fleet rule
 * denied this call with no candidate left to fall back to (reason
 * "retry_budget" or "throttled", never waited for), or cooldownd is
 * unreachable and the client fails closed (reason "unavailable").
 */
export class DeniedError extends Error {
  readonly conn: Conn;
  readonly reason: DenyReason;
  readonly retryAfterMs: number;
  readonly local: boolean;
  readonly attempts: number;
  constructor(f: { conn: Conn; reason: DenyReason; retryAfterMs: number; local: boolean; attempts: number; cause?: unknown }) {
    let msg = `client: denied (${reasonName(f.reason)}) on ${f.conn}`;
    if (f.retryAfterMs > 0) msg += `, retry after ${f.retryAfterMs}ms`;
    if (f.local) msg += " (local)";
    if (f.cause instanceof Error) msg += ": " + f.cause.message;
    super(msg, f.cause === undefined ? undefined : { cause: f.cause });
    this.name = "DeniedError";
    this.conn = f.conn;
    this.reason = f.reason;
    this.retryAfterMs = f.retryAfterMs;
    this.local = f.local;
    this.attempts = f.attempts;
  }
}

/** The provider call failed for good; it describes the last attempt. */
export class GuardError extends Error {
  readonly conn: Conn;
  readonly attempts: number;
  readonly lastOutcome: Outcome;
  readonly errorCode: string;
  readonly httpStatus: number;
  readonly retryAfterMs: number;
  readonly tooLong: boolean;
  /** The last response (its body holds the bytes the guard read), if any. */
  readonly response: Response | undefined;
  constructor(f: { conn: Conn; attempts: number; lastOutcome: Outcome; errorCode: string; httpStatus: number;
    retryAfterMs: number; tooLong: boolean; response?: Response; cause?: unknown }) {
    let msg = `client: provider call failed after ${f.attempts} attempt${f.attempts === 1 ? "" : "s"}: ${outcomeName(f.lastOutcome)}`;
    if (f.httpStatus !== 0) msg += ` (http ${f.httpStatus}${f.errorCode ? ", " + f.errorCode : ""})`;
    else if (f.errorCode) msg += ` (${f.errorCode})`;
    if (f.cause instanceof Error) msg += ": " + f.cause.message;
    super(msg, f.cause === undefined ? undefined : { cause: f.cause });
    this.name = "GuardError";
    this.conn = f.conn;
    this.attempts = f.attempts;
    this.lastOutcome = f.lastOutcome;
    this.errorCode = f.errorCode;
    this.httpStatus = f.httpStatus;
    this.retryAfterMs = f.retryAfterMs;
    this.tooLong = f.tooLong;
    this.response = f.response;
  }
}

/**
 * cooldownd answered and refused the request: a configuration or caller
 * error (bad token, wrong role, invalid argument, a lease no longer held).
 * Never an outage: the provider is not called, whatever the fail mode.
 */
export class RejectedError extends Error {
  readonly op: string;
  readonly code: Code;
  constructor(op: string, cause: ConnectError) {
    super(`client: ${op}: cooldownd rejected the request (${Code[cause.code]}): ${cause.rawMessage}`, { cause });
    this.name = "RejectedError";
    this.op = op;
    this.code = cause.code;
  }
}
