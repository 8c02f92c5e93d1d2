// Classification of one provider call, with the Go client's rules
// (client/classify.go, client/body.go): statuses and JSON error
// type/code/status fields decide, never message text; network errors are
// recognised by the codes in their cause chain, never by their message.
// testdata/classification.json (at the repository root) holds the cases
// both clients run.

import { MaxHintMs, proactiveDelay, serverDelay, shouldRetryHeader, type HeaderGetter } from "./headers.js";
import { Outcome } from "./breaker.js";

/** The verdict on one provider call. */
export interface Classification {
  /** What the call amounted to. */
  outcome: Outcome;
  /** Whether the guard may retry this call. */
  retryable: boolean;
  /** The delay the server asked for, ms (0: none), at most MaxHint. */
  retryAfterMs: number;
  /** The response status, 0 without a response. */
  httpStatus: number;
  /** A short machine code ([a-z0-9_.-], ≤ 64), never free text. */
  errorCode: string;
  /** On a success whose rate-limit headers say zero remaining: ms until reset. */
  proactiveMs: number;
  /** The server asked for a delay above maxServerDelayMs: do not wait (use a fallback). */
  tooLong: boolean;
}

/** The classification knobs. */
export interface Rules {
  /** The longest server-requested delay worth waiting for, ms. Default 30 000. */
  maxServerDelayMs?: number;
  /** Bound of the error body read and inspected. Default 64 KiB. */
  maxBodyBytes?: number;
  /** Clock for HTTP-date and RFC 3339 headers (Unix ms). Default Date.now. */
  now?: () => number;
}

export const DefaultMaxServerDelayMs = 30_000;
export const DefaultMaxBodyBytes = 64 << 10;

/** The minimal response shape classify reads: fetch's Response fits. */
export interface ResponseLike {
  status: number;
  headers: HeaderGetter;
}

function empty(): Classification {
  return { outcome: Outcome.Unspecified, retryable: false, retryAfterMs: 0, httpStatus: 0, errorCode: "", proactiveMs: 0, tooLong: false };
}

/**
 * Classifies one call. With a response, its status, headers and (already
 * read, bounded) error body decide and error is ignored. abortReason is
 * set when the caller's AbortSignal ended (its reason, or true): such a
 * call is never retryable, and one without a response is canceled.
 */
export function classify(rules: Rules, resp: ResponseLike | undefined, body: Uint8Array | undefined,
  error: unknown, abortReason?: unknown): Classification {
  const r = {
    maxServerDelayMs: rules.maxServerDelayMs && rules.maxServerDelayMs > 0 ? rules.maxServerDelayMs : DefaultMaxServerDelayMs,
    maxBodyBytes: rules.maxBodyBytes && rules.maxBodyBytes > 0 ? rules.maxBodyBytes : DefaultMaxBodyBytes,
    now: rules.now ?? Date.now,
  };
  let c: Classification;
  if (resp) c = classifyResponse(r, resp, body ?? new Uint8Array());
  else if (abortReason !== undefined) c = canceled(abortReason);
  else if (error !== undefined && error !== null) c = classifyError(error);
  else c = empty();
  if (abortReason !== undefined) c.retryable = false;
  return c;
}

