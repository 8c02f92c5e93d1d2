// Headers and error bodies, read as the Go client reads them
// (docs/decisions/0035-a-header-is-the-list-of-its-elements.md): the list
// rule, the one grammar of each value, and a differential test that sends
// thousands of generated header lines and bodies through both clients
// (clients/ts/conformance/headerstrace is the Go side) and fails on the
// first difference.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { elements, parseHTTPDate, parseRFC3339, parseRetryAfter, proactiveDelay, serverDelay, shouldRetryHeader } from "../src/headers.js";
import { classify, parseErrorBody } from "../src/classify.js";
import { outcomeName } from "../src/breaker.js";
import { goBinary, repoRoot } from "./helpers.js";

const now = Date.parse("2025-03-14T12:00:00Z");

/** A Headers with each [name, line] appended, as fetch builds it off the wire. */
function lines(...pairs: [string, string][]): Headers {
  const h = new Headers();
  for (const [k, v] of pairs) h.append(k, v);
  return h;
}

test("headers: elements of a field value", () => {
  const cases: [string, string[]][] = [
    ["", []], ["5", ["5"]], [" \t5\t ", ["5"]], ["\v5\u00a0", ["\v5\u00a0"]], ["120, 120", ["120", "120"]], ["a,b", ["a", "b"]],
    [", ,a,,b ,", ["a", "b"]], ["Wed, 21 Oct 2015 07:28:00 GMT", ["Wed, 21 Oct 2015 07:28:00 GMT"]],
    ["Wednesday, 21-Oct-15 07:28:00 GMT, 5", ["Wednesday, 21-Oct-15 07:28:00 GMT", "5"]], ["wed, 21", ["wed", "21"]],
    [" Wed ,21", ["Wed ,21"]], ["Mon, Tue, 5", ["Mon, Tue", "5"]], ["5, Fri,", ["5", "Fri,"]], ["Mond, 5", ["Mond", "5"]],
  ];
  for (const [v, want] of cases) assert.deepEqual(elements(v), want, JSON.stringify(v));
});

test("headers: repeated lines read as the elements of all of them", () => {
  // fetch joins the lines with ", "; the delay is the longest valid element.
  assert.equal(lines(["retry-after", "120"], ["retry-after", "120"]).get("retry-after"), "120, 120");
  assert.equal(serverDelay(lines(["retry-after", "120"], ["retry-after", "120"]), now), 120_000);
  assert.equal(serverDelay(lines(["retry-after-ms", "2000"], ["retry-after-ms", "2000"], ["retry-after", "120"]), now), 2000);
  assert.equal(serverDelay(lines(["retry-after", "2"], ["retry-after", "20"]), now), 20_000);
  assert.equal(serverDelay(lines(["retry-after", "soon"], ["retry-after", "3"]), now), 3000);
  assert.equal(serverDelay(lines(["x-ms-retry-after-ms", "-1"], ["x-ms-retry-after-ms", "2500"]), now), 2500);
  assert.equal(serverDelay(lines(["retry-after", "2, Fri"], ["retry-after", "14 Mar 2025 12:00:20 GMT"]), now), 20_000);
  assert.equal(serverDelay(lines(["retry-after", ""], ["retry-after", ""]), now), undefined);
  assert.equal(parseRetryAfter("Fri, 14 Mar 2025 12:00:07 GMT, Fri, 14 Mar 2025 12:00:09 GMT", now), 9000);
  assert.equal(parseRetryAfter("Fri, 2", now), undefined);
  assert.equal(shouldRetryHeader(lines(["x-should-retry", "true"], ["x-should-retry", "TRUE"])), true);
  assert.equal(shouldRetryHeader(lines(["x-should-retry", "true"], ["x-should-retry", "false"])), false);
  assert.equal(shouldRetryHeader(lines(["x-should-retry", "maybe, true"])), true);
  assert.equal(shouldRetryHeader(lines(["x-should-retry", "maybe"], ["x-should-retry", "1"])), undefined);
  assert.equal(shouldRetryHeader(lines(["x-should-retry", "fal\xc5\xbfe"])), undefined, "ſ in UTF-8, as fetch holds it");
  assert.equal(proactiveDelay(lines(["x-ratelimit-remaining-tokens", "5, 0"], ["x-ratelimit-reset-tokens", "1s, 3s"]), now), 3000);
  assert.equal(proactiveDelay(lines(["x-ratelimit-remaining-requests", "0".repeat(24)], ["x-ratelimit-reset-requests", "1s"]), now), 1000);
  assert.equal(proactiveDelay(lines(["x-ratelimit-remaining-requests", "0\xa0"], ["x-ratelimit-reset-requests", "1s"]), now), undefined);
});

