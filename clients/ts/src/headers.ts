// Server delays and rate-limit headers, read as the Go client reads them
// (client/headers.go): the SDKs' precedence, huge valid delays capped at
// MaxHint, never garbage. Durations are milliseconds; a fraction below a
// millisecond is rounded up, never down.
//
// A header is the list of its elements (RFC 9110 §5.3, §5.6.1;
// docs/decisions/0035-a-header-is-the-list-of-its-elements.md): fetch joins
// a field's lines with ", ", Go joins them the same way, and both split the
// joined value at each comma (but the one right after a weekday name, which
// belongs to an HTTP-date), trim spaces and tabs, and drop empty elements.
// Invalid elements are ignored; when valid ones disagree the cautious one
// wins: the longest delay, a remaining count of zero, the latest reset,
// x-should-retry false.

/** The longest delay a header is read as, and the longest retry_after cooldownd accepts: 24 h. */
export const MaxHintMs = 24 * 3600_000;

/** Anything with a case-insensitive get, such as fetch's Headers. */
export interface HeaderGetter {
  get(name: string): string | null;
}

const isDigit = (c: string | undefined) => c !== undefined && c >= "0" && c <= "9";

function trimSpTab(s: string): string {
  return s.replace(/^[ \t]+|[ \t]+$/g, "");
}

const dayNames = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const longDayNames = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/**
 * The list elements of a field value (its lines joined with ", ", as fetch's
 * Headers.get returns them): split at each comma, except one right after a
 * weekday name (the comma of an HTTP-date), trimmed of spaces and tabs,
 * empty ones dropped.
 */
export function elements(v: string | null | undefined): string[] {
  const s = v ?? "";
  const out: string[] = [];
  let start = 0;
  for (let i = 0; i <= s.length; i++) {
    if (i < s.length && s[i] !== ",") continue;
    const e = trimSpTab(s.slice(start, i));
    if (i < s.length && (dayNames.includes(e) || longDayNames.includes(e))) continue;
    start = i + 1;
    if (e !== "") out.push(e);
  }
  return out;
}

/** The largest value of f over the elements of v, undefined when no element is valid. */
function longest(v: string | null, f: (e: string) => number | undefined): number | undefined {
  let best: number | undefined;
  for (const e of elements(v)) {
    const d = f(e);
    if (d !== undefined) best = Math.max(best ?? d, d);
  }
  return best;
}

/**
 * Parses digits with an optional '.' and fraction digits, times unitMs,
 * rounding a remainder below a millisecond up. A value above MaxHint (any
 * number of digits) is MaxHint.
 */
export function parseDecimal(s: string, unitMs: number): number | undefined {
  const dot = s.indexOf(".");
  const intPart = dot >= 0 ? s.slice(0, dot) : s;
  const frac = dot >= 0 ? s.slice(dot + 1) : "";
  if (intPart === "" || (dot >= 0 && frac === "")) return undefined;
  if (![...intPart].every(isDigit) || ![...frac].every(isDigit)) return undefined;
  const n = BigInt(intPart);
  if (n > BigInt(Math.floor(MaxHintMs / unitMs))) return MaxHintMs;
  // Exact: value = (intPart.frac) * unitMs, in units of 10^-len(frac) ms.
  const scale = 10n ** BigInt(frac.length);
  const num = (n * scale + BigInt(frac === "" ? "0" : frac)) * BigInt(unitMs);
  let ms = num / scale;
  if (num % scale !== 0n) ms += 1n;
  return Math.min(Number(ms), MaxHintMs);
}

const months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const shortDays = `(${dayNames.join("|")})`;
const longDays = `(${longDayNames.join("|")})`;
const imfFixdate = new RegExp(`^${shortDays}, (\\d{2}) (${months.join("|")}) (\\d{4}) (\\d{2}):(\\d{2}):(\\d{2}) GMT$`);
const rfc850 = new RegExp(`^${longDays}, (\\d{2})-(${months.join("|")})-(\\d{2}) (\\d{2}):(\\d{2}):(\\d{2}) GMT$`);
const asctime = new RegExp(`^${shortDays} (${months.join("|")}) ( \\d|\\d{2}) (\\d{2}):(\\d{2}):(\\d{2}) (\\d{4})$`);

