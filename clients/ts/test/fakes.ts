// A scripted fake LLM provider and a loopback TCP proxy that can be cut,
// for the guard and degradation tests (loopback only); a scripted cooldownd
// in process, for the mirror's.

import { createServer as createHttpServer, type IncomingMessage, type ServerResponse, type Server as HttpServer } from "node:http";
import { createServer, connect, type Server as NetServer, type Socket, type AddressInfo } from "node:net";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { createInterface } from "node:readline";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createRouterTransport } from "@connectrpc/connect";

import { Decision } from "../src/breaker.js";
import {
  AdmitResponseSchema, CandidateDecisionSchema, CooldownService, ReportBatchResponseSchema, ReportResponseSchema, State as WireState,
  WatchConnectionsResponseSchema, type ReportBatchRequest, type ReportRequest, type WatchConnectionsResponse,
} from "../src/gen/v1/cooldown_pb.js";

export type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void;

/** A provider that answers each request with the next handler of its script (the last one repeats). */
export class FakeProvider {
  readonly requests: { method: string; url: string; headers: IncomingMessage["headers"]; body: string }[] = [];
  private script: Handler[] = [];
  private server!: HttpServer;
  url = "";

  static async start(): Promise<FakeProvider> {
    const p = new FakeProvider();
    p.server = createHttpServer((req, res) => {
      let body = "";
      req.on("data", (c) => { body += c; });
      req.on("end", () => {
        p.requests.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body });
        const h = p.script.length > 1 ? p.script.shift()! : p.script[0];
        if (!h) {
          res.writeHead(500).end();
          return;
        }
        h(req, res, body);
      });
    });
    await new Promise<void>((r) => p.server.listen(0, "127.0.0.1", r));
    p.url = `http://127.0.0.1:${(p.server.address() as AddressInfo).port}`;
    return p;
  }

  /** Replaces the script. */
  answer(...handlers: Handler[]): this {
    this.script = handlers;
    this.requests.length = 0;
    return this;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }
}

/** A JSON answer. */
export function json(status: number, body: unknown, headers: Record<string, string> = {}): Handler {
  return (_req, res) => {
    res.writeHead(status, { "content-type": "application/json", ...headers });
    res.end(typeof body === "string" ? body : JSON.stringify(body));
  };
}

