// Connections: an id derived in this process and a short label.

import { deriveId, idHex, type ConnectionInput } from "./keys.js";
import { InvalidConnError } from "./errors.js";

/** The longest label, in bytes, cooldownd accepts. */
export const MaxLabelLen = 64;

const enc = new TextEncoder();

/** One connection: its id and label. It never holds the credential. */
export class Conn {
  readonly id: Uint8Array;
  readonly idHex: string;
  readonly label: string;
  constructor(id: Uint8Array, label: string) {
    if (id.length !== 32) throw new InvalidConnError("an id is 32 bytes");
    this.id = Uint8Array.from(id);
    this.idHex = idHex(id);
    this.label = label;
  }
  /** The first 8 hex digits of the id, the form people see (logs, dashboard, cooldownctl, labels). */
  get short(): string { return this.idHex.slice(0, 8); }
  toString(): string {
    const short = this.short + "…";
    if (this.label.endsWith(short)) return this.label;
    return this.label === "" ? short : `${this.label} ${short}`;
  }
  toJSON(): { label: string; id: string } { return { label: this.label, id: this.short }; }
}

const notPrint = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}]/u;

/** The input of Client.connection: the key inputs and an optional label. */
export interface ConnectionSpec extends ConnectionInput {
  /** Dashboard label; empty: "<provider> <scope> <8 hex>…". At most 64 bytes, never the credential. */
  label?: string;
}

/** Derives a Conn; errors never contain the credential. */
export function makeConn(salt: Uint8Array, spec: ConnectionSpec): Conn {
  let id: Uint8Array;
  try {
    id = deriveId(salt, spec);
  } catch (e) {
    throw new InvalidConnError((e as Error).message);
  }
  let label = (spec.label ?? "").trim();
  if (label === "") {
    label = defaultLabel(spec.provider, spec.scope ?? "", idHex(id).slice(0, 8));
  } else if (enc.encode(label).length > MaxLabelLen || notPrint.test(label)) {
    throw new InvalidConnError(`label must be printable UTF-8 of at most ${MaxLabelLen} bytes`);
  } else if (spec.credential.length >= 4 && label.includes(spec.credential)) {
    throw new InvalidConnError("label contains the credential");
  }
  return new Conn(id, label);
}

function defaultLabel(provider: string, scope: string, short: string): string {
  const parts = [provider.trim().toLowerCase()];
  const s = scope.trim();
  if (s !== "" && !notPrint.test(s)) parts.push(s);
  const suffix = " " + short + "…";
  let l = parts.join(" ");
  while (enc.encode(l + suffix).length > MaxLabelLen) l = [...l].slice(0, -1).join("");
  return l + suffix;
}
