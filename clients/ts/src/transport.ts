// The endpoints of cooldownd (client/transport.go, client/client.go): their
// transports, the sorting of an RPC's error, and one call over all of them
// within the admit timeout, moving on from one that does not answer.

import * as http from "node:http";
import * as https from "node:https";

import { Code, ConnectError, createClient, type Client as RpcClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport, Http2SessionManager } from "@connectrpc/connect-node";

import { CooldownService } from "./gen/v1/cooldown_pb.js";
import { errorChain } from "./classify.js";
import type { Logger } from "./log.js";
import type { ClientOptions } from "./options.js";
import { traceContext } from "./otel.js";

export type RpcKind = "ok" | "rejected" | "capped" | "outage" | "failed";

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

/** Whether err is Unimplemented: cooldownd (an older one) lacks the RPC and did nothing. */
export function unimplemented(err: unknown): boolean {
  return err !== undefined && ConnectError.from(err).code === Code.Unimplemented;
}

/** The name of an RPC error's code ("" for none). */
export function codeName(err: unknown): string {
  if (err === undefined) return "";
  return Code[ConnectError.from(err).code] ?? "unknown";
}

export type Rpc = RpcClient<typeof CooldownService>;

export interface Endpoint {
  url: string;
  rpc: Rpc;
  close(): void;
}

/** The result of one call over the endpoints: which were tried, how it ended, the answer or the last error. */
export interface CallResult<T> {
  tried: number[];
  kind: RpcKind;
  value?: T;
  err?: unknown;
}

/** The endpoints of cooldownd and which one is preferred now. */
export class Endpoints {
  readonly list: Endpoint[] = [];
  /** The preferred endpoint's index. */
  current: number;

  constructor(urls: string[], opts: ClientOptions, private readonly admitTimeoutMs: number, private readonly log: Logger) {
    const interceptors: Interceptor[] = [traceContext];
    if (opts.token) {
      const header = "Bearer " + opts.token;
      interceptors.push((next) => (req) => {
        req.header.set("Authorization", header);
        return next(req);
      });
    }
    for (const url of urls) this.list.push(endpoint(url, opts, interceptors));
    this.current = Math.floor(Math.random() * this.list.length);
  }

  /** The preferred endpoint's client. */
  rpc(): Rpc {
    return this.list[this.current % this.list.length]!.rpc;
  }

  /**
   * Runs `run` against the endpoints, the preferred one first, within one
   * admit timeout in all; an endpoint that does not answer loses its place.
   */
  async call<T>(op: string, signal: AbortSignal | undefined,
    run: (rpc: Rpc, o: { signal?: AbortSignal; timeoutMs: number }) => Promise<T>): Promise<CallResult<T>> {
    const deadline = Date.now() + this.admitTimeoutMs;
    const n = this.list.length;
    const start = this.current;
    const tried: number[] = [];
    let err: unknown;
    for (let i = 0; i < n; i++) {
      const e = (start + i) % n;
      const left = deadline - Date.now();
      if (left <= 0) break;
      tried.push(e);
      try {
        const value = await run(this.list[e]!.rpc, { signal, timeoutMs: left });
        return { tried, kind: "ok", value };
      } catch (x) {
        err = x;
      }
      const kind = classifyRpc(err);
      if (kind !== "outage") return { tried, kind, err };
      if (this.current === e) {
        this.current = (e + 1) % n;
        if (n > 1) this.log.debug("cooldownd endpoint did not answer; moving to the next", { op, endpoint: this.list[e]!.url, code: codeName(err) });
      }
      if (signal?.aborted) break;
    }
    if (tried.length === 0) err ??= new ConnectError("admit timeout passed", Code.DeadlineExceeded);
    return { tried, kind: "outage", err };
  }

  close(): void {
    for (const e of this.list) e.close();
  }
}

/** The HTTP versions an endpoint's unary calls and streams go over. */
export interface HttpPlan {
  unary: "1.1" | "2";
  stream: "1.1" | "2";
}

/**
 * The HTTP versions of an endpoint's calls, as the Go client's
 * (client/transport.go). By default (connect or grpc-web, no httpVersion),
 * to an http:// endpoint, unary calls go over HTTP/1.1 with keep-alive,
 * from a pool of up to unaryConnsPerHost sockets, and streams (the
 * mirror's watch) over h2c: a unary call over HTTP/1.1 costs cooldownd
 * about a third less CPU than over h2c
 * (docs/decisions/0052-unary-calls-over-http1.md). An https:// endpoint
 * keeps HTTP/2 for both (one TLS session, not one handshake per pooled
 * socket); gRPC needs HTTP/2; an explicit httpVersion puts every call on
 * that version.
 */
export function httpPlan(url: string, opts: Pick<ClientOptions, "protocol" | "httpVersion">): HttpPlan {
  if ((opts.protocol ?? "connect") === "grpc") return { unary: "2", stream: "2" };
  if (opts.httpVersion) return { unary: opts.httpVersion, stream: opts.httpVersion };
  if (url.startsWith("https:")) return { unary: "2", stream: "2" };
  return { unary: "1.1", stream: "2" };
}

/** The HTTP/1.1 sockets one endpoint's unary pool keeps open (and idle), as the Go client's. */
export const unaryConnsPerHost = 64;

function endpoint(url: string, opts: ClientOptions, interceptors: Interceptor[]): Endpoint {
  if (opts.transport) {
    return { url, rpc: createClient(CooldownService, opts.transport(url, interceptors)), close: () => {} };
  }
  const protocol = opts.protocol ?? "connect";
  const plan = httpPlan(url, opts);
  const closers: Array<() => void> = [];
  const make = (version: "1.1" | "2"): Transport => {
    if (version === "2") {
      const sm = new Http2SessionManager(url, { pingIntervalMs: 15_000, pingTimeoutMs: 5_000, idleConnectionTimeoutMs: 60_000 });
      closers.push(() => sm.abort());
      const o = { baseUrl: url, httpVersion: "2" as const, sessionManager: sm, interceptors };
      return protocol === "grpc" ? createGrpcTransport(o)
        : protocol === "grpc-web" ? createGrpcWebTransport(o) : createConnectTransport(o);
    }
    const agentOpts = { keepAlive: true, maxSockets: unaryConnsPerHost, maxFreeSockets: unaryConnsPerHost };
    const agent = url.startsWith("https:") ? new https.Agent(agentOpts) : new http.Agent(agentOpts);
    closers.push(() => agent.destroy());
    const o = { baseUrl: url, httpVersion: "1.1" as const, interceptors, nodeOptions: { agent } };
    return protocol === "grpc-web" ? createGrpcWebTransport(o) : createConnectTransport(o);
  };
  const unary = make(plan.unary);
  const stream = plan.stream === plan.unary ? unary : make(plan.stream);
  // Unary calls on one transport, streams on the other (the mirror's watch
  // opens its HTTP/2 session only when it starts).
  const transport: Transport = stream === unary ? unary : {
    unary: unary.unary.bind(unary),
    stream: stream.stream.bind(stream),
  };
  return { url, rpc: createClient(CooldownService, transport), close: () => { for (const c of closers) c(); } };
}
