// The cooldownd client for Node: Admit/Report/ExtendLease over Connect or
// gRPC, the guard (admit → call → classify → report → retry or fall back),
// a fetch wrapper for SDKs, and the in-process fallback — with the Go
// client's rules (client/*.go, docs/client.md).

import { randomBytes } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { durationFromMs, timestampMs, type Duration } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client as RpcClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport, Http2SessionManager } from "@connectrpc/connect-node";

import {
  AdmitRequestSchema, ConnectionSchema, CooldownService, ExtendLeaseRequestSchema, ReportRequestSchema, State as WireState,
  type AdmitResponse, type Connection as WireConnection, type ReportRequest,
} from "./gen/v1/cooldown_pb.js";
import {
  Decision, DenyReason, Outcome, Phase, State, defaultPolicy, outcomeName, perCall, validatePolicy, type Policy,
} from "./breaker.js";
import { classify, DefaultMaxBodyBytes, DefaultMaxServerDelayMs, errorChain, type Classification, type Rules } from "./classify.js";
import { Conn, makeConn, type ConnectionSpec } from "./conn.js";
import { DeniedError, GuardError, InvalidConnError, RejectedError, UnavailableError } from "./errors.js";
import { MaxHintMs } from "./headers.js";
import { Health } from "./health.js";
import { LastWords } from "./lastword.js";
import { consoleLogger, type Logger } from "./log.js";
import { DefaultMirrorIntervalMs, Mirror, type MirrorStats, type MirrorTicket } from "./mirror.js";
import { MaxSaltLen, MinSaltLen } from "./keys.js";
import {
  DefaultReportQueueMaxAgeMs, DefaultReportQueueSize, QueueBackoffBaseMs, QueueBackoffCapMs, ReportQueue,
  remainingHint, type PendingReport, type QueueStats,
} from "./queue.js";

export const MaxEndpoints = 16;
export const MaxCandidates = 16;
export const DefaultAdmitTimeoutMs = 250;
export const DefaultMaxRetries = 2;
export const DefaultBackoffBaseMs = 500;
export const DefaultBackoffCapMs = 8_000;
export const DefaultProbePollMs = 250;
export const DefaultDegradeAfter = 3;
export const DefaultDegradeWindowMs = 10_000;
export const DefaultServiceRetryMs = 1_000;
/** The least delay before retrying an overloaded provider. */
export const OverloadFloorMs = 5_000;
const minDenyWaitMs = 10;
/** The longest reporter id. */
export const MaxReporterLen = 64;
const reporterPattern = /^[A-Za-z0-9._-]{1,64}$/;

/** What the client does while cooldownd is unreachable. */
export type FailMode = "open" | "closed";

/** The options of a Client. Every field is optional; the defaults are the Go client's. */
export interface ClientOptions {
  /** Bearer token sent on every call to cooldownd; never logged. */
  token?: string;
  /** Wire protocol: "connect" (default), "grpc" (HTTP/2) or "grpc-web". */
  protocol?: "connect" | "grpc" | "grpc-web";
  /** HTTP version for connect and grpc-web: "2" (default; h2c for http://) or "1.1". */
  httpVersion?: "1.1" | "2";
  /** Bound of each call to cooldownd over all endpoints, ms (250). */
  admitTimeoutMs?: number;
  /** "open" (default): the in-process breaker decides while cooldownd is unreachable; "closed": deny. */
  failMode?: FailMode;
  /** The in-process breaker's policy (defaultPolicy(); missing fields take its values). */
  localPolicy?: Partial<Policy>;
  /** HMAC key of connection ids: empty or 16..1024 bytes; the same in every process. */
  salt?: Uint8Array;
  /** Classification knobs (max server delay 30 s, body bound 64 KiB). */
  rules?: Rules;
  /** Retries after the first attempt (2); 0 disables. */
  maxRetries?: number;
  /** Longest total wait for a denied connection, ms (the rules' max server delay). */
  maxWaitMs?: number;
  /** Deny at once instead of waiting. */
  noWait?: boolean;
  /** Retry backoff: base (500 ms) doubling per retry up to cap (8 s), equal jitter. */
  backoffBaseMs?: number;
  backoffCapMs?: number;
  /** How often a caller denied probe_in_flight asks again, ms (250). */
  probePollMs?: number;
  /** Degrade after this many consecutive no-answer calls (3) within degradeWindowMs (10 s). */
  degradeAfter?: number;
  degradeWindowMs?: number;
  /** While degraded, one call per interval tries cooldownd, ms (1 s). */
  serviceRetryMs?: number;
  /** The report queue: size (1024) and max age (1 min). */
  reportQueueSize?: number;
  reportQueueMaxAgeMs?: number;
  /** Notices: degradation and recovery (warn/info), retries (debug). */
  logger?: Logger;
  /** For tests: the guard's clock, Unix ms (default Date.now). */
  now?: () => number;
  /** For tests: the guard's waits (default a timer that the signal cancels). */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /**
   * Keep a mirror of the connections this process uses, fed by
   * WatchConnections, and admit calls to closed healthy connections without
   * a round trip; successes are reported in batches every intervalMs (1 s).
   * Failures, hints and probes still go to cooldownd at once. Off by default.
   */
  mirror?: boolean | { intervalMs?: number };
  /**
   * The id this client sends as the reporter of every report: 1 to 64
   * characters of [A-Za-z0-9._-]. cooldownd's trip quorum counts distinct
   * reporters, so ids must differ between processes and should stay the same
   * for a process's lifetime (a pod's name reads well on the dashboard; never
   * a secret). Default: a random one per Client (16 hex characters).
   */
  reporter?: string;
  /** For tests: builds the transport of one endpoint (default: the one protocol and httpVersion name). */
  transport?: (baseUrl: string, interceptors: Interceptor[]) => Transport;
}

