// The cooldownd client for Node: Admit/Report/ExtendLease over Connect or
// gRPC, the guard (admit → call → classify → report → retry or fall back),
// a fetch wrapper for SDKs, and the in-process fallback — with the Go
// client's rules (client/*.go, docs/client.md). This file is the Client and
// its wiring; the parts are split as the Go client's files are: options.ts,
// admission.ts, guard.ts (the guard and its pure next step), report.ts,
// local.ts (the in-process fallback), transport.ts (the endpoints), body.ts.

import { randomBytes } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { durationFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import { ConnectError } from "@connectrpc/connect";

import {
  AdmitRequestSchema, ExtendLeaseRequestSchema, State as WireState, type ReportBatchRequest, type ReportBatchResponse, type ReportRequest,
} from "./gen/v1/cooldown_pb.js";
import { Decision, DenyReason, Outcome, outcomeName } from "./breaker.js";
import type { Classification } from "./classify.js";
import { Conn, makeConn, type ConnectionSpec } from "./conn.js";
import { GuardError, InvalidConnError, RejectedError, UnavailableError } from "./errors.js";
import { Health } from "./health.js";
import { consoleLogger, type Logger } from "./log.js";
import { Mirror, type MirrorBatch, type MirrorTicket } from "./mirror.js";
import { isBatch, QueueBackoffBaseMs, QueueBackoffCapMs, ReportQueue } from "./queue.js";
import { admission, retries, validConns, wireConn, type Admission } from "./admission.js";
import { isStream } from "./body.js";
import { randN, run, type AttemptContext, type GuardHost, type GuardOptions, type GuardPolicy } from "./guard.js";
import { Tracing, type GuardKind } from "./otel.js";
import { Local, Revisions } from "./local.js";
import { config, parseEndpoints, type ClientOptions, type Config, type Stats } from "./options.js";
import { batchAnswers, batchRequest, informs, reportDelay, reportKey, reportRequest, successReport, withHint } from "./report.js";
import { classifyRpc, codeName, Endpoints, unimplemented, type CallResult } from "./transport.js";

export { allowed, MaxCandidates, type Admission } from "./admission.js";
export { readErrorBody } from "./body.js";
export { OverloadFloorMs, type AttemptContext, type GuardOptions } from "./guard.js";
export {
  DefaultAdmitTimeoutMs, DefaultBackoffBaseMs, DefaultBackoffCapMs, DefaultDegradeAfter, DefaultDegradeWindowMs,
  DefaultMaxRetries, DefaultProbePollMs, DefaultServiceRetryMs, MaxEndpoints, MaxReporterLen,
  type ClientOptions, type FailMode, type Stats,
} from "./options.js";
export { classifyRpc } from "./transport.js";

/** Waits ms or until signal aborts (then rejects with its reason). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return wait(ms, signal, false);
}

/** wait is sleep; with unref the timer does not keep the process alive (background work). */
function wait(ms: number, signal: AbortSignal | undefined, unref: boolean): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, Math.max(0, ms));
    if (unref) t.unref();
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Talks to cooldownd and guards provider calls with its decisions. Create
 * one per process and share it.
 */
export class Client {
  private readonly endpoints: Endpoints;
  private readonly health: Health;
  private readonly queue: ReportQueue;
  private readonly local: Local;
  private readonly revs = new Revisions();
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly cfg: Config;
  private readonly host: GuardHost;
  private closed = false;
  private readonly closeCtl = new AbortController();
  private sender: Promise<void> | undefined;
  private readonly mirror: Mirror | undefined;
  /** The id every report carries (the reporter option). */
  readonly reporter: string;
  /** The spans of the guarded calls (otel.ts). */
  private readonly tracing: Tracing;

