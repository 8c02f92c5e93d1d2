// Server delays and rate-limit headers, read as the Go client reads them
// (client/headers.go): the SDKs' precedence, huge valid delays capped at
// MaxHint, never garbage. Durations are milliseconds; a fraction below a
// millisecond is rounded up, never down.

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
const shortDays = "(Mon|Tue|Wed|Thu|Fri|Sat|Sun)";
const longDays = "(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)";
const imfFixdate = new RegExp(`^${shortDays}, (\\d{2}) (${months.join("|")}) (\\d{4}) (\\d{2}):(\\d{2}):(\\d{2}) GMT$`);
const rfc850 = new RegExp(`^${longDays}, (\\d{2})-(${months.join("|")})-(\\d{2}) (\\d{2}):(\\d{2}):(\\d{2}) ([A-Z]{3,4})$`);
const asctime = new RegExp(`^${shortDays} (${months.join("|")}) ([ \\d]\\d) (\\d{2}):(\\d{2}):(\\d{2}) (\\d{4})$`);

function utc(y: number, mon: string, d: number, h: number, mi: number, s: number): number | undefined {
  const m = months.indexOf(mon);
  if (d < 1 || d > 31 || h > 23 || mi > 59 || s > 59) return undefined;
  const t = Date.UTC(y, m, d, h, mi, s);
  if (new Date(t).getUTCDate() !== d) return undefined; // Feb 30
  return t;
}

/** Parses an HTTP date (IMF-fixdate, RFC 850 or asctime), as Go's http.ParseTime does; Unix ms. */
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
 * Parses a Retry-After value (seconds, optionally fractional, or an HTTP
 * date) relative to now (Unix ms). A date in the past is 0; a valid delay
 * above MaxHint is MaxHint; anything else is undefined.
 */
export function parseRetryAfter(v: string | null | undefined, now: number): number | undefined {
  const s = trimSpTab(v ?? "");
  if (s === "") return undefined;
  if (isDigit(s[0])) return parseDecimal(s, 1000);
  const t = parseHTTPDate(s);
  if (t === undefined) return undefined;
  return Math.min(Math.max(t - now, 0), MaxHintMs);
}

function parseMillis(v: string | null, positive: boolean): number | undefined {
  const d = parseDecimal(trimSpTab(v ?? ""), 1);
  if (d === undefined || (positive && d === 0)) return undefined;
  return d;
}

/**
 * The delay the response headers ask for, in the SDKs' precedence: the
 * first valid one of retry-after-ms, x-ms-retry-after-ms (> 0) and
 * Retry-After.
 */
export function serverDelay(h: HeaderGetter, now: number): number | undefined {
  return parseMillis(h.get("retry-after-ms"), false)
    ?? parseMillis(h.get("x-ms-retry-after-ms"), true)
    ?? parseRetryAfter(h.get("retry-after"), now);
}

/** Reads x-should-retry: true or false (case-insensitive), else undefined. */
export function shouldRetryHeader(h: HeaderGetter): boolean | undefined {
  const v = trimSpTab(h.get("x-should-retry") ?? "").toLowerCase();
  if (v === "true") return true;
  if (v === "false") return false;
  return undefined;
}

function isZeroCount(v: string | null): boolean {
  const s = (v ?? "").trim();
  return /^[0-9]+$/.test(s) && /^0+$/.test(s) && s.length <= 20;
}

const resetUnits: [string, number][] = [["h", 3600_000], ["ms", 1], ["m", 60_000], ["s", 1000]];

/** Parses an OpenAI x-ratelimit-reset-* value ("1h2m3.5s", "6m0s", "20ms", "0"). */
export function parseResetDuration(v: string): number | undefined {
  let s = v.trim();
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

/** Parses an RFC 3339 time (with optional fraction) to Unix ms, rounding a sub-ms fraction up. */
export function parseRFC3339(v: string): number | undefined {
  const m = rfc3339.exec(v);
  if (!m) return undefined;
  const [y, mo, d, h, mi, s] = [+m[1]!, +m[2]!, +m[3]!, +m[4]!, +m[5]!, +m[6]!];
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 59) return undefined;
  let t = Date.UTC(y, mo - 1, d, h, mi, s);
  if (new Date(t).getUTCDate() !== d) return undefined;
  if (m[7]) {
    const frac = m[7].slice(1);
    const ms = parseDecimal("0." + frac, 1000)!;
    t += ms;
  }
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
 * Anthropic anthropic-ratelimit-*-remaining/reset. Undefined when no
 * limit is exhausted with a reset in the future.
 */
export function proactiveDelay(h: HeaderGetter, now: number): number | undefined {
  let best = 0;
  for (const kind of ["requests", "tokens"]) {
    if (!isZeroCount(h.get("x-ratelimit-remaining-" + kind))) continue;
    const d = parseResetDuration(h.get("x-ratelimit-reset-" + kind) ?? "");
    if (d !== undefined) best = Math.max(best, d);
  }
  for (const kind of anthropicLimits) {
    const prefix = "anthropic-ratelimit-" + kind;
    if (!isZeroCount(h.get(prefix + "-remaining"))) continue;
    const t = parseRFC3339((h.get(prefix + "-reset") ?? "").trim());
    if (t === undefined) continue;
    best = Math.max(best, Math.min(t - now, MaxHintMs));
  }
  return best > 0 ? best : undefined;
}