/** Admit's answer. */
export interface Admission {
  /** Position among the candidates of the chosen one or, on a denial, of the one available soonest. */
  index: number;
  conn: Conn;
  decision: Decision;
  revision: bigint;
  /** Set on AllowProbe: sent back with the report, which releases the lease. */
  leaseToken: string;
  /** Unix ms when the probe lease lapses (0 unless a probe). */
  leaseExpires: number;
  /** On a denial: ms until a candidate may be available. */
  retryAfterMs: number;
  reason: DenyReason;
  /**
   * The call was already sent to conn (admit's sent): there it is a retry,
   * charged to the connection's fleet retry budget. report() sends it back.
   */
  retry?: boolean;
  /**
   * On an allowed call: why the connection's policy would have denied it —
   * the policy is in shadow mode (computed and published, not enforced).
   * None when not shadowed.
   */
  shadowReason?: DenyReason;
  /** With shadowReason: the wait the policy would have given, ms. */
  shadowRetryAfterMs?: number;
  /** The chosen candidate's adaptive-throttle rejection probability after this decision (0: off or healthy). */
  throttleProbability?: number;
  /** The in-process breaker decided because cooldownd was unreachable. */
  local: boolean;
  /** Admitted from the client's mirror, without a round trip (see the mirror option). */
  mirrored?: boolean;
}

/** Whether an admission lets the call go. */
export function allowed(a: Admission): boolean {
  return a.decision === Decision.Allow || a.decision === Decision.AllowProbe;
}

/** What a guarded call receives on each attempt. */
export interface AttemptContext {
  /** The caller's signal (never replaced): pass it to fetch. */
  signal: AbortSignal | undefined;
  /** The admission the attempt runs under (a probe: decision AllowProbe). */
  admission: Admission;
  /** The candidate to call. */
  conn: Conn;
  /** 1 for the first attempt. */
  attempt: number;
}

/** Per-call options of the guards. */
export interface GuardOptions {
  /** The caller's cancellation: never retried, never overridden. */
  signal?: AbortSignal;
  /** A deadline for the whole guarded call, ms from now: waits that would pass it are not made. */
  timeoutMs?: number;
}

/** The client's counters. */
export interface Stats {
  degraded: boolean;
  degradations: number;
  localDecisions: number;
  reports: QueueStats;
  /** The mirror's counters (undefined without the mirror option). */
  mirror?: MirrorStats;
}

type RpcKind = "ok" | "rejected" | "capped" | "outage" | "failed";

const transportCodes = new Set(["ECONNRESET", "EPIPE", "ECONNREFUSED", "ECONNABORTED", "ETIMEDOUT", "ERR_HTTP2_STREAM_ERROR",
  "ERR_HTTP2_SESSION_ERROR", "ERR_HTTP2_GOAWAY_SESSION", "ERR_HTTP2_INVALID_SESSION", "ERR_HTTP2_ERROR", "UND_ERR_SOCKET"]);

/** Sorts a Connect error as the Go client does; a reset (which connect-node reports as aborted) is no answer. */
export function classifyRpc(err: unknown): RpcKind {
  if (err === undefined) return "ok";
  const ce = ConnectError.from(err);
  switch (ce.code) {
    case Code.Unauthenticated: case Code.PermissionDenied: case Code.InvalidArgument: case Code.FailedPrecondition:
    case Code.NotFound: case Code.AlreadyExists: case Code.OutOfRange: case Code.Unimplemented:
      return "rejected";
    case Code.ResourceExhausted:
      return "capped";
    case Code.Unavailable: case Code.DeadlineExceeded: case Code.Canceled:
      return "outage";
    case Code.Aborted:
    case Code.Internal:
    case Code.Unknown:
      if (errorChain(err).codes.some((c) => transportCodes.has(c))) return "outage";
  }
  return "failed";
}

function parseEndpoints(list: string): string[] {
  const out: string[] = [];
  for (const raw of list.split(",")) {
    const s = raw.trim();
    let u: URL;
    try {
      u = new URL(s);
    } catch {
      throw new Error("client: invalid base URL");
    }
    if ((u.protocol !== "http:" && u.protocol !== "https:") || u.host === "") {
      throw new Error("client: base URL must be http:// or https:// with a host");
    }
    if (u.username !== "" || u.password !== "" || s.includes("@")) {
      throw new Error("client: base URL must not hold credentials; use the token option");
    }
    out.push(u.toString().replace(/\/+$/, ""));
  }
  if (out.length > MaxEndpoints) throw new Error(`client: at most ${MaxEndpoints} base URLs, got ${out.length}`);
  return out;
}

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

const randN = (n: number) => (n <= 0 ? 0 : Math.floor(Math.random() * n));

interface Endpoint {
  url: string;
  rpc: RpcClient<typeof CooldownService>;
  close(): void;
}

const maxLocalStates = 4096;
const maxRevisions = 4096;

