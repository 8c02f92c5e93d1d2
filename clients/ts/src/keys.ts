// Connection identity, as docs/keys.md specifies it (cooldown/v1): the
// same id as the Go implementation (internal/keys) for the same
// connection, proven by internal/keys/testdata/vectors.json. The
// credential is hashed in this process and never kept or sent.

import { createHmac } from "node:crypto";

/** The ASCII prefix of every hashed message. */
export const Domain = "cooldown/v1";
export const MinSaltLen = 16;
export const MaxSaltLen = 1024;
export const MaxProviderLen = 64;
export const MaxCredentialLen = 64 << 10;
export const MaxScopeLen = 256;
export const MaxEndpointLen = 2048;

/** A rejected input. The message names the part that was wrong, never its value. */
export class InvalidConnectionError extends Error {
  /** True when the endpoint was the problem. */
  readonly endpoint: boolean;
  constructor(message: string, endpoint = false) {
    super(message);
    this.name = "InvalidConnectionError";
    this.endpoint = endpoint;
  }
}

const reason = {
  tooLong: "longer than 2048 bytes",
  empty: "empty",
  syntax: "not a valid absolute URL",
  scheme: "scheme must be http or https",
  noHost: "host is missing",
  userinfo: "userinfo is not allowed",
  query: "query is not allowed",
  host: "host must be lower-case ASCII letters, digits, '.', '-' or '_'",
  ipv6: "IPv6 host must be a valid address without a zone",
  port: "port must be a number from 1 to 65535",
  path: "path contains a character that must be percent-encoded",
  dotSeg: "path must not contain '.' or '..' segments",
} as const;

const enc = new TextEncoder();
const asciiSpace = " \t\r\n";

function trimAscii(s: string): string {
  let a = 0, b = s.length;
  while (a < b && asciiSpace.includes(s[a]!)) a++;
  while (b > a && asciiSpace.includes(s[b - 1]!)) b--;
  return s.slice(a, b);
}

function asciiLower(s: string): string {
  return s.replace(/[A-Z]/g, (c) => String.fromCharCode(c.charCodeAt(0) + 32));
}

const isNameByte = (c: string) => /^[a-z0-9._-]$/.test(c);
const isHex = (c: string | undefined) => c !== undefined && /^[0-9a-fA-F]$/.test(c);
const isPathByte = (c: string) => /^[a-zA-Z0-9\-._~!$&'()*+,;=:@/]$/.test(c);

/** Checks the %XX escapes of s as Go's url.Parse does (a bad one is a syntax error). */
function validEscapes(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    if (s[i] === "%") {
      if (!isHex(s[i + 1]) || !isHex(s[i + 2])) return false;
      i += 2;
    }
  }
  return true;
}

