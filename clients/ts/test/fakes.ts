// A scripted fake LLM provider and a loopback TCP proxy that can be cut,
// for the guard and degradation tests. Loopback only.

import { createServer as createHttpServer, type IncomingMessage, type ServerResponse, type Server as HttpServer } from "node:http";
import { createServer, connect, type Server as NetServer, type Socket, type AddressInfo } from "node:net";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { createInterface } from "node:readline";

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