/**
 * Talks to cooldownd and guards provider calls with its decisions. Create
 * one per process and share it.
 */
export class Client {
  private readonly endpoints: Endpoint[] = [];
  private current: number;
  private readonly health: Health;
  private readonly queue: ReportQueue;
  private readonly local = new Map<string, State>();
  private readonly words = new LastWords(maxLocalStates);
  private readonly revs = new Map<string, bigint>();
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly sleepFn: (ms: number, signal?: AbortSignal) => Promise<void>;
  private readonly cfg: Required<Pick<ClientOptions, "admitTimeoutMs" | "failMode" | "maxRetries" | "maxWaitMs" | "noWait" |
    "backoffBaseMs" | "backoffCapMs" | "probePollMs">> & { rules: Rules; policy: Policy; salt: Uint8Array };
  private localDecisions = 0;
  private capLogged = false;
  private closed = false;
  private readonly closeCtl = new AbortController();
  private sender: Promise<void> | undefined;
  private readonly mirror: Mirror | undefined;
  /** The id every report carries (the reporter option). */
  readonly reporter: string;

  /**
   * baseUrl is one cooldownd URL or several separated by commas (at most
   * 16); calls go to one (picked at random per client) and move to the
   * next when it does not answer. The constructor does not contact
   * cooldownd.
   */
  constructor(baseUrl: string, opts: ClientOptions = {}) {
    const urls = parseEndpoints(baseUrl);
    // Fields missing from the local policy take the defaults (a policy
    // written before the fleet rules lacks theirs).
    const policy: Policy = { ...defaultPolicy(), ...opts.localPolicy };
    const bad = validatePolicy(policy);
    if (bad) throw new Error("client: local policy: " + bad);
    // One process is one reporter: a trip quorum would never let the
    // in-process breaker trip on transient failures at all. The retry budget
    // and the throttle apply to this process's own calls.
    policy.tripQuorum = 0;
    if (opts.reporter === undefined) {
      this.reporter = randomBytes(8).toString("hex");
    } else if (typeof opts.reporter !== "string" || !reporterPattern.test(opts.reporter)) {
      throw new Error(`client: reporter id must be 1 to ${MaxReporterLen} characters of [A-Za-z0-9._-]`);
    } else {
      this.reporter = opts.reporter;
    }
    const salt = opts.salt ?? new Uint8Array();
    if (salt.length !== 0 && (salt.length < MinSaltLen || salt.length > MaxSaltLen)) {
      throw new Error(`client: salt must be empty or ${MinSaltLen} to ${MaxSaltLen} bytes, got ${salt.length}`);
    }
    const failMode = opts.failMode ?? "open";
    if (failMode !== "open" && failMode !== "closed") throw new Error(`client: unknown fail mode ${String(failMode)}`);
    this.now = opts.now ?? Date.now;
    this.sleepFn = opts.sleep ?? sleep;
    this.log = opts.logger ?? consoleLogger;
    const pos = (v: number | undefined, d: number) => (v !== undefined && v > 0 ? v : d);
    const rules: Rules = {
      maxServerDelayMs: pos(opts.rules?.maxServerDelayMs, DefaultMaxServerDelayMs),
      maxBodyBytes: pos(opts.rules?.maxBodyBytes, DefaultMaxBodyBytes),
      now: opts.rules?.now ?? this.now,
    };
    const backoffBaseMs = pos(opts.backoffBaseMs, DefaultBackoffBaseMs);
    this.cfg = {
      admitTimeoutMs: pos(opts.admitTimeoutMs, DefaultAdmitTimeoutMs), failMode,
      maxRetries: opts.maxRetries !== undefined && opts.maxRetries >= 0 ? opts.maxRetries : DefaultMaxRetries,
      maxWaitMs: pos(opts.maxWaitMs, rules.maxServerDelayMs!), noWait: opts.noWait ?? false,
      backoffBaseMs, backoffCapMs: Math.max(pos(opts.backoffCapMs, DefaultBackoffCapMs), backoffBaseMs),
      probePollMs: pos(opts.probePollMs, DefaultProbePollMs), rules, policy, salt: Uint8Array.from(salt),
    };
    const interceptors: Interceptor[] = [];
    if (opts.token) {
      const header = "Bearer " + opts.token;
      interceptors.push((next) => (req) => {
        req.header.set("Authorization", header);
        return next(req);
      });
    }
    for (const url of urls) {
      let transport: Transport;
      let close = () => {};
      if (opts.transport) {
        transport = opts.transport(url, interceptors);
      } else {
        const protocol = opts.protocol ?? "connect";
        const h2 = protocol === "grpc" || (opts.httpVersion ?? "2") === "2";
        if (h2) {
          const sm = new Http2SessionManager(url, { pingIntervalMs: 15_000, pingTimeoutMs: 5_000, idleConnectionTimeoutMs: 60_000 });
          close = () => sm.abort();
          const o = { baseUrl: url, httpVersion: "2" as const, sessionManager: sm, interceptors };
          transport = protocol === "grpc" ? createGrpcTransport(o)
            : protocol === "grpc-web" ? createGrpcWebTransport(o) : createConnectTransport(o);
        } else {
          const o = { baseUrl: url, httpVersion: "1.1" as const, interceptors };
          transport = protocol === "grpc-web" ? createGrpcWebTransport(o) : createConnectTransport(o);
        }
      }
      this.endpoints.push({ url, rpc: createClient(CooldownService, transport), close });
    }
    this.current = randN(this.endpoints.length);
    this.health = new Health(pos(opts.degradeAfter, DefaultDegradeAfter), pos(opts.degradeWindowMs, DefaultDegradeWindowMs),
      pos(opts.serviceRetryMs, DefaultServiceRetryMs), this.endpoints.length, failMode === "open" ? "fail_open" : "fail_closed",
      this.log, () => this.mirror?.outage(), () => this.local.clear());
    this.queue = new ReportQueue(pos(opts.reportQueueSize, DefaultReportQueueSize), pos(opts.reportQueueMaxAgeMs, DefaultReportQueueMaxAgeMs));
    if (opts.mirror) {
      const intervalMs = pos(typeof opts.mirror === "object" ? opts.mirror.intervalMs : undefined, DefaultMirrorIntervalMs);
      this.mirror = new Mirror({
        now: this.now, log: this.log, closed: this.closeCtl.signal,
        rpc: () => this.endpoints[this.current % this.endpoints.length]!.rpc,
        rejected: (err) => classifyRpc(err) === "rejected",
        sendBatch: (conn, rev, count, retry) => this.sendBatch(conn, rev, count, retry),
      }, intervalMs);
      this.mirror.start();
    }
  }