/** Characters Go's url.Parse accepts unescaped in a host (shouldEscape with encodeHost). */
function hostCharOK(c: string): boolean {
  if (c.charCodeAt(0) >= 0x80) return true;
  return /^[a-zA-Z0-9\-._~!$&'()*+,;=:[\]<>"]$/.test(c);
}

function validUserinfo(s: string): boolean {
  for (const c of s) {
    if (!/^[a-zA-Z0-9\-._:~!$&'()*+,;=%@]$/.test(c)) return false;
  }
  return true;
}

/** Returns the canonical endpoint (docs/keys.md), or throws an InvalidConnectionError. */
export function normalizeEndpoint(raw: string): string {
  const [out, why] = normalize(raw);
  if (why) throw new InvalidConnectionError("keys: invalid endpoint: " + why, true);
  return out;
}

function normalize(raw: string): [string, string] {
  if (enc.encode(raw).length > MaxEndpointLen) return ["", reason.tooLong];
  const s = trimAscii(raw);
  if (s === "") return ["", reason.empty];
  const hash = s.indexOf("#");
  const beforeFrag = hash >= 0 ? s.slice(0, hash) : s;
  // Go's url.Parse rejects ASCII control characters before the fragment
  // (the fragment, dropped here, is only checked for its escapes).
  if (/[\x00-\x1f\x7f]/.test(beforeFrag)) return ["", reason.syntax];
  if (hash >= 0 && !validEscapes(s.slice(hash + 1))) return ["", reason.syntax];
  // Scheme.
  const m = /^([a-zA-Z][a-zA-Z0-9+.-]*):/.exec(beforeFrag);
  if (!m) {
    if (beforeFrag.startsWith(":")) return ["", reason.syntax];
    return ["", reason.scheme];
  }
  const scheme = m[1]!.toLowerCase();
  let rest = beforeFrag.slice(m[0].length);
  let hasQuery = false;
  const q = rest.indexOf("?");
  if (q >= 0) {
    hasQuery = true;
    rest = rest.slice(0, q);
  }
  if (scheme !== "http" && scheme !== "https") {
    // Go parses the rest first; a malformed rest is a syntax error either way.
    return ["", reason.scheme];
  }
  if (!rest.startsWith("//")) {
    if (!rest.startsWith("/") && rest !== "") return ["", reason.noHost]; // opaque
    if (!validEscapes(rest)) return ["", reason.syntax];
    return ["", reason.noHost];
  }
  rest = rest.slice(2);
  const slash = rest.indexOf("/");
  const authority = slash >= 0 ? rest.slice(0, slash) : rest;
  const rawPath = slash >= 0 ? rest.slice(slash) : "";
  let host = authority;
  let hasUser = false;
  const at = authority.lastIndexOf("@");
  if (at >= 0) {
    if (!validUserinfo(authority.slice(0, at))) return ["", reason.syntax];
    hasUser = true;
    host = authority.slice(at + 1);
  }
  // Host and port, as url.Parse splits them.
  let name: string, port: string;
  let bracketed = false;
  if (host.startsWith("[")) {
    const close = host.lastIndexOf("]");
    if (close < 0) return ["", reason.syntax];
    const colonPort = host.slice(close + 1);
    if (!/^(:[0-9]*)?$/.test(colonPort)) return ["", reason.syntax];
    name = host.slice(1, close);
    port = colonPort.slice(1);
    bracketed = true;
    if (name.includes("%")) {
      // A zone (%25en0); Go parses it, cooldownd rejects it.
      return ["", validEscapes(name) ? reason.ipv6 : reason.syntax];
    }
    if (parseIPv6(name) === undefined) return ["", reason.syntax];
  } else {
    const colon = host.lastIndexOf(":");
    name = host;
    port = "";
    if (colon >= 0) {
      const colonPort = host.slice(colon);
      if (!/^:[0-9]*$/.test(colonPort)) return ["", reason.syntax];
      name = host.slice(0, colon);
      port = colonPort.slice(1);
    }
    for (const c of name) if (c !== "%" && !hostCharOK(c)) return ["", reason.syntax];
    if (!validEscapes(name)) return ["", reason.syntax];
  }
  if (!validEscapes(rawPath)) return ["", reason.syntax];
  if (host === "" && !hasUser) return ["", reason.noHost];
  if (hasUser) return ["", host === "" ? reason.noHost : reason.userinfo];
  if (hasQuery) return ["", reason.query];
  // Canonical host.
  if (bracketed) {
    const groups = parseIPv6(name)!;
    name = "[" + formatIPv6(groups) + "]";
  } else {
    if (name.includes("%")) return ["", reason.host]; // percent-encoded host names are rejected
    name = asciiLower(name);
    if (name === "" || ![...name].every(isNameByte)) return ["", reason.host];
  }
  let hostOut = name;
  if (port !== "") {
    if (!/^[0-9]+$/.test(port) || port.replace(/^0+/, "").length > 5) return ["", reason.port];
    const n = Number(port);
    if (n < 1 || n > 65535) return ["", reason.port];
    if (!((scheme === "http" && n === 80) || (scheme === "https" && n === 443))) hostOut += ":" + n;
  }
  // Path, as written.
  let path = "";
  for (let i = 0; i < rawPath.length; i++) {
    const c = rawPath[i]!;
    if (c === "%") {
      if (!isHex(rawPath[i + 1]) || !isHex(rawPath[i + 2])) return ["", reason.path];
      path += "%" + rawPath[i + 1]!.toUpperCase() + rawPath[i + 2]!.toUpperCase();
      i += 2;
    } else if (isPathByte(c)) {
      path += c;
    } else {
      return ["", reason.path];
    }
  }
  for (const seg of path.split("/")) {
    const dec = seg.replaceAll("%2E", ".");
    if (dec === "." || dec === "..") return ["", reason.dotSeg];
  }
  path = path.replace(/\/+$/, "");
  const out = scheme + "://" + hostOut + path;
  if (enc.encode(out).length > MaxEndpointLen) return ["", reason.tooLong];
  return [out, ""];
}

/** Parses an IPv6 address (optionally ending in dotted IPv4) into 8 groups. */
function parseIPv6(s: string): number[] | undefined {
  if (s === "" || !/^[0-9a-fA-F:.]+$/.test(s)) return undefined;
  let tail: number[] = [];
  let str = s;
  const lastColon = str.lastIndexOf(":");
  if (str.slice(lastColon + 1).includes(".")) {
    const v4 = str.slice(lastColon + 1);
    const parts = v4.split(".");
    if (parts.length !== 4) return undefined;
    const bytes: number[] = [];
    for (const p of parts) {
      if (!/^[0-9]{1,3}$/.test(p) || (p.length > 1 && p[0] === "0")) return undefined;
      const n = Number(p);
      if (n > 255) return undefined;
      bytes.push(n);
    }
    tail = [(bytes[0]! << 8) | bytes[1]!, (bytes[2]! << 8) | bytes[3]!];
    str = str.slice(0, lastColon + 1);
    if (str.endsWith("::")) {
      // "::1.2.3.4": keep the double colon
    } else if (str.endsWith(":")) {
      str = str.slice(0, -1);
    }
  }
  const dbl = str.indexOf("::");
  if (dbl >= 0 && str.indexOf("::", dbl + 1) >= 0) return undefined;
  const parseGroups = (x: string): number[] | undefined => {
    if (x === "") return [];
    const out: number[] = [];
    for (const g of x.split(":")) {
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return undefined;
      out.push(parseInt(g, 16));
    }
    return out;
  };
  const want = 8 - tail.length;
  if (dbl >= 0) {
    const head = parseGroups(str.slice(0, dbl));
    const rest = parseGroups(str.slice(dbl + 2));
    if (!head || !rest || head.length + rest.length >= want + 1) return undefined;
    if (head.length + rest.length > want - 1) return undefined;
    return [...head, ...new Array(want - head.length - rest.length).fill(0), ...rest, ...tail];
  }
  const all = parseGroups(str);
  if (!all || all.length !== want) return undefined;
  return [...all, ...tail];
}

/** RFC 5952 form, as Go's netip.Addr.String writes it (IPv4-mapped as ::ffff:a.b.c.d). */
function formatIPv6(g: number[]): string {
  if (g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff) {
    return `::ffff:${g[6]! >> 8}.${g[6]! & 255}.${g[7]! >> 8}.${g[7]! & 255}`;
  }
  let bestStart = -1, bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (g[i] !== 0) { i++; continue; }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) { bestStart = i; bestLen = j - i; }
    i = j;
  }
  const hex = (xs: number[]) => xs.map((x) => x.toString(16)).join(":");
  if (bestStart < 0) return hex(g);
  return hex(g.slice(0, bestStart)) + "::" + hex(g.slice(bestStart + bestLen));
}

/** The inputs of one connection id. */
export interface ConnectionInput {
  /** The API, e.g. "openai": trimmed, lower-cased, 1..64 of [a-z0-9._-]. */
  provider: string;
  /** The base URL, e.g. "https://api.openai.com/v1". */
  endpoint: string;
  /** The API key: 1..65536 bytes. Hashed, never kept. */
  credential: string;
  /** Optional model, region or deployment, kept verbatim (≤ 256 bytes). */
  scope?: string;
}

function normalizeProvider(p: string): string | undefined {
  const out = asciiLower(trimAscii(p));
  return out !== "" && out.length <= MaxProviderLen && [...out].every(isNameByte) ? out : undefined;
}

function field(b: Uint8Array): Buffer {
  const n = Buffer.alloc(4);
  n.writeUInt32BE(b.length);
  return Buffer.concat([n, b]);
}

/** Derives the 32-byte id of a connection with the salt (empty or 16..1024 bytes). */
export function deriveId(salt: Uint8Array, c: ConnectionInput): Uint8Array {
  if (salt.length !== 0 && (salt.length < MinSaltLen || salt.length > MaxSaltLen)) {
    throw new InvalidConnectionError("keys: invalid salt: length must be 0 or 16..1024 bytes");
  }
  const provider = normalizeProvider(c.provider);
  if (provider === undefined) {
    throw new InvalidConnectionError("keys: invalid connection: provider must be 1..64 characters of [a-z0-9._-]");
  }
  const [endpoint, why] = normalize(c.endpoint);
  if (why) throw new InvalidConnectionError("keys: invalid connection: endpoint: " + why, true);
  const cred = enc.encode(c.credential);
  const scope = enc.encode(c.scope ?? "");
  if (cred.length === 0) throw new InvalidConnectionError("keys: invalid connection: credential is empty");
  if (cred.length > MaxCredentialLen) throw new InvalidConnectionError("keys: invalid connection: credential is longer than 65536 bytes");
  if (scope.length > MaxScopeLen) throw new InvalidConnectionError("keys: invalid connection: scope is longer than 256 bytes");
  const mac = createHmac("sha256", salt);
  mac.update(Domain);
  for (const f of [enc.encode(provider), enc.encode(endpoint), cred, scope]) mac.update(field(f));
  return new Uint8Array(mac.digest());
}

/** The id as 64 lower-case hex characters. */
export function idHex(id: Uint8Array): string {
  return Buffer.from(id).toString("hex");
}

/** Parses 64 lower-case hex characters. */
export function parseId(s: string): Uint8Array {
  if (!/^[0-9a-f]{64}$/.test(s)) throw new InvalidConnectionError("keys: invalid id: want 64 lower-case hex characters");
  return new Uint8Array(Buffer.from(s, "hex"));
}
