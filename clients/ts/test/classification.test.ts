// The classification fixture shared with the Go client
// (testdata/classification.json at the repository root, run by
// clients/ts/conformance in Go), and
// the network error shapes of Node, undici and Bun.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { classify, classifyError } from "../src/classify.js";
import { outcomeName } from "../src/breaker.js";
import { repoRoot } from "./helpers.js";

interface Case {
  name: string; status?: number; headers?: Record<string, string[]>; body?: string; body_base64?: string;
  error?: { kind: string; errno?: string; message?: string }; caller?: string;
  rules?: { max_server_delay_ms?: number; max_body_bytes?: number };
  want: Record<string, unknown>;
}
const fx: { now: string; cases: Case[] } = JSON.parse(readFileSync(join(repoRoot, "testdata/classification.json"), "utf8"));
const now = Date.parse(fx.now);

const pad = (n: number, w = 2) => String(n).padStart(w, "0");
const days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
function httpDate(t: number): string {
  const d = new Date(t);
  return `${days[d.getUTCDay()]}, ${pad(d.getUTCDate())} ${months[d.getUTCMonth()]} ${d.getUTCFullYear()} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())} GMT`;
}
function expand(v: string): string {
  const m = /^@(http|rfc3339nano|rfc3339):([+-]\d+)$/.exec(v);
  if (!m) return v;
  const t = now + Number(m[2]);
  if (m[1] === "http") return httpDate(t);
  const iso = new Date(t).toISOString(); // 2025-03-14T12:00:20.000Z
  return m[1] === "rfc3339" ? iso.replace(/\.\d{3}Z$/, "Z") : iso.replace(/\.(\d{3})Z$/, (_, ms: string) => (ms === "000" ? "Z" : `.${ms.replace(/0+$/, "")}Z`));
}

/** A header line as fetch holds it off the wire: its UTF-8 bytes, one character per byte. */
function wire(line: string): string {
  return String.fromCharCode(...new TextEncoder().encode(line));
}

/** The case's headers, each line appended, so fetch joins repeated lines as it does on the wire. */
function headersOf(tc: Case): Headers {
  const headers = new Headers();
  for (const [k, lines] of Object.entries(tc.headers ?? {})) {
    assert.ok(Array.isArray(lines) && lines.length > 0, `header ${k} of ${tc.name} is not a list of lines`);
    for (const v of lines) headers.append(k, wire(expand(v)));
  }
  return headers;
}

function bodyOf(tc: Case): Uint8Array | undefined {
  assert.ok(tc.body === undefined || tc.body_base64 === undefined, `${tc.name}: body and body_base64 both set`);
  if (tc.body !== undefined) return new TextEncoder().encode(tc.body);
  if (tc.body_base64 !== undefined) return new Uint8Array(Buffer.from(tc.body_base64, "base64"));
  return undefined;
}

function sysErr(code: string, syscall = "read"): Error {
  return Object.assign(new Error(`${syscall} ${code}`), { code, errno: -1, syscall });
}
/** Node's fetch (undici): TypeError "fetch failed" with the cause. */
function fetchFailed(cause: unknown): TypeError {
  return new TypeError("fetch failed", { cause });
}

function buildError(e: NonNullable<Case["error"]>): unknown {
  switch (e.kind) {
    case "errno": return fetchFailed(sysErr(e.errno!));
    case "timeout": return new DOMException("The operation was aborted due to timeout", "TimeoutError");
    case "eof": return fetchFailed(Object.assign(new Error("other side closed"), { code: "UND_ERR_SOCKET" }));
    case "dns_not_found": return fetchFailed(sysErr("ENOTFOUND", "getaddrinfo"));
    case "dns_temporary": return fetchFailed(sysErr("EAI_AGAIN", "getaddrinfo"));
    case "dns_other": return fetchFailed(Object.assign(new Error("getaddrinfo EAI_FAIL"), { code: "EAI_FAIL" }));
    case "tls_certificate": return fetchFailed(Object.assign(new Error("unable to verify the first certificate"), { code: "UNABLE_TO_VERIFY_LEAF_SIGNATURE" }));
    case "abort": return new DOMException("This operation was aborted", "AbortError");
    case "unknown": return new Error(e.message);
  }
  throw new Error("unknown error kind " + e.kind);
}

function callerReason(c: string | undefined): unknown {
  if (c === "canceled") return new DOMException("This operation was aborted", "AbortError");
  if (c === "deadline_exceeded") return new DOMException("The operation was aborted due to timeout", "TimeoutError");
  return undefined;
}

