// The options of a Client (client/options.go): their defaults, their checks
// and the configuration the client runs with.

import { randomBytes } from "node:crypto";
import { type Interceptor, type Transport } from "@connectrpc/connect";

import { defaultPolicy, validatePolicy, type Policy } from "./breaker.js";
import { DefaultMaxBodyBytes, DefaultMaxServerDelayMs, type Rules } from "./classify.js";
import { MaxSaltLen, MinSaltLen } from "./keys.js";
import type { Logger } from "./log.js";
import type { TracerProviderLike } from "./otel.js";
import { DefaultMirrorIntervalMs, type MirrorStats } from "./mirror.js";
import { DefaultReportQueueMaxAgeMs, DefaultReportQueueSize, type QueueStats } from "./queue.js";

export const MaxEndpoints = 16;
export const DefaultAdmitTimeoutMs = 250;
export const DefaultMaxRetries = 2;
export const DefaultBackoffBaseMs = 500;
export const DefaultBackoffCapMs = 8_000;
export const DefaultProbePollMs = 250;
export const DefaultDegradeAfter = 3;
export const DefaultDegradeWindowMs = 10_000;
export const DefaultServiceRetryMs = 1_000;
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
  /** HTTP version of every call for connect and grpc-web, "2" or "1.1". Unset (default): unary calls over HTTP/1.1 with keep-alive and streams over h2c for http://, HTTP/2 for https:// (httpPlan in transport.ts, decision 0052). */
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
   * The mirror (on by default; false turns it off): a copy of the connections
   * this process uses, fed by WatchConnections from cooldownd's first answer
   * to an Admit, that admits calls to closed healthy connections without a
   * round trip; successes are reported in batches every intervalMs (1 s).
   * The first call to a connection, every retry, and the first call after a
   * failure of this process still ask cooldownd; failures, hints and probes
   * go to cooldownd at once. Until cooldownd accepts the stream, and whenever
   * it refuses it (an older cooldownd, a token that may not watch), the
   * client works as without the mirror (logged once, counted in
   * stats().mirror.refused). docs/client-ts.md has the trade-off.
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
  /**
   * The OpenTelemetry TracerProvider of the client's spans (docs/observability.md).
   * Default: the global one, once the application registers one; without
   * @opentelemetry/api installed the client makes no span.
   */
  tracerProvider?: TracerProviderLike;
  /** For tests: builds the transport of one endpoint (default: the one protocol and httpVersion name). */
  transport?: (baseUrl: string, interceptors: Interceptor[]) => Transport;
}

/** The client's counters. */
export interface Stats {
  degraded: boolean;
  degradations: number;
  localDecisions: number;
  reports: QueueStats;
  /** The mirror's counters (undefined with mirror: false). */
  mirror?: MirrorStats;
}

/** The configuration a Client runs with: the options checked, with their defaults. */
export interface Config {
  admitTimeoutMs: number;
  failMode: FailMode;
  maxRetries: number;
  maxWaitMs: number;
  noWait: boolean;
  backoffBaseMs: number;
  backoffCapMs: number;
  probePollMs: number;
  degradeAfter: number;
  degradeWindowMs: number;
  serviceRetryMs: number;
  reportQueueSize: number;
  reportQueueMaxAgeMs: number;
  /** The mirror's batch interval, ms; undefined: no mirror (mirror: false). */
  mirrorIntervalMs: number | undefined;
  rules: Rules;
  /** The in-process breaker's policy, without a trip quorum. */
  policy: Policy;
  salt: Uint8Array;
  reporter: string;
}

/** The value if positive, else the default. */
export const pos = (v: number | undefined, d: number) => (v !== undefined && v > 0 ? v : d);

/** Checks opts and fills in the defaults; now is the client's clock. Throws on a bad option. */
export function config(opts: ClientOptions, now: () => number): Config {
  // Fields missing from the local policy take the defaults (a policy
  // written before the fleet rules lacks theirs).
  const policy: Policy = { ...defaultPolicy(), ...opts.localPolicy };
  const bad = validatePolicy(policy);
  if (bad) throw new Error("client: local policy: " + bad);
  // One process is one reporter: a trip quorum would never let the
  // in-process breaker trip on transient failures at all. The retry budget
  // and the throttle apply to this process's own calls.
  policy.tripQuorum = 0;
  let reporter: string;
  if (opts.reporter === undefined) {
    reporter = randomBytes(8).toString("hex");
  } else if (typeof opts.reporter !== "string" || !reporterPattern.test(opts.reporter)) {
    throw new Error(`client: reporter id must be 1 to ${MaxReporterLen} characters of [A-Za-z0-9._-]`);
  } else {
    reporter = opts.reporter;
  }
  const salt = opts.salt ?? new Uint8Array();
  if (salt.length !== 0 && (salt.length < MinSaltLen || salt.length > MaxSaltLen)) {
    throw new Error(`client: salt must be empty or ${MinSaltLen} to ${MaxSaltLen} bytes, got ${salt.length}`);
  }
  const failMode = opts.failMode ?? "open";
  if (failMode !== "open" && failMode !== "closed") throw new Error(`client: unknown fail mode ${String(failMode)}`);
  const rules: Rules = {
    maxServerDelayMs: pos(opts.rules?.maxServerDelayMs, DefaultMaxServerDelayMs),
    maxBodyBytes: pos(opts.rules?.maxBodyBytes, DefaultMaxBodyBytes),
    now: opts.rules?.now ?? now,
  };
  const backoffBaseMs = pos(opts.backoffBaseMs, DefaultBackoffBaseMs);
  return {
    admitTimeoutMs: pos(opts.admitTimeoutMs, DefaultAdmitTimeoutMs), failMode,
    maxRetries: opts.maxRetries !== undefined && opts.maxRetries >= 0 ? opts.maxRetries : DefaultMaxRetries,
    maxWaitMs: pos(opts.maxWaitMs, rules.maxServerDelayMs!), noWait: opts.noWait ?? false,
    backoffBaseMs, backoffCapMs: Math.max(pos(opts.backoffCapMs, DefaultBackoffCapMs), backoffBaseMs),
    probePollMs: pos(opts.probePollMs, DefaultProbePollMs),
    degradeAfter: pos(opts.degradeAfter, DefaultDegradeAfter), degradeWindowMs: pos(opts.degradeWindowMs, DefaultDegradeWindowMs),
    serviceRetryMs: pos(opts.serviceRetryMs, DefaultServiceRetryMs),
    reportQueueSize: pos(opts.reportQueueSize, DefaultReportQueueSize),
    reportQueueMaxAgeMs: pos(opts.reportQueueMaxAgeMs, DefaultReportQueueMaxAgeMs),
    mirrorIntervalMs: opts.mirror === false ? undefined
      : pos(typeof opts.mirror === "object" ? opts.mirror.intervalMs : undefined, DefaultMirrorIntervalMs),
    rules, policy, salt: Uint8Array.from(salt), reporter,
  };
}

/** The base URLs of a comma-separated list: http:// or https://, with a host and no credentials, at most MaxEndpoints. */
export function parseEndpoints(list: string): string[] {
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