function classifyResponse(r: Required<Rules>, resp: ResponseLike, body: Uint8Array): Classification {
  const s = resp.status;
  const c = empty();
  c.httpStatus = s;
  if (s >= 200 && s <= 299) {
    c.outcome = Outcome.Success;
    c.proactiveMs = proactiveDelay(resp.headers, r.now()) ?? 0;
    return c;
  }
  [c.outcome, c.retryable] = statusOutcome(s);
  const info = parseErrorBody(body.subarray(0, Math.min(body.length, r.maxBodyBytes)));
  c.errorCode = errorCode(info);
  if (info.quota !== "" && quotaStatus(s)) {
    c.outcome = Outcome.QuotaExhausted;
    c.retryable = false;
  } else if (s === 400) {
    // The caller's request is wrong: its body never makes it retried (only x-should-retry, below, can).
  } else if (((s >= 500 || s === 429) && says(info, "overloaded_error")) || (s === 503 && says(info, "overload"))) {
    c.outcome = Outcome.Overloaded;
    c.retryable = true;
  }
  // x-should-retry is the server's own word: it outranks the status, a 400's included, as in the SDKs (not quota).
  const retry = shouldRetryHeader(resp.headers);
  if (retry !== undefined && c.outcome !== Outcome.QuotaExhausted) c.retryable = retry;
  const d = serverDelay(resp.headers, r.now());
  if (d !== undefined) {
    c.retryAfterMs = d;
    if (d > r.maxServerDelayMs) {
      c.retryable = false;
      c.tooLong = true;
    }
  }
  return c;
}

function statusOutcome(s: number): [Outcome, boolean] {
  if (s === 408 || s === 409) return [Outcome.TransientFailure, true];
  if (s === 429) return [Outcome.RateLimited, true];
  if (s === 529) return [Outcome.Overloaded, true];
  if (s === 401 || s === 403) return [Outcome.AuthFailure, false];
  if (s === 402) return [Outcome.QuotaExhausted, false];
  if (s === 501 || s === 505) return [Outcome.ClientError, false];
  if (s >= 500 && s <= 599) return [Outcome.TransientFailure, true];
  return [Outcome.ClientError, false];
}

function quotaStatus(s: number): boolean {
  return s === 402 || s === 403 || s === 429;
}

/** The verdict for a call the caller abandoned. */
export function canceled(reason: unknown): Classification {
  const c = empty();
  c.outcome = Outcome.Canceled;
  c.errorCode = isTimeoutReason(reason) ? "deadline_exceeded" : "canceled";
  return c;
}

function isTimeoutReason(reason: unknown): boolean {
  return typeof reason === "object" && reason !== null && (reason as { name?: unknown }).name === "TimeoutError";
}

// Codes of the cause chain, by class. Node (libuv) system errors, undici's
// UND_ERR_*, Bun's fetch error codes, and TLS verification codes.
const tlsCodes = new Set([
  "CERT_HAS_EXPIRED", "CERT_NOT_YET_VALID", "CERT_REVOKED", "CERT_UNTRUSTED", "CERT_REJECTED",
  "DEPTH_ZERO_SELF_SIGNED_CERT", "SELF_SIGNED_CERT_IN_CHAIN", "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT", "UNABLE_TO_GET_ISSUER_CERT_LOCALLY", "ERR_TLS_CERT_ALTNAME_INVALID",
  "HOSTNAME_MISMATCH", "CERT_SIGNATURE_FAILURE", "INVALID_CA", "UNABLE_TO_VERIFY_FIRST_CERTIFICATE",
  // Bun
  "CERT_HAS_EXPIRED", "UNKNOWN_CERTIFICATE_VERIFICATION_ERROR", "ERR_TLS_CERT_ALTNAME_INVALID",
]);
const resetCodes = new Set(["ECONNRESET", "ECONNABORTED", "EPIPE", "UND_ERR_CLOSED", "ConnectionClosed", "ERR_HTTP2_STREAM_ERROR", "ERR_HTTP2_SESSION_ERROR", "ERR_HTTP2_GOAWAY_SESSION"]);
const refusedCodes = new Set(["ECONNREFUSED", "ConnectionRefused"]);
const timeoutCodes = new Set(["ETIMEDOUT", "ESOCKETTIMEDOUT", "UND_ERR_CONNECT_TIMEOUT", "UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT", "ConnectionTimedOut", "Timeout", "ERR_HTTP2_PING_TIMEOUT"]);
const eofCodes = new Set(["UND_ERR_SOCKET", "ERR_STREAM_PREMATURE_CLOSE", "UND_ERR_RES_CONTENT_LENGTH_MISMATCH", "ECONNCLOSED"]);
const dnsTemporary = new Set(["EAI_AGAIN"]);
const dnsNotFound = new Set(["ENOTFOUND", "EAI_NONAME"]);
const dnsOther = new Set(["EAI_FAIL", "EAI_NODATA", "ESERVFAIL", "ENODATA", "EBADRESP", "ECONNREFUSED_DNS", "DNSException"]);
const connOther = new Set(["EHOSTUNREACH", "ENETUNREACH", "ENETDOWN", "EHOSTDOWN", "EADDRNOTAVAIL", "EADDRINUSE", "EPROTO",
  "FailedToOpenSocket", "UND_ERR_CONNECT", "UND_ERR_ABORTED"]);