  /** Sends one batch of successes; one cooldownd does not take goes to the report queue. */
  private async sendBatch(conn: Conn, rev: bigint, count: number, retry: boolean): Promise<void> {
    const req = this.reportRequest(conn, rev, "", retry, { outcome: Outcome.Success, retryable: false, retryAfterMs: 0, httpStatus: 200,
      errorCode: "", proactiveMs: 0, tooLong: false });
    req.count = count;
    const r = await this.call("report", undefined, (rpc, o) => rpc.report(req, o));
    if (r.kind === "ok") {
      this.health.success();
      this.mirror?.reportAnswer(conn, r.value!);
    } else if (r.kind !== "rejected" && r.kind !== "capped" && !this.closed) {
      this.enqueue(req, 0);
    }
  }

  /** The wire report of one call, from this client's reporter; retry: the call was a retry on conn. */
  private reportRequest(conn: Conn, rev: bigint, lease: string, retry: boolean, cl: Classification): ReportRequest {
    const req = reportRequest(conn, rev, lease, cl);
    req.retry = retry;
    req.reporter = this.reporter;
    return req;
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
    return { degraded: this.health.isDegraded(), degradations: this.health.outages, localDecisions: this.localDecisions,
      reports: this.queue.snapshot(), mirror: this.mirror?.stats() };
  }

