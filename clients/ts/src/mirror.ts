// The client's mirror (the Go client's WithMirror, client/mirror.go): a
// copy of the connections this process uses, fed by cooldownd's
// WatchConnections stream, that admits a call without a round trip while
// its connection is closed and healthy; successes are counted and
// reported in batches (Report.count), one ReportBatch per flush (decision
// 0065); failures, hints and probes still go to cooldownd at once.

import type { Client as RpcClient } from "@connectrpc/connect";
import { Override as WireOverride, State as WireState, type ConnectionState, type CooldownService, type ReportRequest } from "./gen/v1/cooldown_pb.js";
import { idHex } from "./keys.js";
import type { Conn } from "./conn.js";
import type { Logger } from "./log.js";
import { QueueBackoffBaseMs, QueueBackoffCapMs } from "./queue.js";
import { Decision, DenyReason, Outcome } from "./breaker.js";

/** How long a mirrored entry admits without cooldownd confirming it. */
export const MirrorMaxAgeMs = 30_000;
/** A watch stream that sent nothing (not even its 15 s heartbeat) for this long is ended. */
export const MirrorSilenceMs = 45_000;
const maxMirrored = 8192;
export const DefaultMirrorIntervalMs = 1_000;

/** The counters of the mirror. */
export interface MirrorStats {
  live: boolean; mirrored: number; admits: number;
  /** The successes reported in batches. */
  batched: number;
  /**
   * The requests that carried them: a ReportBatch per flush (per 512
   * connections), or a Report per connection to a cooldownd without
   * ReportBatch, and one per connection settled before a report of it.
   */
  batches: number;
  /**
   * The watch streams cooldownd refused (an older cooldownd, or a token whose
   * role may not watch). While the last stream was refused, or before one was
   * accepted, the client works as without the mirror: nothing is admitted
   * locally and every report goes at once.
   */
  refused: number;
}

/** About how long the mirror waits to ask again after cooldownd refused its watch stream, ms. */
export const MirrorRefusedRetryMs = 6 * QueueBackoffCapMs;
/**
 * The most batches one ReportBatch carries: cooldownd's bound
 * (server.MaxBatchReports), under which any flush fits its 64 KiB request
 * bound (server.MaxRequestBytes) — 512 with the longest labels, reporter and
 * key encode to 64,636 bytes. A larger request would be answered
 * ResourceExhausted, read as the tenant's cap, and the flush lost.
 */
export const MaxReportBatch = 512;

/** One connection's successes under one revision and retry flag, as sent (count at most 1,000,000). */
export interface MirrorBatch { conn: Conn; rev: bigint; retry: boolean; count: number; }

/** What the mirror needs of its client. */
export interface MirrorHost {
  now(): number;
  log: Logger;
  closed: AbortSignal;
  /** The endpoint to watch now. */
  rpc(): RpcClient<typeof CooldownService>;
  /** Whether an error is a refusal (never retried soon). */
  rejected(err: unknown): boolean;
  /** Sends one report of count successes (retry: retries on conn); what cooldownd does not take is queued; queueOnly: queued, not sent. */
  sendBatch(conn: Conn, rev: bigint, count: number, retry: boolean, queueOnly?: boolean): Promise<void>;
  /**
   * Sends batches (1 to 512, MaxReportBatch) as one ReportBatch; what
   * cooldownd does not take is queued as it is. False: cooldownd does not
   * know ReportBatch (an older one; Unimplemented) and applied none of them.
   */
  sendBatches(batches: MirrorBatch[]): Promise<boolean>;
}

interface Entry { conn: Conn; rev: bigint; seenAt: number; }

/** One connection's successes under one revision and retry flag, for one report. */
interface Batch { conn: Conn; rev: bigint; retry: boolean; n: number; }

/**
 * This process heard the connection is not healthy: a report of its own (a
 * failure, a server delay) or cooldownd's answer to one (not closed, or a
 * newer revision than the mirror held). It is not mirrored until cooldownd
 * says it is closed again: an Admit answer sent after the mark at rev or
 * newer, or an event at minEvent or newer. An event needs a revision past
 * the one a failure was seen under, since the event of that revision may
 * arrive late; an answer sent after the mark is cooldownd's word after the
 * failure. The Go client's sickMark.
 */