test("headers: HTTP-date exactly as RFC 9110 writes it", () => {
  const at = (y: number, m: number, d: number, hh: number, mm: number, ss: number) => {
    const t = new Date(0);
    t.setUTCFullYear(y, m - 1, d);
    t.setUTCHours(hh, mm, ss, 0);
    return t.getTime();
  };
  const cases: [string, number | undefined][] = [
    ["Sun, 06 Nov 1994 08:49:37 GMT", at(1994, 11, 6, 8, 49, 37)],
    ["Sunday, 06-Nov-94 08:49:37 GMT", at(1994, 11, 6, 8, 49, 37)],
    ["Friday, 14-Mar-25 12:00:07 GMT", at(2025, 3, 14, 12, 0, 7)],
    ["Monday, 01-Dec-69 00:00:00 GMT", at(1969, 12, 1, 0, 0, 0)],
    ["Sun Nov  6 08:49:37 1994", at(1994, 11, 6, 8, 49, 37)],
    ["Sun Nov 06 08:49:37 1994", at(1994, 11, 6, 8, 49, 37)],
    ["Thu, 29 Feb 2024 00:00:00 GMT", at(2024, 2, 29, 0, 0, 0)],
    ["Tue, 29 Feb 0000 00:00:00 GMT", at(0, 2, 29, 0, 0, 0)],
    ["Tue, 01 Jan 0099 00:00:00 GMT", at(99, 1, 1, 0, 0, 0)],
    ["Thu, 29 Feb 1900 00:00:00 GMT", undefined], ["Fri, 30 Feb 2025 12:00:30 GMT", undefined],
    ["Fri, 14 Mar 2025 24:00:00 GMT", undefined], ["fri, 14 Mar 2025 12:00:10 GMT", undefined],
    ["Fri, 14 mar 2025 12:00:10 GMT", undefined], ["Fri, 14 Mar 2025 12:00:10 UTC", undefined],
    ["Friday, 14-Mar-25 12:00:07 EST", undefined], ["Fri,  14 Mar 2025 12:00:10 GMT", undefined],
    ["Sat, 15 Mar 2025 1:00:10 GMT", undefined], ["Fri, 14 Mar 2025 12:00:10.5 GMT", undefined],
    ["Sun Nov 6 08:49:37 1994", undefined], ["Sat Mar 15  1:00:00 2025", undefined], ["2025-03-14T12:00:00Z", undefined],
  ];
  for (const [v, want] of cases) assert.equal(parseHTTPDate(v), want, v);
});

test("headers: RFC 3339 as the Go client reads it", () => {
  const base = Date.parse("2025-03-14T12:00:20Z");
  const cases: [string, number | undefined][] = [
    ["2025-03-14T12:00:20Z", base], ["2025-03-14T12:00:20.25Z", base + 250], ["2025-03-14T12:00:20.0000000001Z", base + 1],
    ["2025-03-14T13:00:20+01:00", base], ["2025-03-14T11:30:20-00:30", base],
    ["2025-03-14T12:00:20,5Z", undefined], ["2025-03-14T12:00:20.Z", undefined], ["2025-03-14T12:00:20z", undefined],
    ["2025-03-14T12:00:20+24:00", undefined], ["2025-02-30T12:00:20Z", undefined], ["2025-03-14T12:00:20", undefined],
  ];
  for (const [v, want] of cases) assert.equal(parseRFC3339(v), want, v);
  assert.notEqual(parseRFC3339("0000-02-29T00:00:00Z"), undefined, "year 0 is a leap year");
});

test("headers: error bodies: the byte-order mark, JSON whitespace, strings only", () => {
  const over = '{"type":"error","error":{"type":"overloaded_error"}}';
  const enc = (s: string) => new TextEncoder().encode(s);
  assert.equal(parseErrorBody(enc("\ufeff" + over)).typ, "overloaded_error");
  assert.equal(parseErrorBody(enc(" \ufeff" + over)).typ, "");
  assert.equal(parseErrorBody(enc("\f" + over)).typ, "");
  assert.equal(parseErrorBody(enc('{"error":{"code":1e2}}')).code, "");
  assert.equal(parseErrorBody(enc('{"ERROR":{"\u017ftatus":"UNAVAILABLE"}}')).status, "unavailable");
  const deep = "[".repeat(10001) + '"insufficient_quota"' + "]".repeat(10001);
  assert.equal(parseErrorBody(enc(deep)).quota, "insufficient_quota", "deeper than Go's encoding/json reads: plain text");
  const ok = "[".repeat(10000) + '"insufficient_quota"' + "]".repeat(10000);
  assert.equal(parseErrorBody(enc(ok)).quota, "");
});