  /**
   * baseUrl is one cooldownd URL or several separated by commas (at most
   * 16); calls go to one (picked at random per client) and move to the
   * next when it does not answer. The constructor does not contact
   * cooldownd.
   */
  constructor(baseUrl: string, opts: ClientOptions = {}) {
    const urls = parseEndpoints(baseUrl);
    this.tracing = new Tracing(opts.tracerProvider);
    this.now = opts.now ?? Date.now;
    const cfg = config(opts, this.now);
    this.cfg = cfg;
    this.reporter = cfg.reporter;
    this.log = opts.logger ?? consoleLogger;
    this.local = new Local(cfg.policy, cfg.reporter, this.log, this.now);
    const sleepFn = opts.sleep ?? sleep;
    this.host = {
      admit: (cands, o) => this.admit(cands, o), reportOpen: (a, cl) => this.reportOpen(a, cl),
      log: this.log, rules: cfg.rules, now: this.now, sleep: sleepFn, tracing: this.tracing,
    };
    this.endpoints = new Endpoints(urls, opts, cfg.admitTimeoutMs, this.log);
    this.health = new Health(cfg.degradeAfter, cfg.degradeWindowMs, cfg.serviceRetryMs, this.endpoints.list.length,
      cfg.failMode === "open" ? "fail_open" : "fail_closed", this.log, () => this.mirror?.outage(), () => this.local.forget());
    this.queue = new ReportQueue(cfg.reportQueueSize, cfg.reportQueueMaxAgeMs);
    if (cfg.mirrorIntervalMs !== undefined) {
      this.mirror = new Mirror({
        now: this.now, log: this.log, closed: this.closeCtl.signal,
        rpc: () => this.endpoints.rpc(),
        rejected: (err) => classifyRpc(err) === "rejected",
        sendBatch: (conn, rev, count, retry, queueOnly) => this.sendBatch(conn, rev, count, retry, queueOnly ?? false),
        sendBatches: (batches) => this.sendBatches(batches),
      }, cfg.mirrorIntervalMs);
      this.mirror.start();
    }
  }

  /** Sends one batch of successes; one cooldownd does not take goes to the report queue. */
  private async sendBatch(conn: Conn, rev: bigint, count: number, retry: boolean, queueOnly: boolean): Promise<void> {
    const req = successReport(conn, rev, count, retry);
    req.reporter = this.reporter;
    req.idempotencyKey = reportKey();
    if (queueOnly) {
      this.enqueue(req, 0);
      return;
    }
    const r = await this.endpoints.call("report", undefined, (rpc, o) => rpc.report(req, o));
    if (r.kind === "ok") {
      this.health.success();
      this.mirror?.reportAnswer(conn, r.value!);
    } else if (r.kind === "capped") {
      this.local.capped(r.err); // logged once, as a direct report's would be; not queued
    } else if (r.kind !== "rejected" && !this.closed) {
      this.enqueue(req, 0);
    }
  }

  /**
   * Sends batches as one ReportBatch (decision 0065); one cooldownd does
   * not take goes to the report queue whole, with its key. False: cooldownd
   * answered Unimplemented (it lacks the RPC, so applied nothing).
   */
  private async sendBatches(batches: MirrorBatch[]): Promise<boolean> {
    const req = batchRequest(batches.map((b) => successReport(b.conn, b.rev, b.count, b.retry)), this.reporter);
    const r = await this.endpoints.call("report batch", undefined, (rpc, o) => rpc.reportBatch(req, o));
    if (r.kind === "ok") {
      this.health.success();
      this.batchAnswered(req, r.value!);
    } else if (unimplemented(r.err)) {
      return false;
    } else if (r.kind === "capped") {
      this.local.capped(r.err); // the tenant's connection cap: logged once, not queued
    } else if (r.kind !== "rejected" && !this.closed) {
      this.enqueue(req, 0);
    }
    return true;
  }