interface SickMark { conn: Conn; heat: number; rev: bigint; minEvent: bigint; }

/** What the mirror needs of a report of this process. */
export interface MirrorReport { outcome: Outcome; retryAfterMs: number; proactiveMs: number; }

/** What the mirror needs of cooldownd's answer to a report. */
export interface MirrorReportAnswer { state: WireState; revision: bigint; throttleProbability: number; }

/**
 * Whether a report of this process says its connection is not healthy: a
 * failure, a server delay hint (on any outcome, a success's proactive
 * cooldown included), quota or auth. The caller's fault and a cancel say
 * nothing of the connection.
 */
export function unhealthy(r: MirrorReport): boolean {
  switch (r.outcome) {
    case Outcome.TransientFailure: case Outcome.RateLimited: case Outcome.Overloaded:
    case Outcome.QuotaExhausted: case Outcome.AuthFailure:
      return true;
  }
  return r.retryAfterMs > 0 || r.proactiveMs > 0;
}

const big = (a: bigint, b: bigint) => (a > b ? a : b);

/**
 * Waits ms, or until signal aborts; the listener goes when the wait ends
 * either way (one per reconnect would pile up on the client's close signal).
 */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

/**
 * What the mirror was when an Admit went to cooldownd: its answer is learned
 * only if neither the stream went down, nor the client degraded, nor the
 * connection's throttle was seen on or a report of this process said it is
 * not healthy, meanwhile.
 */
export interface MirrorTicket { epoch: number; heat: number; }

/** What the mirror needs of an Admit's answer. */
export interface MirrorAnswer { conn: Conn; decision: Decision; revision: bigint; shadowReason?: DenyReason; }