  /**
   * Runs `run` against the endpoints, the preferred one first, within one
   * admit timeout in all; an endpoint that does not answer loses its place.
   */
  private async call<T>(op: string, signal: AbortSignal | undefined,
    run: (rpc: RpcClient<typeof CooldownService>, o: { signal?: AbortSignal; timeoutMs: number }) => Promise<T>,
  ): Promise<{ tried: number[]; kind: RpcKind; value?: T; err?: unknown }> {
    const deadline = Date.now() + this.cfg.admitTimeoutMs;
    const n = this.endpoints.length;
    const start = this.current;
    const tried: number[] = [];
    let err: unknown;
    for (let i = 0; i < n; i++) {
      const e = (start + i) % n;
      const left = deadline - Date.now();
      if (left <= 0) break;
      tried.push(e);
      try {
        const value = await run(this.endpoints[e]!.rpc, { signal, timeoutMs: left });
        return { tried, kind: "ok", value };
      } catch (x) {
        err = x;
      }
      const kind = classifyRpc(err);
      if (kind !== "outage") return { tried, kind, err };
      if (this.current === e) {
        this.current = (e + 1) % n;
        if (n > 1) this.log.debug("cooldownd endpoint did not answer; moving to the next", { op, endpoint: this.endpoints[e]!.url, code: codeName(err) });
      }
      if (signal?.aborted) break;
    }
    if (tried.length === 0) err ??= new ConnectError("admit timeout passed", Code.DeadlineExceeded);
    return { tried, kind: "outage", err };
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
  async admit(cands: Conn[], opts: { signal?: AbortSignal; sent?: readonly Conn[] } = {}): Promise<Admission> {
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
    const r = await this.call("admit", opts.signal, (rpc, o) => rpc.admit(req, o));
    if (r.kind !== "ok" && opts.signal?.aborted) throw opts.signal.reason;
    switch (r.kind) {
      case "ok": {
        this.health.success();
        const a = admission(r.value!, cands, retry);
        this.see(a.conn, a.revision);
        this.words.learn(this.now(), r.value!.candidates, cands.map((c) => c.idHex), retry);
        if (this.mirror && ticket) this.mirror.learn(a, r.value!.state, r.value!.throttleProbability, ticket, this.now());
        return a;
      }
      case "rejected":
        throw new RejectedError("admit", ConnectError.from(r.err));
      case "capped":
        this.capped(r.err);
        this.localDecisions++;
        return this.localAdmit(cands, retry);
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
    this.localDecisions++;
    return this.localAdmit(cands, retry);
  }

  private capped(err: unknown): void {
    if (this.capLogged) return;
    this.capLogged = true;
    this.log.warn("cooldownd cannot track more connections of this tenant; their outcomes are not shared", { code: codeName(err) });
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
  private async reportOpen(a: Admission, cl: Classification): Promise<boolean> {
    if (!(a.conn instanceof Conn)) throw new InvalidConnError("zero Conn");
    if (cl.outcome < Outcome.Success || cl.outcome > Outcome.Canceled) throw new Error(`client: report: invalid outcome ${outcomeName(cl.outcome)}`);
    const retry = a.retry ?? false;
    // A report that says the connection is not healthy takes it out of the
    // mirror at once, whether cooldownd takes it or not.
    this.mirror?.reported(a.conn, a.local ? (this.revs.get(a.conn.idHex) ?? 0n) : a.revision, cl);
    if (a.local) {
      if (informs(cl)) this.enqueue(this.reportRequest(a.conn, this.revs.get(a.conn.idHex) ?? 0n, "", retry, cl), reportDelay(cl));
      return this.localReport(a, cl, false);
    }
    if (this.mirror && cl.outcome === Outcome.Success && cl.proactiveMs <= 0) {
      // With the mirror a success never waits on cooldownd: counted for the
      // next batch (retries apart: one report has one retry flag; no request
      // is built, the healthy path's cost), or (a probe's, which releases
      // the fleet) sent at once in the background.
      if (a.leaseToken === "") this.mirror.add(a.conn, a.revision, retry);
      else this.enqueue(this.reportRequest(a.conn, a.revision, a.leaseToken, retry, cl), 0);
      return false;
    }
    const req = this.reportRequest(a.conn, a.revision, a.leaseToken, retry, cl);
    if (!this.health.useService(this.now())) {
      this.enqueue(req, reportDelay(cl));
      return this.localReport(a, cl, true);
    }
    const r = await this.call("report", undefined, (rpc, o) => rpc.report(req, o));
    switch (r.kind) {
      case "ok":
        this.health.success();
        this.see(a.conn, r.value!.revision);
        this.mirror?.reportAnswer(a.conn, r.value!);
        // A shadow policy's open is computed, not enforced: the next admit
        // allows this connection again, so it is no reason to switch
        // candidates at once, nor a word for the in-process fallback.
        if (r.value!.state !== WireState.OPEN || r.value!.shadow) return false;
        this.words.heard(this.now(), a.conn.idHex, cl.outcome, reportDelay(cl));
        return true;
      case "rejected":
        throw new RejectedError("report", ConnectError.from(r.err));
      case "capped":
        this.capped(r.err);
        return false;
      case "outage":
        this.health.failure(this.now(), "report", r.tried, codeName(r.err), r.err);
        break;
      default:
        this.log.debug("cooldownd could not take a report; queued", { code: codeName(r.err) });
    }
    this.enqueue(req, reportDelay(cl));
    return this.localReport(a, cl, true);
  }

  /**
   * Keeps the probe lease of a alive for ttlMs from now (≤ 0: the policy's
   * lease TTL) and returns its new expiry (Unix ms). A lease no longer held
   * is a RejectedError with code failed_precondition.
   */
  async extendLease(a: Admission, ttlMs = 0, opts: { signal?: AbortSignal } = {}): Promise<number> {
    if (a.leaseToken === "") throw new Error("client: extend lease: no lease token");
    if (a.local) {
      const s = this.localState(a.conn.idHex);
      const [l] = s.extendLease(this.now(), a.leaseToken, ttlMs > 0 ? ttlMs : this.cfg.policy.leaseTtlMs);
      return l.expires;
    }
    const req = create(ExtendLeaseRequestSchema, { connection: wireConn(a.conn), leaseToken: a.leaseToken });
    if (ttlMs > 0) req.ttl = durationFromMs(ttlMs);
    const r = await this.call("extend lease", opts.signal, (rpc, o) => rpc.extendLease(req, o));
    if (r.kind === "ok") {
      this.health.success();
      return r.value!.leaseExpiresAt ? timestampMs(r.value!.leaseExpiresAt) : 0;
    }
    if (opts.signal?.aborted) throw opts.signal.reason;
    if (r.kind === "rejected") throw new RejectedError("extend lease", ConnectError.from(r.err));
    if (r.kind === "outage") this.health.failure(this.now(), "extend lease", r.tried, codeName(r.err), r.err);
    throw ConnectError.from(r.err);
  }

  // ---- in-process breaker ----

  private localState(id: string): State {
    let s = this.local.get(id);
    if (s) return s;
    if (this.local.size >= maxLocalStates) {
      for (const [k, st] of this.local) {
        if (st.phase !== Phase.Open && st.phase !== Phase.HalfOpen && st.consecutive === 0) this.local.delete(k);
      }
    }
    s = new State();
    this.local.set(id, s);
    return s;
  }

  /**
   * Decides with the in-process breakers: the first candidate that may go,
   * else a denial for the one available soonest. A candidate cooldownd last
   * denied is denied until that denial runs out; retry[i] marks the
   * candidates the call was already sent to (the local retry budget charges
   * them), and the throttle draws for every candidate.
   */
  private localAdmit(cands: Conn[], retry: boolean[] | undefined): Admission {
    const now = this.now();
    let best: Admission | undefined;
    for (let i = 0; i < cands.length; i++) {
      const c = cands[i]!;
      const r = retry?.[i] ?? false;
      const w = this.words.get(c.idHex, now, r);
      if (w !== undefined) {
        const d: Admission = { index: i, conn: c, decision: Decision.Deny, revision: 0n, leaseToken: "", leaseExpires: 0,
          retryAfterMs: w.until - now, reason: w.reason, local: true, retry: r, shadowReason: DenyReason.None, shadowRetryAfterMs: 0 };
        if (best === undefined || d.retryAfterMs < best.retryAfterMs) best = d;
        continue;
      }
      const st = this.localState(c.idHex);
      const [v] = st.admit(this.cfg.policy, now, { nonce: randomBytes(9).toString("base64url"), retry: r, draw: Math.random() });
      const a: Admission = { index: i, conn: c, decision: v.decision, revision: BigInt(v.revision), leaseToken: "",
        leaseExpires: 0, retryAfterMs: 0, reason: DenyReason.None, local: true, retry: r, shadowReason: v.shadowed,
        shadowRetryAfterMs: Math.max(v.shadowRetryAfter, 0), throttleProbability: st.throttleProbability(this.cfg.policy, now) };
      if (v.decision === Decision.AllowProbe) {
        a.leaseToken = v.lease!.token;
        a.leaseExpires = v.lease!.expires;
        return a;
      }
      if (v.decision === Decision.Allow) return a;
      a.reason = v.reason;
      a.retryAfterMs = Math.max(v.retryAfter, 0);
      if (best === undefined || a.retryAfterMs < best.retryAfterMs) best = a;
    }
    return best!;
  }

  private localReport(a: Admission, cl: Classification, fresh: boolean): boolean {
    const s = this.localState(a.conn.idHex);
    const rev = fresh ? s.revision : Number(a.revision);
    s.report(this.cfg.policy, this.now(), {
      revision: rev, leaseToken: a.leaseToken, outcome: cl.outcome, retryAfter: reportDelay(cl),
      httpStatus: cl.httpStatus, errorCode: cl.errorCode, retry: a.retry ?? false, reporter: this.reporter,
    }, Math.random());
    return s.phase === Phase.Open;
  }

  private see(conn: Conn, rev: bigint): void {
    if (this.revs.size >= maxRevisions) this.revs.clear();
    this.revs.set(conn.idHex, rev);
  }

  // ---- the report queue ----

  private enqueue(req: ReportRequest, hintMs: number): void {
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
      const req = withHint(p, this.now());
      const r = await this.call("report", undefined, (rpc, o) => rpc.report(req, o));
      if (r.kind === "ok") {
        this.queue.settled(true);
        this.health.success();
        if (req.connection && req.connection.id.length === 32) this.mirror?.reportAnswer(new Conn(req.connection.id, req.connection.label), r.value!);
        backoff = QueueBackoffBaseMs;
        continue;
      }
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
    for (const e of this.endpoints) e.close();
  }

  // ---- the guard ----

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
    return this.guard([conn], this.cfg.maxRetries, call, opts);
  }

  /**
   * doFallback guards one call over candidates in order of preference:
   * every admit names all remaining ones and cooldownd admits the first
   * that may go; a provider or credential failure moves on at once.
   */
  doFallback(conns: Conn[], call: (ctx: AttemptContext) => Promise<Response>, opts: GuardOptions = {}): Promise<Response> {
    return this.guard(conns, this.cfg.maxRetries, call, opts);
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
        return await this.guard([c], retries, () => base(input instanceof Request ? input.clone() : input, init), { signal });
      } catch (e) {
        if (e instanceof GuardError && e.response && !signal?.aborted) return e.response;
        if (signal?.aborted && e instanceof GuardError && e.lastOutcome === Outcome.Canceled) throw signal.reason ?? e;
        throw e;
      }
    };
    return guarded as typeof globalThis.fetch;
  }