/** The codes and names of err and of its cause chain (cause, AggregateError.errors), breadth-first. */
export function errorChain(err: unknown): { codes: string[]; names: string[] } {
  const codes: string[] = [], names: string[] = [];
  const seen = new Set<unknown>();
  const queue: unknown[] = [err];
  while (queue.length > 0 && seen.size < 32) {
    const e = queue.shift();
    if (typeof e !== "object" || e === null || seen.has(e)) continue;
    seen.add(e);
    const o = e as { code?: unknown; name?: unknown; cause?: unknown; errors?: unknown };
    if (typeof o.code === "string") codes.push(o.code);
    if (typeof o.name === "string") names.push(o.name);
    if (o.cause !== undefined) queue.push(o.cause);
    if (Array.isArray(o.errors)) queue.push(...o.errors);
  }
  return { codes, names };
}

/**
 * Classifies a call that got no response from the codes and names in the
 * error's cause chain — never from its message. An error it does not
 * recognise is a transient failure that is not retried.
 */
export function classifyError(err: unknown): Classification {
  const { codes, names } = errorChain(err);
  const has = (set: Set<string>) => codes.some((c) => set.has(c));
  const c = empty();
  c.outcome = Outcome.TransientFailure;
  const transient = (code: string) => { c.retryable = true; c.errorCode = code; return c; };
  if (names.includes("AbortError")) return canceled(err);
  if (has(tlsCodes)) return { ...c, outcome: Outcome.ClientError, errorCode: "tls_certificate" };
  if (has(dnsNotFound)) return { ...c, outcome: Outcome.ClientError, errorCode: "dns_not_found" };
  if (has(dnsTemporary)) return transient("dns_temporary");
  if (has(dnsOther)) return { ...c, errorCode: "dns_error" };
  if (has(resetCodes)) return transient("conn_reset");
  if (has(refusedCodes)) return transient("conn_refused");
  if (has(timeoutCodes) || names.includes("TimeoutError")) return transient("timeout");
  if (has(eofCodes)) return transient("eof");
  if (has(connOther) || codes.some((x) => /^E[A-Z0-9]+$/.test(x))) return transient("conn_error");
  return c;
}

// ---- error bodies ----

/** Error type/code values that mean the quota or balance is exhausted, not a rate limit. */
export const quotaCodes = new Set([
  "insufficient_quota", "billing_hard_limit_reached", "billing_not_active", "billing_error",
  "credit_balance_exhausted", "credit_balance_too_low", "insufficient_balance", "insufficient_credits",
  "payment_required",
]);

interface ErrorInfo { typ: string; code: string; status: string; quota: string; }

function errorCode(i: ErrorInfo): string {
  if (i.quota !== "") return i.quota;
  if (i.code !== "" && i.code.replace(/^[0-9]+|[0-9]+$/g, "") !== "") return i.code;
  if (i.typ !== "") return i.typ;
  return i.status;
}

function says(i: ErrorInfo, sub: string): boolean {
  return i.typ.includes(sub) || i.code.includes(sub);
}