export class Mirror {
  live = false;
  epoch = 0;
  private entries = new Map<string, Entry>();
  private evRev = new Map<string, bigint>();
  private batch = new Map<string, Batch>();
  /** The batches being sent now, by the connections they carry (see settle). */
  private readonly sending = new Set<{ ids: Set<string>; done: Promise<void> }>();
  /** Bumps at each sighting of a throttle above 0. */
  private heat = 0;
  /** Connections last seen throttled, with the heat then. */
  private hot = new Map<string, number>();
  private sick = new Map<string, SickMark>();
  private admits = 0;
  private batched = 0;
  private batches = 0;
  private refused = 0;
  /** Until then (host.now()) flushes send one report per batch: cooldownd answered a ReportBatch Unimplemented. */
  private perBatchUntil = 0;
  /**
   * cooldownd took a watch stream of this client's token: it lets clients
   * watch their tenant, so it counts batched successes (ReportRequest.count
   * came with that grant). Until a stream is accepted, and again once one is
   * refused, successes are reported one by one (see batching).
   */
  private accepted = false;
  /**
   * Resolved at cooldownd's first answer to an Admit: the watch stream opens
   * then, not at construction, so that a client that never calls holds no
   * stream, and the stream goes out once an answer has settled the endpoint.
   */
  private begin!: () => void;
  private readonly begun = new Promise<void>((resolve) => { this.begin = resolve; });
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
   * Admits a call to conn when the stream is live, the client is not
   * degraded (then every call is decided in-process), cooldownd last said
   * the connection is closed and healthy, and the call is a first attempt
   * there: a retry is always cooldownd's to decide (the fleet's retry budget).
   */
  admit(conn: Conn, retry: boolean, degraded: boolean, now: number): bigint | undefined {
    const e = this.entries.get(conn.idHex);
    if (retry || degraded || !this.live || !e || now - e.seenAt > MirrorMaxAgeMs) return undefined;
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
   * already showed a newer revision, the stream went down or the client
   * degraded meanwhile, a throttle above 0 was seen for it after t was
   * taken, or it is marked not healthy and the answer is older than the
   * mark or its revision.
   */
  learn(a: MirrorAnswer, state: WireState, throttle: number, t: MirrorTicket, now: number): void {
    this.begin();
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
    const s = this.sick.get(id);
    if (s !== undefined) {
      if (s.heat > t.heat || a.revision < s.rev) return;
      this.sick.delete(id); // closed again, cooldownd says after the mark
    }
    if (this.entries.size >= maxMirrored) this.entries.clear();
    this.entries.set(id, { conn: a.conn, rev: a.revision, seenAt: now });
  }

  /**
   * Takes a report of this process on conn, for a call admitted under rev,
   * before it is sent: one that says the connection is not healthy takes it
   * out of the mirror at once, whether cooldownd takes the report or not,
   * until cooldownd says it is closed again.
   */
  reported(conn: Conn, rev: bigint, r: MirrorReport): void {
    if (!unhealthy(r)) return;
    rev = big(rev, this.evRev.get(conn.idHex) ?? 0n);
    const e = this.entries.get(conn.idHex);
    if (e) rev = big(rev, e.rev);
    this.sicken(conn, rev, rev + 1n);
  }

  /**
   * Takes cooldownd's answer to a report of this process on conn (direct,
   * batched or queued): a throttle above 0 stops the local admits until an
   * Admit answer says 0 again; a state not closed, or a revision newer than
   * the mirror's entry (the state moved on without this process hearing of
   * it), takes the connection out until cooldownd says it is closed at that
   * revision or newer. An answer older than what an event or the entry
   * showed says nothing.
   */
  reportAnswer(conn: Conn, r: MirrorReportAnswer): void {
    const id = conn.idHex;
    const e = this.entries.get(id);
    let known = this.evRev.get(id) ?? 0n;
    if (e) known = big(known, e.rev);
    if (r.throttleProbability > 0) this.sawThrottle(id);
    if (r.revision < known) return;
    if (r.state !== WireState.CLOSED || (e !== undefined && r.revision > e.rev) || this.sick.has(id)) {
      this.sicken(conn, r.revision, r.revision);
    }
  }

  /** Marks conn not healthy (or raises its mark): its entry goes, and answers to Admits sent before now teach nothing. */
  private sicken(conn: Conn, rev: bigint, minEvent: bigint): void {
    const id = conn.idHex;
    this.entries.delete(id);
    const s = this.sick.get(id);
    if (!s && this.sick.size >= maxMirrored) {
      // Forgetting marks would let an answer older than a failure mirror
      // the connection: forget every entry and ticket too.
      this.sick.clear();
      this.entries.clear();
      this.epoch++;
    }
    this.heat++;
    this.sick.set(id, { conn, heat: this.heat, rev: big(s?.rev ?? 0n, rev), minEvent: big(s?.minEvent ?? 0n, minEvent) });
  }

  /** Takes the client's degradation: the mirror vouches for nothing it learned before, and answers to Admits sent before teach nothing. */
  outage(): void {
    this.epoch++;
    this.entries.clear();
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
    const healthy = st.state === WireState.CLOSED && st.override === WireOverride.UNSPECIFIED;
    const s = this.sick.get(id);
    if (s !== undefined) {
      if (!healthy || rev < s.minEvent || this.hot.has(id) || !this.live) return;
      // Closed again at a revision past the mark: mirrored again.
      this.sick.delete(id);
      if (this.entries.size >= maxMirrored) this.entries.clear();
      this.entries.set(id, { conn: s.conn, rev, seenAt: now });
      return;
    }
    const e = this.entries.get(id);
    if (!e) return;
    if (healthy) {
      e.rev = rev;
      e.seenAt = now;
      return;
    }
    this.entries.delete(id);
  }

  /**
   * Whether successes go in batches: a stream was accepted and none refused
   * since. A cooldownd that refuses the watch (an older one: its clients may
   * not watch, and it does not know ReportRequest.count, so a batch would
   * count as one success; or a token whose role may not watch) hears every
   * report at once, as a client without the mirror's would.
   */
  get batching(): boolean {
    return this.accepted;
  }

  /** The stream's first message: the subscription is live. */
  up(): void {
    this.accepted = true;
    this.live = true;
  }

  /**
   * The stream ended: the mirror forgets everything it vouched for (the
   * marks of connections not healthy stay: they are this process's own word).
   */
  down(): void {
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
    if (!closed.aborted) {
      let onAbort!: () => void;
      const aborted = new Promise<void>((resolve) => { onAbort = resolve; });
      closed.addEventListener("abort", onAbort, { once: true });
      await Promise.race([this.begun, aborted]);
      closed.removeEventListener("abort", onAbort);
    }
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
        // An older cooldownd, or a token that may not watch: the client works
        // as without the mirror, and asks again now and then (cooldownd may be
        // upgraded, the token's role changed).
        this.accepted = false;
        this.refused++;
        if (!logged) {
          this.host.log.warn("cooldownd refused the mirror's watch stream; the client works without the mirror " +
            `(every call asks cooldownd, every report goes at once) and asks again every ${MirrorRefusedRetryMs / 1000}s; ` +
            "upgrade cooldownd, give the token the client role, or turn the mirror off with mirror: false", { error: String(err) });
          logged = true;
        }
        backoff = MirrorRefusedRetryMs;
      }
      const d = backoff / 2 + Math.floor(Math.random() * (backoff / 2 + 1));
      backoff = Math.min(2 * backoff, QueueBackoffCapMs);
      await pause(d, closed);
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
        this.up(); // the first message, a heartbeat, says the subscription is live
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

  /**
   * Sends the count of successes of each connection, revision and retry
   * flag: in ReportBatches of at most 512 (so each fits cooldownd's 64 KiB
   * request bound), or, for a while after a cooldownd answered one
   * Unimplemented, one report each.
   */
  async flush(): Promise<void> {
    const batch = [...this.batch.values()];
    this.batch = new Map();
    await this.send(batch, false, true);
  }

  /**
   * Sends conn's batched successes now: a report of conn that goes to
   * cooldownd at once (a failure, a hint, a probe's success, anything not
   * batched) awaits it first, so that cooldownd sees this process's reports
   * of a connection in the order they happened (decision 0061). A flush
   * sending conn's batches is waited for; a connection with nothing batched
   * costs a scan of the batch. direct false (the client is degraded and the
   * report will be queued): the batches are queued, ahead of it, not sent.
   */
  async settle(conn: Conn, direct = true): Promise<void> {
    const mine: Batch[] = [];
    for (const [k, b] of this.batch) {
      if (b.conn.idHex === conn.idHex) {
        mine.push(b);
        this.batch.delete(k);
      }
    }
    const before = [...this.sending].filter((f) => f.ids.has(conn.idHex)).map((f) => f.done);
    if (before.length > 0) await Promise.all(before);
    if (mine.length > 0) await this.send(mine, !direct);
  }

  /**
   * Sends batches, one report each or (together) in ReportBatches; settle
   * can see which connections they carry until they are sent.
   */
  private async send(batches: Batch[], queueOnly = false, together = false): Promise<void> {
    if (batches.length === 0) return;
    let done!: () => void;
    const f = { ids: new Set(batches.map((b) => b.conn.idHex)), done: new Promise<void>((r) => { done = r; }) };
    this.sending.add(f);
    const sent = batches.map(({ conn, rev, retry, n }) => ({ conn, rev, retry, count: Math.min(n, 1_000_000) }));
    try {
      for (let i = 0; i < sent.length; i += MaxReportBatch) {
        const chunk = sent.slice(i, i + MaxReportBatch);
        if (together && this.host.now() >= this.perBatchUntil) {
          this.batches++;
          if (await this.host.sendBatches(chunk)) continue;
          this.batches--; // not a request after all
          // An older cooldownd: nothing applied; these, and the flushes for a while, go one by one.
          this.perBatchUntil = this.host.now() + MirrorRefusedRetryMs;
          this.host.log.debug("cooldownd does not know ReportBatch; the mirror's batches go one report each for a while",
            { retryInMs: MirrorRefusedRetryMs });
        }
        this.batches += chunk.length;
        for (const b of chunk) await this.host.sendBatch(b.conn, b.rev, b.count, b.retry, queueOnly);
      }
    } finally {
      this.sending.delete(f);
      done();
    }
  }

  stats(): MirrorStats {
    return { live: this.live, mirrored: this.entries.size, admits: this.admits, batched: this.batched, batches: this.batches, refused: this.refused };
  }
}

export type { ReportRequest };