  /** Feeds each answer of a ReportBatch to the mirror, as a batch's own report's answer. */
  private batchAnswered(req: ReportBatchRequest, res: ReportBatchResponse): void {
    for (const [conn, a] of batchAnswers(req, res)) this.mirror?.reportAnswer(conn, a);
  }

  /** The wire report of one call, from this client's reporter; retry: the call was a retry on conn. */
  private reportRequest(conn: Conn, rev: bigint, lease: string, retry: boolean, cl: Classification): ReportRequest {
    return reportRequest(conn, rev, lease, retry, this.reporter, cl);
  }

  /**
   * The Conn of one provider connection: the endpoint used with one
   * credential, optionally narrowed by a scope. The id is derived here with
   * the client's salt; the credential is hashed, never kept or sent.
   */
  connection(spec: ConnectionSpec): Conn {
    return makeConn(this.cfg.salt, spec);
  }

  /** Whether the client decides in-process now because cooldownd did not answer repeatedly. */
  degraded(): boolean { return this.health.isDegraded(); }

  stats(): Stats {
    return { degraded: this.health.isDegraded(), degradations: this.health.outages, localDecisions: this.local.decisions,
      reports: this.queue.snapshot(), mirror: this.mirror?.stats() };
  }

  /**
   * Asks whether a call may go to one of the candidates (primary first, 1
   * to 16). A denial is an answer: check decision. Every allowed admission
   * must be followed by one report(). Without an answer from cooldownd the
   * call is decided by the fail mode; refusals throw RejectedError.
   *
   * sent names the candidates this call was already sent to (by an earlier
   * attempt that failed): on those it is a retry, which cooldownd charges to
   * the connection's fleet retry budget and denies with reason RetryBudget
   * when it is spent — fall back or give up then, do not wait. On every
   * other candidate it is a first attempt. admission.retry says which the
   * chosen one was and report() passes it on; the guards do this by
   * themselves. A retry is never admitted from the mirror.
   */
  admit(cands: Conn[], opts: { signal?: AbortSignal; sent?: readonly Conn[] } = {}): Promise<Admission> {
    return this.tracing.admit(cands.length, () => this.admitUntraced(cands, opts));
  }

  private async admitUntraced(cands: Conn[], opts: { signal?: AbortSignal; sent?: readonly Conn[] }): Promise<Admission> {
    validConns(cands);
    const retry = retries(cands, opts.sent);
    let ticket: MirrorTicket | undefined;
    if (this.mirror) {
      const rev = this.mirror.admit(cands[0]!, retry?.[0] ?? false, this.health.isDegraded(), this.now());
      if (rev !== undefined) {
        return { index: 0, conn: cands[0]!, decision: Decision.Allow, revision: rev, leaseToken: "", leaseExpires: 0,
          retryAfterMs: 0, reason: DenyReason.None, local: false, mirrored: true, retry: false, shadowReason: DenyReason.None,
          shadowRetryAfterMs: 0, throttleProbability: 0 };
      }
      ticket = this.mirror.ticket();
    }
    if (!this.health.useService(this.now())) return this.admitLocal(cands, retry, undefined);
    const req = create(AdmitRequestSchema, { candidates: cands.map(wireConn), retry: retry ?? [] });
    const r = await this.endpoints.call("admit", opts.signal, (rpc, o) => rpc.admit(req, o));
    if (r.kind !== "ok" && opts.signal?.aborted) throw opts.signal.reason;
    switch (r.kind) {
      case "ok": {
        this.health.success();
        const a = admission(r.value!, cands, retry);
        this.revs.see(a.conn, a.revision);
        this.local.words.learn(this.now(), r.value!.candidates, cands.map((c) => c.idHex), retry);
        if (this.mirror && ticket) this.mirror.learn(a, r.value!.state, r.value!.throttleProbability, ticket, this.now());
        return a;
      }
      case "rejected":
        throw new RejectedError("admit", ConnectError.from(r.err));
      case "capped":
        this.local.capped(r.err);
        return this.local.admit(cands, retry);
      case "outage":
        this.health.failure(this.now(), "admit", r.tried, codeName(r.err), r.err);
        break;
      default:
        this.log.debug("cooldownd could not decide; this call is decided in-process", { code: codeName(r.err) });
    }
    return this.admitLocal(cands, retry, r.err);
  }