// ---- the differential test ----

let seed = 7; // mulberry32: deterministic inputs
function rand(n: number): number {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
}
const pick = <T>(xs: readonly T[]): T => xs[rand(xs.length)]!;

/** Inserts, replaces or deletes a few pieces of s. */
function mutate(s: string, alphabet: readonly string[]): string {
  for (let k = rand(4); k > 0; k--) {
    const at = rand(s.length + 1);
    switch (rand(3)) {
      case 0: s = s.slice(0, at) + pick(alphabet) + s.slice(at); break;
      case 1: s = s.slice(0, at) + pick(alphabet) + s.slice(at + 1); break;
      default: s = s.slice(0, at) + s.slice(at + 1 + rand(3));
    }
  }
  return s;
}

const seeds: Record<string, string[]> = {
  "retry-after": ["120", "1.5", "0", "30", "31", "Fri, 14 Mar 2025 12:00:07 GMT", "Friday, 14-Mar-25 12:00:09 GMT",
    "Fri Mar 14 12:00:09 2025", "Sat Mar 15 12:00:09 2025", "Fri, 14 Mar 2025 12:00:30 GMT, 5", "99999999999999999999",
    "Sat, 29 Feb 2025 12:00:00 GMT", "Fri Mar  1 12:00:09 2025", "Wed, 21 Oct 2015 07:28:00 GMT", "Thu, 29 Feb 0000 00:00:00 GMT"],
  "retry-after-ms": ["2000", "12.5", "0", "-1", "30001", "0.0001"],
  "x-ms-retry-after-ms": ["2500", "0", "-1", "1e3"],
  "x-should-retry": ["true", "false", "TRUE", "True, false", "maybe", "true, true"],
  "x-ratelimit-remaining-requests": ["0", "00", "5", "0, 3"],
  "x-ratelimit-reset-requests": ["6m0s", "1.5s", "20ms", "1h2m3s", "0", "2s, 4s"],
  "x-ratelimit-remaining-tokens": ["0", "7"],
  "x-ratelimit-reset-tokens": ["1m30.5s", "500ms"],
  "anthropic-ratelimit-requests-remaining": ["0", "1"],
  "anthropic-ratelimit-requests-reset": ["2025-03-14T12:00:20Z", "2025-03-14T12:00:20.5Z", "2025-03-14T13:00:20+01:00",
    "2025-03-14T12:00:20,5Z", "2025-03-14T12:00:20.0000000001Z", "0025-03-14T12:00:20Z"],
  "anthropic-ratelimit-output-tokens-remaining": ["0"],
  "anthropic-ratelimit-output-tokens-reset": ["2025-03-14T12:01:00Z", "2025-03-14T12:00:01.999999Z"],
};
// Names picked together: a remaining count with its reset.
const groups = [["retry-after"], ["retry-after-ms"], ["x-ms-retry-after-ms"], ["x-should-retry"],
  ["x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"], ["x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"],
  ["anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset"],
  ["anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-reset"]];
// Pieces of a header line: one character per byte, as fetch holds a line off the wire.
const lineAlphabet = [..."0123456789,.-+:TZzs \t", ", ", "GMT", "Fri", "Friday", "Sat", "Mon", "Mar", "mar", "Feb", "true", "false",
  "TRUE", "e", "m", "h", "ms", "\xa0", "\xc5\xbf", "\xff", "\xe9", "29", "00", "24", "60", "+01:00", ".5", ",5"];

const bodySeeds = [
  '{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}',
  '{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}',
  '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
  '{"type":"error","error":{"type":"billing_error","message":"Your credit balance is too low"}}',
  '[{"error":{"code":429,"message":"Quota","status":"RESOURCE_EXHAUSTED"}}]',
  '{"error":{"code":"engine_overloaded","type":"server_error"}}', '{"error":{"ERROR":{"Code":"x"},"Code":"insufficient_quota"}}',
  "error: insufficient_quota (see billing)", "<html>503 Service Unavailable</html>", "", '{"error":null}', "[]",
];
// Pieces of a body, as bytes (one character per byte).
const bodyAlphabet = ["\xef\xbb\xbf", " ", "\t", "\r", "\n", "\f", "\v", "\xa0", "\xc2\xa0", "\xff", "\xc5\xbf", "\xe2\x84\xaa", '"', "{", "}", "[", "]",
  ",", ":", "\\", "\\u017f", "\\ufeff", "1", "e2", ".5", "-", "insufficient_quota", "overloaded", "_error", "null", "true", "type", "code", "status", "error", "S", "K"];