  private async guard(cands: Conn[], maxRetries: number, call: (ctx: AttemptContext) => Promise<Response>,
    opts: GuardOptions): Promise<Response> {
    validConns(cands);
    let signal = opts.signal;
    let deadline: number | undefined;
    if (opts.timeoutMs !== undefined && opts.timeoutMs > 0) {
      deadline = this.now() + opts.timeoutMs;
      const t = AbortSignal.timeout(opts.timeoutMs);
      signal = signal ? AbortSignal.any([signal, t]) : t;
    }
    let live = [...cands];
    let attempts = 0, retries = 0, waited = 0;
    let last: GuardError | undefined;
    const sent: Conn[] = []; // the candidates this call went to: on them it is a retry
    for (;;) {
      if (signal?.aborted) throw ended(signal, last, live[0]!);
      let adm: Admission;
      try {
        adm = await this.admit(live, { signal, sent });
      } catch (e) {
        if (signal?.aborted) throw ended(signal, last, live[0]!);
        if (e instanceof UnavailableError) {
          throw new DeniedError({ conn: live[0]!, reason: DenyReason.Unavailable, retryAfterMs: 0, local: true, attempts, cause: e });
        }
        throw e;
      }
      if (adm.decision === Decision.Deny) {
        if (perCall(adm.reason)) {
          // A retry over the fleet's budget or a throttled call: not a wait
          // for the connection. Fall back to the next candidate at once, or
          // give up; waiting would spend the budget others need.
          if (live.length > 1) {
            this.log.debug("falling back from a fleet rule's denial", { conn: adm.conn.toJSON(), reason: adm.reason });
            live = live.filter((x) => x.idHex !== adm.conn.idHex);
            continue;
          }
          throw new DeniedError({ conn: adm.conn, reason: adm.reason, retryAfterMs: adm.retryAfterMs, local: adm.local, attempts, cause: last });
        }
        const d = this.denyWait(adm, waited, deadline);
        if (d === undefined) {
          throw new DeniedError({ conn: adm.conn, reason: adm.reason, retryAfterMs: adm.retryAfterMs, local: adm.local, attempts, cause: last });
        }
        this.log.debug("waiting for a denied connection", { conn: adm.conn.toJSON(), wait_ms: d });
        try {
          await this.sleepFn(d, signal);
        } catch {
          throw ended(signal!, last, adm.conn);
        }
        waited += d;
        continue;
      }

      attempts++;
      if (!adm.retry && !sent.some((x) => x.idHex === adm.conn.idHex)) sent.push(adm.conn);
      const { resp, cl, err } = await this.attempt(adm, attempts, call, signal);
      let open = false;
      try {
        open = await this.reportOpen(adm, cl);
      } catch (e) {
        this.log.debug("report failed", { conn: adm.conn.toJSON(), error: String(e) });
      }
      if (cl.outcome === Outcome.Success) return resp!;
      last = new GuardError({ conn: adm.conn, attempts, lastOutcome: cl.outcome, errorCode: cl.errorCode, httpStatus: cl.httpStatus,
        retryAfterMs: cl.retryAfterMs, tooLong: cl.tooLong, response: resp, cause: err });
      if (signal?.aborted) throw ended(signal, last, adm.conn);
      if (cl.retryable && retries < maxRetries) {
        retries++;
        if (open && live.length > 1) continue; // the next admit picks another candidate at once
        const delay = this.retryDelay(retries, cl);
        if (deadline !== undefined && this.now() + delay >= deadline) throw last;
        this.log.debug("retrying provider call", { conn: adm.conn.toJSON(), attempt: attempts, outcome: outcomeName(cl.outcome),
          http_status: cl.httpStatus, error_code: cl.errorCode, delay_ms: delay });
        try {
          await this.sleepFn(delay, signal);
        } catch {
          throw ended(signal!, last, adm.conn);
        }
      } else if (providerFault(cl.outcome) && live.length > 1) {
        this.log.debug("moving on to the next candidate", { conn: adm.conn.toJSON(), outcome: outcomeName(cl.outcome), error_code: cl.errorCode });
        live = live.filter((x) => x.idHex !== adm.conn.idHex);
      } else {
        throw last;
      }
    }
  }