  private admitLocal(cands: Conn[], retry: boolean[] | undefined, cause: unknown): Admission {
    if (this.cfg.failMode === "closed") throw new UnavailableError(cause === undefined ? undefined : { cause });
    return this.local.admit(cands, retry);
  }

  /**
   * Records the outcome of the call admitted by a. Sent even when the
   * caller's signal has aborted (bounded by the admit timeout), so a
   * canceled probe releases its lease. What cooldownd does not take now is
   * queued and sent again; a refusal throws RejectedError.
   */
  async report(a: Admission, cl: Classification): Promise<void> {
    await this.reportOpen(a, cl);
  }

  /** Reports and says whether the connection is open after it. */
  private reportOpen(a: Admission, cl: Classification): Promise<boolean> {
    return this.tracing.report(a, cl, () => this.reportUntraced(a, cl));
  }

  private async reportUntraced(a: Admission, cl: Classification): Promise<boolean> {
    if (!(a.conn instanceof Conn)) throw new InvalidConnError("zero Conn");
    if (cl.outcome < Outcome.Success || cl.outcome > Outcome.Canceled) throw new Error(`client: report: invalid outcome ${outcomeName(cl.outcome)}`);
    const retry = a.retry ?? false;
    // A report that says the connection is not healthy takes it out of the
    // mirror at once, whether cooldownd takes it or not.
    this.mirror?.reported(a.conn, a.local ? this.revs.last(a.conn) : a.revision, cl);
    if (a.local) {
      if (informs(cl)) {
        await this.mirror?.settle(a.conn, false); // its batched successes queued ahead of it (decision 0061)
        this.enqueue(this.reportRequest(a.conn, this.revs.last(a.conn), "", retry, cl), reportDelay(cl));
      }
      return this.local.report(a, cl, false);
    }
    if (this.mirror?.batching && cl.outcome === Outcome.Success && cl.proactiveMs <= 0 && a.leaseToken === "") {
      // With the mirror a success never waits on cooldownd: counted for the
      // next batch (retries apart: one report has one retry flag; no request
      // is built, the healthy path's cost). A probe's, which releases the
      // fleet, is reported as without the mirror: cooldownd has it when
      // report resolves.
      this.mirror.add(a.conn, a.revision, retry);
      return false;
    }
    // This process's successes of the connection, batched before this
    // report, go first (decision 0061): sent, or queued ahead of it.
    const direct = this.health.useService(this.now());
    await this.mirror?.settle(a.conn, direct);
    const req = this.reportRequest(a.conn, a.revision, a.leaseToken, retry, cl);
    if (!direct) {
      this.enqueue(req, reportDelay(cl));
      return this.local.report(a, cl, true);
    }
    const r = await this.endpoints.call("report", undefined, (rpc, o) => rpc.report(req, o));
    switch (r.kind) {
      case "ok":
        this.health.success();
        this.revs.see(a.conn, r.value!.revision);
        this.mirror?.reportAnswer(a.conn, r.value!);
        // A shadow policy's open is computed, not enforced: the next admit
        // allows this connection again, so it is no reason to switch
        // candidates at once, nor a word for the in-process fallback.
        if (r.value!.state !== WireState.OPEN || r.value!.shadow) return false;
        this.local.words.heard(this.now(), a.conn.idHex, cl.outcome, reportDelay(cl));
        return true;
      case "rejected":
        throw new RejectedError("report", ConnectError.from(r.err));
      case "capped":
        this.local.capped(r.err);
        return false;
      case "outage":
        this.health.failure(this.now(), "report", r.tried, codeName(r.err), r.err);
        break;
      default:
        this.log.debug("cooldownd could not take a report; queued", { code: codeName(r.err) });
    }
    this.enqueue(req, reportDelay(cl));
    return this.local.report(a, cl, true);
  }