/**
 * A key as Go's encoding/json folds it to match a field: ASCII case, and the
 * two non-ASCII letters that fold to ASCII ones (ſ to s, the Kelvin sign to k).
 */
function foldKey(k: string): string {
  return k.replace(/[A-Z]/g, (c) => c.toLowerCase()).replace(/\u017f/g, "s").replace(/\u212a/g, "k");
}

/** Go's encoding/json matches field names case-insensitively, the last match winning. */
function field(o: Record<string, unknown>, name: string): unknown {
  let v: unknown;
  for (const k of Object.keys(o)) if (foldKey(k) === name) v = o[k];
  return v;
}

/** Go's encoding/json refuses a text nested deeper than this (arrays and objects). */
const maxNestingDepth = 10000;

/** Whether text, valid JSON, nests arrays and objects deeper than Go's encoding/json accepts. */
function tooDeep(text: string): boolean {
  let depth = 0, inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === "[" || c === "{") {
      if (++depth > maxNestingDepth) return true;
    } else if (c === "]" || c === "}") depth--;
  }
  return false;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

const dec = new TextDecoder(); // utf-8, one leading BOM dropped, invalid bytes replaced

/**
 * Reads error.type, error.code and error.status (string values) of an error
 * body; message texts are never used. The decoder drops one leading UTF-8
 * byte-order mark (RFC 8259 §8.1) and replaces invalid UTF-8; then JSON's
 * whitespace (space, tab, CR, LF) around the text is trimmed, nothing else,
 * as in the Go client.
 */
export function parseErrorBody(body: Uint8Array): ErrorInfo {
  const none: ErrorInfo = { typ: "", code: "", status: "", quota: "" };
  const text = dec.decode(body).replace(/^[ \t\r\n]+|[ \t\r\n]+$/g, "");
  if (text === "") return none;
  let v: unknown;
  try {
    v = JSON.parse(text);
    if (tooDeep(text)) throw new SyntaxError("nested too deep for Go's encoding/json");
  } catch {
    return hasToken(text, "insufficient_quota") ? { ...none, quota: "insufficient_quota" } : none;
  }
  let env: unknown;
  if (text[0] === "[") {
    if (!Array.isArray(v) || v.length === 0 || !v.every((x) => x === null || isObject(x))) return none;
    env = v[0];
  } else {
    if (!isObject(v)) return none;
    env = v;
  }
  if (env === null) return none;
  const e = field(env as Record<string, unknown>, "error");
  if (e === null) return none;
  if (!isObject(e)) return none;
  const info: ErrorInfo = {
    typ: sanitizeCode(jsonScalar(field(e, "type"))),
    code: sanitizeCode(jsonScalar(field(e, "code"))),
    status: sanitizeCode(jsonScalar(field(e, "status"))),
    quota: "",
  };
  for (const c of [info.code, info.typ]) {
    if (quotaCodes.has(c)) {
      info.quota = c;
      break;
    }
  }
  return info;
}

/** A JSON string's value; "" for anything else (a number never names an error: Gemini's is its HTTP status). */
function jsonScalar(v: unknown): string {
  return typeof v === "string" ? v : "";
}

function hasToken(s: string, tok: string): boolean {
  const word = (c: string | undefined) => c !== undefined && /[A-Za-z0-9_]/.test(c);
  for (let i = s.indexOf(tok); i >= 0; i = s.indexOf(tok, i + 1)) {
    if (!word(s[i - 1]) && !word(s[i + tok.length])) return true;
  }
  return false;
}

/** Lower-cases an ASCII machine code; anything but 1..64 of [a-z0-9_.-] is "". */
export function sanitizeCode(s: string): string {
  if (s.length === 0 || s.length > 64) return "";
  const out = s.replace(/[A-Z]/g, (c) => c.toLowerCase());
  return /^[a-z0-9_.-]+$/.test(out) ? out : "";
}

export { MaxHintMs };
