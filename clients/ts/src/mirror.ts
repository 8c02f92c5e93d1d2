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
import { Decision, DenyReason } from "./breaker.js";

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
  /** Sends one report of count successes (retry: retries on conn); what cooldownd does not take is queued. */
  sendBatch(conn: Conn, rev: bigint, count: number, retry: boolean): Promise<void>;
}

interface Entry { conn: Conn; rev: bigint; seenAt: number; }

/**
 * What the mirror was when an Admit went to cooldownd: its answer is learned
 * only if neither the stream went down nor the connection's throttle was
 * seen on meanwhile.
 */
export interface MirrorTicket { epoch: number; heat: number; }

/** What the mirror needs of an Admit's answer. */
export interface MirrorAnswer { conn: Conn; decision: Decision; revision: bigint; shadowReason?: DenyReason; }

export class Mirror {
  live = false;
  epoch = 0;
  private entries = new Map<string, Entry>();
  private evRev = new Map<string, bigint>();
  private batch = new Map<string, { conn: Conn; rev: bigint; retry: boolean; n: number }>();
  /** Bumps at each sighting of a throttle above 0. */
  private heat = 0;
  /** Connections last seen throttled, with the heat then. */
  private hot = new Map<string, number>();
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

  /**
   * Admits a call to conn when the stream is live, cooldownd last said the
   * connection is closed and healthy, and the call is a first attempt there:
   * a retry is always cooldownd's to decide (the fleet's retry budget).
   */
  admit(conn: Conn, retry: boolean, now: number): bigint | undefined {
    const e = this.entries.get(conn.idHex);
    if (retry || !this.live || !e || now - e.seenAt > MirrorMaxAgeMs) return undefined;
    this.admits++;
    return e.rev;
  }

  /** The ticket to hand to learn with the answer of an Admit sent now. */
  ticket(): MirrorTicket {
    return { epoch: this.epoch, heat: this.heat };
  }

  /**
   * Takes cooldownd's answer to an Admit sent with ticket t: a closed,
   * allowed connection whose throttle is off (probability 0) and whose
   * policy would not have denied the call is mirrored, unless an event
   * already showed a newer revision, the stream went down meanwhile, or a
   * throttle above 0 was seen for it after t was taken.
   */
  learn(a: MirrorAnswer, state: WireState, throttle: number, t: MirrorTicket, now: number): void {
    const id = a.conn.idHex;
    if (throttle > 0) {
      this.sawThrottle(id);
      return;
    }
    if (a.decision !== Decision.Allow || state !== WireState.CLOSED || (a.shadowReason ?? DenyReason.None) !== DenyReason.None) {
      this.entries.delete(id);
      return;
    }
    if (!this.live || t.epoch !== this.epoch || a.revision < (this.evRev.get(id) ?? 0n)) return;
    const h = this.hot.get(id);
    if (h !== undefined) {
      if (h > t.heat) return; // an answer older than the throttle seen since
      this.hot.delete(id); // cooldownd answered again with 0
    }
    if (this.entries.size >= maxMirrored) this.entries.clear();
    this.entries.set(id, { conn: a.conn, rev: a.revision, seenAt: now });
  }

  /** Takes the throttle probability of a Report answer for id: above 0, no local admits until an Admit answer says 0. */
  throttled(id: string, p: number): void {
    if (p > 0) this.sawThrottle(id);
  }

  /** A throttle above 0 for id: its entry goes, and answers to Admits sent before now teach nothing. */
  private sawThrottle(id: string): void {
    this.entries.delete(id);
    if (this.hot.size >= maxMirrored) {
      // Forgetting sightings would let a late Admit answer mirror a
      // throttled connection: forget every entry and every ticket too.
      this.hot.clear();
      this.entries.clear();
      this.epoch++;
    }
    this.heat++;
    this.hot.set(id, this.heat);
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
    if ((st.fleet?.throttleProbability ?? 0) > 0) {
      this.sawThrottle(id);
      return;
    }
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
    this.hot.clear(); // the epoch already turns away every answer before now
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

  /** Counts one success for the next batch; retry: it was a retry on conn (batched apart: one report has one retry flag). */
  add(conn: Conn, rev: bigint, retry = false): void {
    const k = `${conn.idHex}/${rev}/${retry ? 1 : 0}`;
    const b = this.batch.get(k);
    if (b) b.n++;
    else this.batch.set(k, { conn, rev, retry, n: 1 });
    this.batched++;
  }

  /** Sends one report per connection, revision and retry flag with the count of its successes. */
  async flush(): Promise<void> {
    const batch = this.batch;
    this.batch = new Map();
    for (const { conn, rev, retry, n } of batch.values()) {
      this.batches++;
      await this.host.sendBatch(conn, rev, Math.min(n, 1_000_000), retry);
    }
  }

  stats(): MirrorStats {
    return { live: this.live, mirrored: this.entries.size, admits: this.admits, batched: this.batched, batches: this.batches };
  }
}

export type { ReportRequest };