  /**
   * Keeps the probe lease of a alive for ttlMs from now (≤ 0: the policy's
   * lease TTL) and returns its new expiry (Unix ms). A lease no longer held
   * is a RejectedError with code failed_precondition.
   */
  async extendLease(a: Admission, ttlMs = 0, opts: { signal?: AbortSignal } = {}): Promise<number> {
    if (a.leaseToken === "") throw new Error("client: extend lease: no lease token");
    if (a.local) return this.local.extend(a, ttlMs);
    const req = create(ExtendLeaseRequestSchema, { connection: wireConn(a.conn), leaseToken: a.leaseToken });
    if (ttlMs > 0) req.ttl = durationFromMs(ttlMs);
    const r = await this.endpoints.call("extend lease", opts.signal, (rpc, o) => rpc.extendLease(req, o));
    if (r.kind === "ok") {
      this.health.success();
      return r.value!.leaseExpiresAt ? timestampMs(r.value!.leaseExpiresAt) : 0;
    }
    if (opts.signal?.aborted) throw opts.signal.reason;
    if (r.kind === "rejected") throw new RejectedError("extend lease", ConnectError.from(r.err));
    if (r.kind === "outage") this.health.failure(this.now(), "extend lease", r.tried, codeName(r.err), r.err);
    throw ConnectError.from(r.err);
  }

  // ---- the report queue ----

  private enqueue(req: ReportRequest | ReportBatchRequest, hintMs: number): void {
    if (this.queue.push({ req, hintMs, observed: this.now() }, false)) this.startSender();
  }

  private startSender(): void {
    const run = this.sendQueued().catch((e) => this.log.warn("report sender failed", { error: String(e) }));
    this.sender = run;
  }

  private async sendQueued(): Promise<void> {
    let backoff = QueueBackoffBaseMs;
    for (;;) {
      const p = this.queue.next(this.now());
      if (!p) return;
      if (this.closed) {
        this.queue.push(p, true);
        this.queue.stop();
        return;
      }
      const r = await this.sendPending(withHint(p, this.now()));
      if (r.kind === "ok") {
        this.queue.settled(true);
        this.health.success();
        backoff = QueueBackoffBaseMs;
        continue;
      }
      // A batch answered Unimplemented (rejected) is dropped too.
      if (r.kind === "rejected" || r.kind === "capped") {
        this.queue.settled(false);
        this.log.debug("cooldownd refused a queued report; dropped", { code: codeName(r.err) });
        continue;
      }
      this.queue.push(p, true);
      const d = backoff / 2 + randN(backoff / 2 + 1);
      backoff = Math.min(2 * backoff, QueueBackoffCapMs);
      try {
        // Background work: real time, not the guard's sleep, and it does not
        // keep the process alive (call flush() before exit, as in Go).
        await wait(d, this.closeCtl.signal, true);
      } catch {
        this.queue.stop();
        return;
      }
    }
  }

  /** Sends one queued report or batch as is; an answer goes to the mirror. */
  private async sendPending(req: ReportRequest | ReportBatchRequest): Promise<CallResult<unknown>> {
    if (isBatch(req)) {
      const r = await this.endpoints.call("report batch", undefined, (rpc, o) => rpc.reportBatch(req, o));
      if (r.kind === "ok") this.batchAnswered(req, r.value!);
      return r;
    }
    const r = await this.endpoints.call("report", undefined, (rpc, o) => rpc.report(req, o));
    if (r.kind === "ok" && req.connection && req.connection.id.length === 32) {
      this.mirror?.reportAnswer(new Conn(req.connection.id, req.connection.label), r.value!);
    }
    return r;
  }