  private async attempt(adm: Admission, n: number, call: (ctx: AttemptContext) => Promise<Response>, signal: AbortSignal | undefined):
    Promise<{ resp?: Response; cl: Classification; err?: unknown }> {
    let resp: Response | undefined;
    let err: unknown;
    try {
      resp = await call({ signal, admission: adm, conn: adm.conn, attempt: n });
      if (!resp) err = new Error("client: call returned no response");
    } catch (e) {
      err = e;
    }
    let body: Uint8Array | undefined;
    if (resp && (resp.status < 200 || resp.status > 299)) {
      body = await readErrorBody(resp, this.cfg.rules.maxBodyBytes!, signal);
      resp = rebuild(resp, body);
    }
    const abortReason = signal?.aborted ? (signal.reason ?? true) : undefined;
    return { resp, cl: classify(this.cfg.rules, resp, body, err, abortReason), err };
  }

  private denyWait(a: Admission, waited: number, deadline: number | undefined): number | undefined {
    if (this.cfg.noWait) return undefined;
    const left = this.cfg.maxWaitMs - waited;
    let d = Math.max(a.retryAfterMs, minDenyWaitMs);
    if (a.reason === DenyReason.ProbeInFlight) d = Math.min(d, this.cfg.probePollMs);
    if (d > left) return undefined;
    d = Math.min(d + randN(Math.floor(d / 10) + 10), left);
    if (deadline !== undefined && this.now() + d > deadline) return undefined;
    return d;
  }

  private retryDelay(n: number, cl: Classification): number {
    let d = this.cfg.backoffBaseMs;
    for (let i = 1; i < n && d < this.cfg.backoffCapMs; i++) d *= 2;
    d = Math.min(d, this.cfg.backoffCapMs);
    d = Math.floor(d / 2) + randN(Math.floor(d / 2) + 1);
    if (cl.outcome === Outcome.Overloaded) d = Math.max(d, OverloadFloorMs);
    return Math.max(d, cl.retryAfterMs);
  }
}

function isStream(b: unknown): boolean {
  return typeof b === "object" && b !== null && typeof (b as ReadableStream).getReader === "function";
}

/** Reads at most limit bytes of a response body and cancels the rest; a stalled body ends with signal. */
export async function readErrorBody(resp: Response, limit: number, signal?: AbortSignal): Promise<Uint8Array> {
  if (!resp.body) return new Uint8Array();
  const reader = resp.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  const onAbort = () => { void reader.cancel().catch(() => {}); };
  if (signal?.aborted) onAbort(); // a listener added now would never fire
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    while (size < limit) {
      const { done, value } = await reader.read();
      if (done) break;
      const take = value.subarray(0, Math.min(value.length, limit - size));
      chunks.push(take);
      size += take.length;
    }
  } catch {
    // a short read still classifies by status
  } finally {
    signal?.removeEventListener("abort", onAbort);
    void reader.cancel().catch(() => {});
  }
  const out = new Uint8Array(size);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.length;
  }
  return out;
}