/** Days of month m (0 to 11) of the proleptic Gregorian year y. */
function daysIn(m: number, y: number): number {
  if (m === 1 && y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0)) return 29;
  return [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][m]!;
}

/** Unix ms of a UTC date and time that exist, any year 0 to 9999 (Date.UTC would read 0 to 99 as 19yy). */
function civil(y: number, m: number, d: number, h: number, mi: number, s: number): number | undefined {
  if (m < 0 || m > 11 || d < 1 || d > daysIn(m, y) || h > 23 || mi > 59 || s > 59) return undefined;
  const t = new Date(0);
  t.setUTCFullYear(y, m, d);
  t.setUTCHours(h, mi, s, 0);
  return t.getTime();
}

function utc(y: number, mon: string, d: number, h: number, mi: number, s: number): number | undefined {
  return civil(y, months.indexOf(mon), d, h, mi, s);
}

/**
 * Parses an HTTP-date exactly as RFC 9110 §5.6.7 writes it (IMF-fixdate,
 * RFC 850 with a year below 69 read as 20yy, asctime): case-sensitive
 * names, exact digits, GMT, a date that exists; the weekday is not checked.
 * The Go client parses the same grammar. Unix ms.
 */
export function parseHTTPDate(v: string): number | undefined {
  let m = imfFixdate.exec(v);
  if (m) return utc(+m[4]!, m[3]!, +m[2]!, +m[5]!, +m[6]!, +m[7]!);
  m = rfc850.exec(v);
  if (m) {
    const yy = +m[4]!;
    return utc(yy >= 69 ? 1900 + yy : 2000 + yy, m[3]!, +m[2]!, +m[5]!, +m[6]!, +m[7]!);
  }
  m = asctime.exec(v);
  if (m) return utc(+m[7]!, m[2]!, +m[3]!.trim(), +m[4]!, +m[5]!, +m[6]!);
  return undefined;
}

/**
 * Parses a Retry-After field value (seconds, optionally fractional, or an
 * HTTP date) relative to now (Unix ms): the longest of its valid elements,
 * so "120, 120" is 120 s. A date in the past is 0; a valid delay above
 * MaxHint is MaxHint; no valid element is undefined.
 */
export function parseRetryAfter(v: string | null | undefined, now: number): number | undefined {
  return longest(v ?? null, (e) => {
    if (isDigit(e[0])) return parseDecimal(e, 1000);
    const t = parseHTTPDate(e);
    if (t === undefined) return undefined;
    return Math.min(Math.max(t - now, 0), MaxHintMs);
  });
}

function parseMillis(v: string | null, positive: boolean): number | undefined {
  return longest(v, (e) => {
    const d = parseDecimal(e, 1);
    return d === undefined || (positive && d === 0) ? undefined : d;
  });
}

/**
 * The delay the response headers ask for, in the SDKs' precedence: the
 * first of retry-after-ms, x-ms-retry-after-ms (> 0) and Retry-After that
 * holds a valid element, the longest of that header's valid elements.
 */
export function serverDelay(h: HeaderGetter, now: number): number | undefined {
  return parseMillis(h.get("retry-after-ms"), false)
    ?? parseMillis(h.get("x-ms-retry-after-ms"), true)
    ?? parseRetryAfter(h.get("retry-after"), now);
}

const asciiLower = (s: string) => s.replace(/[A-Z]/g, (c) => String.fromCharCode(c.charCodeAt(0) + 32));

/**
 * Reads x-should-retry: each element true or false (ASCII case-insensitive),
 * others ignored; false when one says false, true when the valid ones all
 * say true, else undefined.
 */
