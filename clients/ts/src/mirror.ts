// The client's mirror (the Go client's WithMirror, client/mirror.go): a
// copy of the connections this process uses, fed by cooldownd's
// WatchConnections stream, that admits a call without a round trip while
// its connection is closed and healthy; successes are counted and
// reported in batches (Report.count); failures, hints and probes still go
// to cooldownd at once.

import type { Client as RpcClient } from "@connectrpc/connect";
import { Override as WireOverride, State as WireState, type ConnectionState, type CooldownService, type ReportRequest } from "./gen/v1/cooldown_pb.js";
import { idHex } from "./keys.js";
import type { Conn } from "./conn.js";
import type { Logger } from "./log.js";
import { QueueBackoffBaseMs, QueueBackoffCapMs } from "./queue.js";

/** How long a mirrored entry admits without cooldownd confirming it. */
export const MirrorMaxAgeMs = 30_000;
/** A watch stream that sent nothing (not even its 15 s heartbeat) for this long is ended. */
export const MirrorSilenceMs = 45_000;
const maxMirrored = 8192;
export const DefaultMirrorIntervalMs = 1_000;

/** The counters of the mirror. */
export interface MirrorStats {
  live: boolean; mirrored: number; admits: number; batched: number; batches: number;
}

/** What the mirror needs of its client. */
export interface MirrorHost {
  now(): number;
  log: Logger;
  closed: AbortSignal;
  /** The endpoint to watch now. */
  rpc(): RpcClient<typeof CooldownService>;
  /** Whether an error is a refusal (never retried soon). */
  rejected(err: unknown): boolean;
  /** Sends one report; "ok", "dropped" (refused) or "later" (queued). */
  sendBatch(conn: Conn, rev: bigint, count: number): Promise<void>;
}

interface Entry { conn: Conn; rev: bigint; seenAt: number; }

export class Mirror {
  live = false;
  epoch = 0;
  private entries = new Map<string, Entry>();
  private evRev = new Map<string, bigint>();
  private batch = new Map<string, { conn: Conn; rev: bigint; n: number }>();
  private admits = 0;
  private batched = 0;
  private batches = 0;
  private watching: Promise<void> | undefined;
  private ticker: NodeJS.Timeout | undefined;

  constructor(private readonly host: MirrorHost, private readonly intervalMs: number) {}

  start(): void {
    this.watching = this.watch();
    this.ticker = setInterval(() => { void this.flush(); }, this.intervalMs);
    this.ticker.unref();
  }

  /** Stops the stream and the ticker, then sends what was counted. */
  async stop(): Promise<void> {
    if (this.ticker) clearInterval(this.ticker);
    await this.watching;
    await this.flush();
  }

  /** Admits a call to conn when the stream is live and cooldownd last said the connection is closed. */
  admit(conn: Conn, now: number): bigint | undefined {
    const e = this.entries.get(conn.idHex);
    if (!this.live || !e || now - e.seenAt > MirrorMaxAgeMs) return undefined;
    this.admits++;
    return e.rev;
  }

  /** Takes cooldownd's answer to an Admit sent at epoch. */
  learn(conn: Conn, allowed: boolean, state: WireState, rev: bigint, epoch: number, now: number): void {
    const id = conn.idHex;
    if (!allowed || state !== WireState.CLOSED) {
      this.entries.delete(id);
      return;
    }
    if (!this.live || epoch !== this.epoch || rev < (this.evRev.get(id) ?? 0n)) return;
    if (this.entries.size >= maxMirrored) this.entries.clear();
    this.entries.set(id, { conn, rev, seenAt: now });
  }

  /** Applies one transition of the tenant. */
  event(st: ConnectionState, now: number): void {
    const raw = st.connection?.id;
    if (!raw || raw.length !== 32) return;
    const id = idHex(raw);
    const rev = st.revision;
    if (rev < (this.evRev.get(id) ?? 0n)) return; // an older event, delivered late
    if (this.evRev.size >= maxMirrored) {
      this.evRev.clear();
      this.entries.clear();
    }
    this.evRev.set(id, rev);
    const e = this.entries.get(id);
    if (!e) return;
    if (st.state === WireState.CLOSED && st.override === WireOverride.UNSPECIFIED) {
      e.rev = rev;
      e.seenAt = now;
      return;
    }
    this.entries.delete(id);
  }

  private down(): void {
    this.live = false;
    this.epoch++;
    this.entries.clear();
    this.evRev.clear();
  }

  private async watch(): Promise<void> {
    const closed = this.host.closed;
    let backoff = QueueBackoffBaseMs;
    let logged = false;
    while (!closed.aborted) {
      let err: unknown;
      try {
        await this.follow(this.host.rpc());
      } catch (e) {
        err = e;
      }
      this.down();
      if (closed.aborted) return;
      this.host.log.debug("mirror watch stream ended", { error: String(err) });
      if (err !== undefined && this.host.rejected(err)) {
        if (!logged) {
          this.host.log.warn("cooldownd refused the mirror's watch stream; every call goes to cooldownd", { error: String(err) });
          logged = true;
        }
        backoff = QueueBackoffCapMs * 6;
      }
      const d = backoff / 2 + Math.floor(Math.random() * (backoff / 2 + 1));
      backoff = Math.min(2 * backoff, QueueBackoffCapMs);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, d);
        closed.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
      });
      if (err === undefined) backoff = QueueBackoffBaseMs;
    }
  }

  /** Reads one stream until it ends; a stream silent for too long is ended too. */
  private async follow(rpc: RpcClient<typeof CooldownService>): Promise<void> {
    const ctl = new AbortController();
    const onClose = () => ctl.abort();
    this.host.closed.addEventListener("abort", onClose, { once: true });
    let quiet = setTimeout(() => ctl.abort(), MirrorSilenceMs);
    try {
      for await (const msg of rpc.watchConnections({}, { signal: ctl.signal })) {
        clearTimeout(quiet);
        quiet = setTimeout(() => ctl.abort(), MirrorSilenceMs);
        this.live = true; // the first message, a heartbeat, says the subscription is live
        if (msg.connection) this.event(msg.connection, this.host.now());
      }
    } finally {
      clearTimeout(quiet);
      this.host.closed.removeEventListener("abort", onClose);
    }
  }

  /** Counts one success for the next batch. */
  add(conn: Conn, rev: bigint): void {
    const k = `${conn.idHex}/${rev}`;
    const b = this.batch.get(k);
    if (b) b.n++;
    else this.batch.set(k, { conn, rev, n: 1 });
    this.batched++;
  }

  /** Sends one report per connection and revision with the count of its successes. */
  async flush(): Promise<void> {
    const batch = this.batch;
    this.batch = new Map();
    for (const { conn, rev, n } of batch.values()) {
      this.batches++;
      await this.host.sendBatch(conn, rev, Math.min(n, 1_000_000));
    }
  }

  stats(): MirrorStats {
    return { live: this.live, mirrored: this.entries.size, admits: this.admits, batched: this.batched, batches: this.batches };
  }
}

export type { ReportRequest };