test(`classification: the ${fx.cases.length} cases shared with the Go client`, async (t) => {
  assert.ok(fx.cases.length >= 150);
  for (const tc of fx.cases) {
    await t.test(tc.name, () => {
      const resp = tc.status ? { status: tc.status, headers: headersOf(tc) } : undefined;
      const body = bodyOf(tc);
      const err = tc.error ? buildError(tc.error) : undefined;
      const rules = { now: () => now, maxServerDelayMs: tc.rules?.max_server_delay_ms, maxBodyBytes: tc.rules?.max_body_bytes };
      const got = classify(rules, resp, body, err, callerReason(tc.caller));
      const want = { outcome: "unspecified", retryable: false, retry_after_ms: 0, http_status: 0, error_code: "", proactive_ms: 0, too_long: false, ...tc.want };
      assert.deepStrictEqual({
        outcome: outcomeName(got.outcome), retryable: got.retryable, retry_after_ms: got.retryAfterMs, http_status: got.httpStatus,
        error_code: got.errorCode, proactive_ms: got.proactiveMs, too_long: got.tooLong,
      }, want);
      assert.match(got.errorCode, /^[a-z0-9_.-]{0,64}$/);
    });
  }
});

test("classification: Node, undici and Bun error shapes, by code only", () => {
  const cases: [string, unknown, string, boolean][] = [
    // Node fetch: TypeError("fetch failed") with cause.code.
    ["node reset", fetchFailed(sysErr("ECONNRESET")), "conn_reset", true],
    ["node refused", fetchFailed(sysErr("ECONNREFUSED", "connect")), "conn_refused", true],
    ["node refused inside AggregateError (happy eyeballs)",
      fetchFailed(new AggregateError([sysErr("ECONNREFUSED", "connect"), sysErr("ECONNREFUSED", "connect")], "")), "conn_refused", true],
    ["undici connect timeout", fetchFailed(Object.assign(new Error("Connect Timeout Error"), { code: "UND_ERR_CONNECT_TIMEOUT" })), "timeout", true],
    ["undici headers timeout", fetchFailed(Object.assign(new Error("Headers Timeout Error"), { code: "UND_ERR_HEADERS_TIMEOUT" })), "timeout", true],
    ["undici body timeout", fetchFailed(Object.assign(new Error("Body Timeout Error"), { code: "UND_ERR_BODY_TIMEOUT" })), "timeout", true],
    ["undici socket closed", fetchFailed(Object.assign(new Error("other side closed"), { code: "UND_ERR_SOCKET" })), "eof", true],
    ["undici socket with a reset below", fetchFailed(Object.assign(new Error("other side closed"), { code: "UND_ERR_SOCKET", cause: sysErr("ECONNRESET") })), "conn_reset", true],
    ["node http2 stream error", Object.assign(new Error("Stream closed with error code NGHTTP2_REFUSED_STREAM"), { code: "ERR_HTTP2_STREAM_ERROR" }), "conn_reset", true],
    ["node unreachable", fetchFailed(sysErr("ENETUNREACH", "connect")), "conn_error", true],
    ["an unknown system error code", fetchFailed(sysErr("EWHATEVER")), "conn_error", true],
    // Bun: the code is on the error itself, no cause.
    ["bun ECONNRESET", Object.assign(new Error("The socket connection was closed unexpectedly"), { code: "ECONNRESET" }), "conn_reset", true],
    ["bun ConnectionRefused", Object.assign(new Error("Unable to connect. Is the computer able to access the url?"), { code: "ConnectionRefused", path: "http://x" }), "conn_refused", true],
    ["bun ConnectionClosed", Object.assign(new Error("The socket connection was closed unexpectedly."), { code: "ConnectionClosed" }), "conn_reset", true],
    ["bun FailedToOpenSocket", Object.assign(new Error("Was there a typo in the url or port?"), { code: "FailedToOpenSocket" }), "conn_error", true],
    ["bun timeout", Object.assign(new Error("The operation timed out."), { name: "TimeoutError", code: "ETIMEDOUT" }), "timeout", true],
    // TLS and DNS.
    ["expired certificate", fetchFailed(Object.assign(new Error("certificate has expired"), { code: "CERT_HAS_EXPIRED" })), "tls_certificate", false],
    ["self-signed", fetchFailed(Object.assign(new Error("self-signed certificate"), { code: "DEPTH_ZERO_SELF_SIGNED_CERT" })), "tls_certificate", false],
    ["dns not found", fetchFailed(sysErr("ENOTFOUND", "getaddrinfo")), "dns_not_found", false],
    // Messages never decide.
    ["a message saying reset", new TypeError("fetch failed: ECONNRESET connection reset by peer"), "", false],
    ["a string", "ECONNRESET", "", false],
  ];
  for (const [name, err, code, retryable] of cases) {
    const c = classifyError(err);
    assert.equal(c.errorCode, code, name);
    assert.equal(c.retryable, retryable, name);
  }
  // A caller's abort is canceled, never retried, whatever the error says.
  const aborted = classify({}, undefined, undefined, fetchFailed(sysErr("ECONNRESET")), new DOMException("x", "AbortError"));
  assert.equal(outcomeName(aborted.outcome), "canceled");
  assert.equal(aborted.retryable, false);
  // A cycle in the cause chain ends.
  const a: Error & { cause?: unknown } = new Error("a");
  const b = new Error("b", { cause: a });
  a.cause = b;
  assert.equal(classifyError(a).errorCode, "");
});