export function shouldRetryHeader(h: HeaderGetter): boolean | undefined {
  let retry: boolean | undefined;
  for (const e of elements(h.get("x-should-retry"))) {
    const v = asciiLower(e);
    if (v === "false") return false;
    if (v === "true") retry = true;
  }
  return retry;
}

/** Whether an element of the field value v is a remaining-count of zero ("0", "000"). */
function hasZeroCount(v: string | null): boolean {
  return elements(v).some((e) => /^0+$/.test(e));
}

const resetUnits: [string, number][] = [["h", 3600_000], ["ms", 1], ["m", 60_000], ["s", 1000]];

/** Parses an OpenAI x-ratelimit-reset-* value ("1h2m3.5s", "6m0s", "20ms", "0"). */
export function parseResetDuration(v: string): number | undefined {
  let s = trimSpTab(v);
  if (s === "0") return 0;
  let total = 0;
  let last = Infinity;
  while (s !== "") {
    let i = 0;
    while (i < s.length && (isDigit(s[i]) || s[i] === ".")) i++;
    const num = s.slice(0, i), rest = s.slice(i);
    let matched = false;
    for (const [name, unit] of resetUnits) {
      if (!rest.startsWith(name) || unit >= last) continue;
      const d = parseDecimal(num, unit);
      if (d === undefined) return undefined;
      total = Math.min(total + d, MaxHintMs);
      last = unit;
      s = rest.slice(name.length);
      matched = true;
      break;
    }
    if (!matched) return undefined;
  }
  return last === Infinity ? undefined : total;
}

const rfc3339 = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

/**
 * Parses an RFC 3339 time ("2006-01-02T15:04:05", an optional '.' fraction,
 * "Z" or "±hh:mm") to Unix ms, rounding a sub-ms fraction up; nothing else
 * (no ',' fraction, no lower-case T or Z), as the Go client.
 */
export function parseRFC3339(v: string): number | undefined {
  const m = rfc3339.exec(v);
  if (!m) return undefined;
  let t = civil(+m[1]!, +m[2]! - 1, +m[3]!, +m[4]!, +m[5]!, +m[6]!);
  if (t === undefined) return undefined;
  if (m[7]) t += parseDecimal("0" + m[7], 1000)!;
  if (m[8] !== "Z") {
    const sign = m[8]![0] === "-" ? -1 : 1;
    const oh = +m[8]!.slice(1, 3), om = +m[8]!.slice(4, 6);
    if (oh > 23 || om > 59) return undefined;
    t -= sign * (oh * 60 + om) * 60_000;
  }
  return t;
}

const anthropicLimits = ["requests", "tokens", "input-tokens", "output-tokens"];

/**
 * Reads rate-limit headers on a success and returns how long until an
 * exhausted limit resets (> 0), so every process cools down before the
 * first 429: OpenAI x-ratelimit-remaining/reset-{requests,tokens} and
 * Anthropic anthropic-ratelimit-*-remaining/reset. A limit is exhausted
 * when an element of its remaining header is 0; its reset is the latest
 * valid element. Undefined when no limit is exhausted with a reset in the
 * future.
 */
export function proactiveDelay(h: HeaderGetter, now: number): number | undefined {
  let best = 0;
  for (const kind of ["requests", "tokens"]) {
    if (!hasZeroCount(h.get("x-ratelimit-remaining-" + kind))) continue;
    best = Math.max(best, longest(h.get("x-ratelimit-reset-" + kind), parseResetDuration) ?? 0);
  }
  for (const kind of anthropicLimits) {
    const prefix = "anthropic-ratelimit-" + kind;
    if (!hasZeroCount(h.get(prefix + "-remaining"))) continue;
    const t = longest(h.get(prefix + "-reset"), parseRFC3339);
    if (t !== undefined) best = Math.max(best, Math.min(t - now, MaxHintMs));
  }
  return best > 0 ? best : undefined;
}