const bytes = (s: string) => Uint8Array.from(s, (c) => c.charCodeAt(0));
const b64 = (s: string) => Buffer.from(bytes(s)).toString("base64");

interface Got {
  outcome: string; retryable: boolean; retry_after_ms: number; error_code: string; proactive_ms: number; too_long: boolean;
  server_delay_ms: number; should_retry: number; proactive_only_ms: number;
}

test("headers: the Go and TypeScript clients read thousands of generated responses alike", () => {
  const statuses = [200, 200, 400, 402, 403, 404, 429, 429, 500, 503, 503, 529];
  const cases: { status: number; headers: [string, string][]; body: string }[] = [];
  for (let i = 0; i < 20000; i++) {
    const headers: [string, string][] = [];
    for (let n = rand(4); n > 0; n--) for (const name of pick(groups)) {
      const line = rand(5) === 0 ? pick(seeds[name]!) : mutate(pick(seeds[name]!), lineAlphabet);
      const copies = 1 + (rand(3) === 0 ? rand(3) : 0); // a gateway repeating the line
      for (let c = 0; c < copies; c++) headers.push([name, c > 0 && rand(2) === 0 ? mutate(line, lineAlphabet) : line]);
    }
    const body = rand(4) === 0 ? pick(bodySeeds) : mutate(pick(bodySeeds), bodyAlphabet);
    cases.push({ status: pick(statuses), headers, body: rand(3) === 0 ? "\xef\xbb\xbf" + body : body });
  }
  // fetch refuses NUL, CR and LF in a value, and trims spaces and tabs (as a line off the wire is).
  const wire = cases.map((c) => ({ ...c, headers: c.headers.filter(([, v]) => !/[\0\r\n]/.test(v)) }));
  const input = JSON.stringify({
    now: new Date(now).toISOString(),
    cases: wire.map((c) => ({ status: c.status, headers: c.headers.map(([k, v]) => [k, b64(v)]), body: b64(c.body) })),
  });
  const bin = goBinary("./clients/ts/conformance/headerstrace", "headerstrace", "HEADERSTRACE_BIN");
  const want: Got[] = JSON.parse(execFileSync(bin, [], { cwd: repoRoot, input, maxBuffer: 1 << 28, encoding: "utf8" }));
  assert.equal(want.length, wire.length);
  const diffs: string[] = [];
  const seen = { delay: 0, tooLong: 0, shouldRetry: 0, proactive: 0, code: 0, quota: 0, overloaded: 0 };
  wire.forEach((c, i) => {
    const h = new Headers();
    for (const [k, v] of c.headers) h.append(k, v);
    const body = c.body === "" ? undefined : bytes(c.body);
    const cl = classify({ now: () => now }, { status: c.status, headers: h }, body, undefined);
    const sr = shouldRetryHeader(h);
    const got: Got = {
      outcome: outcomeName(cl.outcome), retryable: cl.retryable, retry_after_ms: cl.retryAfterMs, error_code: cl.errorCode,
      proactive_ms: cl.proactiveMs, too_long: cl.tooLong, server_delay_ms: serverDelay(h, now) ?? -1,
      should_retry: sr === undefined ? -1 : sr ? 1 : 0, proactive_only_ms: proactiveDelay(h, now) ?? -1,
    };
    const w = want[i]!;
    if (w.server_delay_ms >= 0) seen.delay++;
    if (w.too_long) seen.tooLong++;
    if (w.should_retry >= 0) seen.shouldRetry++;
    if (w.proactive_only_ms >= 0) seen.proactive++;
    if (w.error_code !== "") seen.code++;
    if (w.outcome === "quota_exhausted" && c.status !== 402) seen.quota++;
    if (w.outcome === "overloaded" && c.status !== 529) seen.overloaded++;
    if (JSON.stringify(got) !== JSON.stringify(w)) {
      diffs.push(`${JSON.stringify({ status: c.status, headers: c.headers, body: c.body })}:\n  go ${JSON.stringify(w)}\n  ts ${JSON.stringify(got)}`);
    }
  });
  assert.deepEqual(diffs.slice(0, 10), [], `${diffs.length} of ${wire.length} differ`);
  // The test is only as good as what it reached.
  for (const [k, n] of Object.entries(seen)) assert.ok(n > wire.length / 100, `only ${n} of ${wire.length} cases reached ${k}: ${JSON.stringify(seen)}`);
  console.log(`headers differential: ${wire.length} responses, all equal; reached ${JSON.stringify(seen)}`);
});