/** The response with its body replaced by the bytes read, so the caller can still read it. */
function rebuild(resp: Response, body: Uint8Array): Response {
  const nullBody = [101, 103, 204, 205, 304].includes(resp.status);
  try {
    const headers = new Headers(resp.headers);
    headers.delete("content-encoding");
    headers.delete("content-length");
    return new Response(nullBody ? null : body, { status: resp.status, statusText: resp.statusText, headers });
  } catch {
    return resp;
  }
}

function providerFault(o: Outcome): boolean {
  return o === Outcome.TransientFailure || o === Outcome.RateLimited || o === Outcome.Overloaded ||
    o === Outcome.QuotaExhausted || o === Outcome.AuthFailure;
}

function ended(signal: AbortSignal, last: GuardError | undefined, conn: Conn): Error {
  if (last) return last;
  const reason = signal.reason;
  const timeout = typeof reason === "object" && reason !== null && (reason as Error).name === "TimeoutError";
  return new GuardError({ conn, attempts: 0, lastOutcome: Outcome.Canceled, errorCode: timeout ? "deadline_exceeded" : "canceled",
    httpStatus: 0, retryAfterMs: 0, tooLong: false, cause: reason });
}

function validConns(cands: Conn[]): void {
  if (cands.length === 0 || cands.length > MaxCandidates) {
    throw new InvalidConnError(`need 1 to ${MaxCandidates} candidates, got ${cands.length}`);
  }
  cands.forEach((c, i) => {
    if (!(c instanceof Conn)) throw new InvalidConnError(`candidate ${i} is not a Conn`);
  });
}

function wireConn(c: Conn): WireConnection {
  return create(ConnectionSchema, { id: c.id, label: c.label });
}

function codeName(err: unknown): string {
  if (err === undefined) return "";
  return Code[ConnectError.from(err).code] ?? "unknown";
}

function admission(m: AdmitResponse, cands: Conn[], retry: boolean[] | undefined): Admission {
  const i = m.candidateIndex;
  const d = m.decision as number;
  if (i >= cands.length || d < Decision.Allow || d > Decision.Deny) {
    throw new Error(`client: admit: malformed answer (decision ${d}, candidate ${i} of ${cands.length})`);
  }
  const a: Admission = {
    index: i, conn: cands[i]!, decision: d as Decision, revision: m.revision, leaseToken: m.leaseToken,
    leaseExpires: m.leaseExpiresAt ? timestampMs(m.leaseExpiresAt) : 0,
    retryAfterMs: m.retryAfter ? Math.max(durationMs(m.retryAfter), 0) : 0,
    reason: m.denyReason as number as DenyReason, local: false, retry: retry?.[i] ?? false,
    shadowReason: DenyReason.None, shadowRetryAfterMs: 0, throttleProbability: m.throttleProbability,
  };
  if (allowed(a)) {
    a.shadowReason = m.shadowDenyReason as number as DenyReason;
    if (a.shadowReason !== DenyReason.None && m.shadowRetryAfter) a.shadowRetryAfterMs = Math.max(durationMs(m.shadowRetryAfter), 0);
  }
  return a;
}

/** Per candidate, whether the call was already sent to it; undefined when to none (a first attempt everywhere). */
function retries(cands: readonly Conn[], sent: readonly Conn[] | undefined): boolean[] | undefined {
  if (!sent || sent.length === 0) return undefined;
  const ids = new Set(sent.map((c) => c.idHex));
  const out = cands.map((c) => ids.has(c.idHex));
  return out.some((x) => x) ? out : undefined;
}

function durationMs(d: Duration): number {
  return Math.ceil(Number(d.seconds) * 1000 + d.nanos / 1e6);
}

/** Whether an outcome decided in-process holds something the fleet must learn. */
function informs(cl: Classification): boolean {
  switch (cl.outcome) {
    case Outcome.TransientFailure: case Outcome.RateLimited: case Outcome.Overloaded:
    case Outcome.QuotaExhausted: case Outcome.AuthFailure:
      return true;
    case Outcome.Success:
      return cl.proactiveMs > 0;
  }
  return false;
}

/** The delay a report carries: the server's delay or the proactive cooldown, at most a day. */
function reportDelay(cl: Classification): number {
  return Math.min(Math.max(cl.retryAfterMs, cl.proactiveMs), MaxHintMs);
}

/**
 * The wire report of one call, with a fresh idempotency key (16 random
 * bytes, unpadded base64url, as the Go client's): every send of it (the
 * first try, another endpoint, the report queue's resends) carries it, so
 * cooldownd counts the report once however many of its answers are lost.
 */
function reportRequest(conn: Conn, rev: bigint, lease: string, cl: Classification): ReportRequest {
  const req = create(ReportRequestSchema, {
    connection: wireConn(conn), revision: rev, leaseToken: lease, outcome: cl.outcome as number,
    httpStatus: Math.max(cl.httpStatus, 0), errorCode: cl.errorCode, idempotencyKey: randomBytes(16).toString("base64url"),
  });
  const d = reportDelay(cl);
  if (d > 0) req.retryAfter = durationFromMs(d);
  return req;
}

function withHint(p: PendingReport, now: number): ReportRequest {
  const left = remainingHint(p, now);
  if (left > 0) p.req.retryAfter = durationFromMs(left);
  return p.req;
}