  /** Sends the queued reports now and waits until the queue is empty or signal aborts. Call it before exit. */
  async flush(opts: { signal?: AbortSignal } = {}): Promise<void> {
    await this.mirror?.flush();
    for (;;) {
      if (this.queue.snapshot().len === 0) return;
      if (this.queue.kick()) this.startSender();
      await sleep(10, opts.signal);
    }
  }

  /** Stops the background sender (flush first) and closes connections to cooldownd. */
  async close(): Promise<void> {
    this.closeCtl.abort();
    await this.mirror?.stop(); // what was counted still reaches the fleet
    this.closed = true;
    await this.sender;
    this.endpoints.close();
  }

  // ---- the guard (guard.ts) ----

  /**
   * Guards one provider call on conn: admit (waiting out a denial within
   * the max wait), call, classify, report, retry a retryable failure with
   * backoff (never shorter than the provider's delay, ≥ 5 s when
   * overloaded). A 2xx response is returned with its body unread (a
   * stream is never replayed). Failures throw GuardError, denials
   * DeniedError. call must make a fresh request on every attempt and must
   * not retry by itself.
   */
  do(conn: Conn, call: (ctx: AttemptContext) => Promise<Response>, opts: GuardOptions = {}): Promise<Response> {
    return this.guard([conn], this.cfg.maxRetries, call, opts, "do");
  }

  /**
   * doFallback guards one call over candidates in order of preference:
   * every admit names all remaining ones and cooldownd admits the first
   * that may go; a provider or credential failure moves on at once.
   */
  doFallback(conns: Conn[], call: (ctx: AttemptContext) => Promise<Response>, opts: GuardOptions = {}): Promise<Response> {
    return this.guard(conns, this.cfg.maxRetries, call, opts, "fallback");
  }

  /**
   * A fetch that guards every request on conn (or the Conn pick returns
   * for it), for SDKs that take a custom fetch — set the SDK's own retries
   * to 0. A request is retried only when its body can be sent again. A
   * final non-2xx response is returned as a response (its body as read),
   * so the SDK builds its usual error; a denial rejects with DeniedError.
   */
  fetch(conn: Conn | ((input: string | URL | Request, init?: RequestInit) => Conn | Promise<Conn>),
    base: typeof globalThis.fetch = globalThis.fetch): typeof globalThis.fetch {
    const pick = typeof conn === "function" ? conn : () => conn;
    const guarded = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
      const signal = init?.signal ?? (input instanceof Request ? input.signal : undefined) ?? undefined;
      const c = await pick(input, init);
      const body = init?.body;
      // A Request is cloned for every attempt (its body tees); a stream in
      // init.body can be sent once only.
      const retries = isStream(body) ? 0 : this.cfg.maxRetries;
      try {
        return await this.guard([c], retries, () => base(input instanceof Request ? input.clone() : input, init), { signal }, "fetch");
      } catch (e) {
        if (e instanceof GuardError && e.response && !signal?.aborted) return e.response;
        if (signal?.aborted && e instanceof GuardError && e.lastOutcome === Outcome.Canceled) throw signal.reason ?? e;
        throw e;
      }
    };
    return guarded as typeof globalThis.fetch;
  }

  private guard(cands: Conn[], maxRetries: number, call: (ctx: AttemptContext) => Promise<Response>, opts: GuardOptions,
    kind: GuardKind): Promise<Response> {
    return run(this.host, this.guardPolicy(maxRetries), cands, call, opts, kind);
  }

  /** The guard's knobs from the client's configuration. */
  private guardPolicy(maxRetries: number): GuardPolicy {
    const c = this.cfg;
    return { maxRetries, maxWaitMs: c.maxWaitMs, noWait: c.noWait, probePollMs: c.probePollMs,
      backoffBaseMs: c.backoffBaseMs, backoffCapMs: c.backoffCapMs, jitter: randN };
  }
}