/** A chat completion as the OpenAI API returns it. */
export function chatCompletion(text: string) {
  return {
    id: "chatcmpl-1", object: "chat.completion", created: 1, model: "gpt-4o",
    choices: [{ index: 0, message: { role: "assistant", content: text }, finish_reason: "stop", logprobs: null }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  };
}

/** A message as the Anthropic API returns it. */
export function anthropicMessage(text: string) {
  return {
    id: "msg_1", type: "message", role: "assistant", model: "claude-sonnet-4", content: [{ type: "text", text }],
    stop_reason: "end_turn", stop_sequence: null, usage: { input_tokens: 1, output_tokens: 1 },
  };
}

/** A TCP proxy on a fixed loopback port that can be cut (refused) and restored. */
export class Proxy {
  private server: NetServer | undefined;
  private sockets = new Set<Socket>();
  port = 0;
  /** Every byte the clients sent through the proxy. */
  readonly sent: Buffer[] = [];

  constructor(private readonly target: number) {}

  get url(): string { return `http://127.0.0.1:${this.port}`; }

  async up(): Promise<void> {
    const server = createServer((down) => {
      const up = connect(this.target, "127.0.0.1");
      this.sockets.add(down).add(up);
      const drop = () => { down.destroy(); up.destroy(); this.sockets.delete(down); this.sockets.delete(up); };
      down.on("error", drop).on("close", drop);
      up.on("error", drop).on("close", drop);
      down.on("data", (b: Buffer) => this.sent.push(Buffer.from(b)));
      down.pipe(up).pipe(down);
    });
    await new Promise<void>((r) => server.listen(this.port, "127.0.0.1", r));
    this.port = (server.address() as AddressInfo).port;
    this.server = server;
  }

  /** Refuses new connections and drops the open ones. */
  async cut(): Promise<void> {
    const s = this.server;
    this.server = undefined;
    for (const x of this.sockets) x.destroy();
    this.sockets.clear();
    if (s) await new Promise<void>((r) => s.close(() => r()));
  }
}

/** A server that accepts connections and never answers (a hung cooldownd). */
export async function blackhole(): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const s = createServer((c) => { sockets.add(c); c.on("error", () => {}); });
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`,
    close: () => { for (const c of sockets) c.destroy(); return new Promise((r) => s.close(() => r())); },
  };
}

/**
 * A cooldownd in process whose Admit allows at revision rev, closed, and
 * whose Report (and each report of a ReportBatch) answers with what
 * answerReport says (closed at rev by default); down fails the unary
 * calls while the watch stream goes on.
 */
export class FakeCooldownd {
  admits = 0;
  /** Every report cooldownd got: the Reports and the reports of the ReportBatches it knew. */
  readonly reports: ReportRequest[] = [];
  /** The Report requests alone. */
  readonly singles: ReportRequest[] = [];
  /** Every ReportBatch request, one answered with an error included. */
  readonly batches: ReportBatchRequest[] = [];
  down = false;
  rev = 7n;
  answerReport: (req: ReportRequest) => { state?: WireState; revision?: bigint } = () => ({});
  /** The errors the next ReportBatches answer, in turn; then batchError (Unimplemented: a cooldownd without it). */
  batchScript: (ConnectError | undefined)[] = [];
  batchError: ConnectError | undefined;
  /** A ReportBatch answers one report fewer than it carries. */
  batchShort = false;
  /** WatchConnections answers it (an older cooldownd, a token that may not watch). */
  watchError: ConnectError | undefined;
  watches = 0;
  private events: ((m: WatchConnectionsResponse) => void) | undefined;

  transport() {
    return createRouterTransport(({ service }) => {
      service(CooldownService, {
        admit: (req) => {
          this.admits++;
          if (this.down) throw new ConnectError("state store unavailable", Code.Unavailable);
          return create(AdmitResponseSchema, {
            decision: Decision.Allow, candidateIndex: 0, revision: this.rev, state: WireState.CLOSED,
            candidates: req.candidates.slice(0, 1).map(() => create(CandidateDecisionSchema, { decision: Decision.Allow })),
          });
        },
        report: (req) => {
          this.reports.push(req);
          this.singles.push(req);
          if (this.down) throw new ConnectError("state store unavailable", Code.Unavailable);
          return this.answer(req);
        },
        reportBatch: (req) => {
          this.batches.push(req);
          const err = this.batchScript.length > 0 ? this.batchScript.shift() : this.batchError;
          if (err?.code === Code.Unimplemented) throw err;
          this.reports.push(...req.reports);
          if (err) throw err;
          if (this.down) throw new ConnectError("state store unavailable", Code.Unavailable);
          const answers = req.reports.map((r) => this.answer(r));
          return create(ReportBatchResponseSchema, { reports: this.batchShort ? answers.slice(1) : answers });
        },
        extendLease: () => { throw new ConnectError("no", Code.Unimplemented); },
        getConnection: () => { throw new ConnectError("no", Code.Unimplemented); },
        listConnections: () => { throw new ConnectError("no", Code.Unimplemented); },
        watchConnections: (_req, ctx) => this.watch(ctx.signal),
      });
    });
  }

  private answer(req: ReportRequest) {
    return create(ReportResponseSchema, { revision: this.rev, state: WireState.CLOSED, accepted: true, ...this.answerReport(req) });
  }

  /** Sends one event to the watch stream. */
  emit(m: WatchConnectionsResponse): void { this.events?.(m); }

  private async *watch(signal: AbortSignal): AsyncIterable<WatchConnectionsResponse> {
    this.watches++;
    if (this.watchError) throw this.watchError;
    const queue: WatchConnectionsResponse[] = [create(WatchConnectionsResponseSchema, {})]; // the heartbeat: live
    let wake: (() => void) | undefined;
    this.events = (m) => { queue.push(m); wake?.(); };
    signal.addEventListener("abort", () => wake?.(), { once: true });
    while (!signal.aborted) {
      while (queue.length > 0) yield queue.shift()!;
      await new Promise<void>((r) => { wake = r; });
    }
  }
}

/** A Go client process (tools/goclient) driven line by line. */
export class GoClient {
  private lines: AsyncIterator<string>;
  private constructor(private readonly proc: ChildProcessWithoutNullStreams) {
    this.lines = createInterface({ input: proc.stdout })[Symbol.asyncIterator]();
  }

  static start(bin: string, args: string[], credential: string): GoClient {
    const proc = spawn(bin, args, { env: { ...process.env, GOCLIENT_CREDENTIAL: credential } });
    proc.stderr.on("data", (b) => process.stderr.write(`goclient: ${b}`));
    return new GoClient(proc);
  }

  async send(cmd: Record<string, unknown>): Promise<Record<string, unknown>> {
    this.proc.stdin.write(JSON.stringify(cmd) + "\n");
    const { value, done } = await this.lines.next();
    if (done) throw new Error("goclient ended");
    return JSON.parse(value) as Record<string, unknown>;
  }

  stop(): Promise<void> {
    return new Promise((r) => {
      if (this.proc.exitCode !== null) return r();
      this.proc.once("exit", () => r());
      this.proc.stdin.end();
    });
  }
}
