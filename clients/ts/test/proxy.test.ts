// The openai npm package through cooldown-proxy (cmd/cooldown-proxy, built
// here): two proxy processes on one cooldownd, a fake OpenAI on loopback,
// the SDK's base URL at a proxy and its own retries off.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { goBinary, startServer, type Server } from "./helpers.js";
import { FakeProvider, chatCompletion } from "./fakes.js";

interface ProxyProc { url: string; proc: ChildProcess; logs(): string }

/** Starts the proxy on a free loopback port and waits for its listening line. Its admit
 * timeout is generous: on a loaded machine a 250 ms Admit would be decided in-process. */
async function startProxy(args: string[]): Promise<ProxyProc> {
  const bin = goBinary("./cmd/cooldown-proxy", "cooldown-proxy", "COOLDOWN_PROXY_BIN");
  const proc = spawn(bin, ["--listen", "127.0.0.1:0", "--log-format", "json", "--admit-timeout", "10s", ...args], { stdio: ["ignore", "pipe", "pipe"], env: { PATH: process.env.PATH ?? "" } });
  let out = "";
  proc.stdout!.on("data", (b) => { out += b; });
  const url = await new Promise<string>((resolve, reject) => {
    proc.stderr!.on("data", (b) => {
      out += b;
      for (const line of out.split("\n")) {
        try {
          const rec = JSON.parse(line) as { msg?: string; addr?: string };
          if (rec.msg === "cooldown-proxy listening" && rec.addr) resolve(`http://${rec.addr}`);
        } catch { /* a partial line */ }
      }
    });
    proc.once("exit", (code) => reject(new Error(`cooldown-proxy exited ${code}: ${out}`)));
  });
  return { url, proc, logs: () => out };
}

let server: Server;
let provider: FakeProvider;
let a: ProxyProc;
let b: ProxyProc;
let dir: string;
let release: () => void;
const released = new Promise<void>((r) => { release = r; });
const key = `sk-proxy-ts-${process.pid}`;

before(async () => {
  server = await startServer();
  provider = await FakeProvider.start();
  provider.answer((_req, res, body) => {
    const model = (JSON.parse(body || "{}") as { model?: string }).model;
    if (model === "limited" || model === "big") {
      res.writeHead(429, { "content-type": "application/json", "retry-after": "3600" });
      res.end(JSON.stringify({ error: { message: "Rate limit reached", type: "requests", param: null, code: "rate_limit_exceeded" } }));
      return;
    }
    if (model === "stream") {
      res.writeHead(200, { "content-type": "text/event-stream" });
      const chunk = (t: string) => `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model, choices: [{ index: 0, delta: { content: t }, finish_reason: null }] })}\n\n`;
      res.write(chunk("one"));
      // The second chunk only once the first went through the proxy.
      void released.then(() => { res.write(chunk("two")); res.end("data: [DONE]\n\n"); });
      return;
    }
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ ...chatCompletion("hi"), model }));
  });
  dir = mkdtempSync(join(tmpdir(), "cooldown-proxy-ts-"));
  writeFileSync(join(dir, "fallbacks.yaml"), "big:\n  - model: small\n");
  const args = ["--cooldownd", server.url, "--route", `/openai=${provider.url}`, "--fallback-file", join(dir, "fallbacks.yaml")];
  a = await startProxy(args);
  b = await startProxy([...args, "--mirror"]);
});
after(async () => {
  for (const p of [a, b]) p?.proc.kill("SIGKILL");
  await provider.close();
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

const sdk = (p: ProxyProc) => new OpenAI({ apiKey: key, baseURL: p.url + "/openai/v1", maxRetries: 0 });
const models = () => provider.requests.map((r) => (JSON.parse(r.body || "{}") as { model?: string }).model);

test("a 429 seen through one proxy is denied by the other, in OpenAI's shape, without reaching the provider", async () => {
  const messages = [{ role: "user" as const, content: "x" }];
  await assert.rejects(sdk(a).chat.completions.create({ model: "limited", messages }), (e: unknown) => {
    assert.ok(e instanceof OpenAI.RateLimitError);
    assert.equal(e.code, "rate_limit_exceeded", "the provider's own answer");
    return true;
  });
  assert.deepEqual(models(), ["limited"]);
  await assert.rejects(sdk(b).chat.completions.create({ model: "limited", messages }), (e: unknown) => {
    assert.ok(e instanceof OpenAI.RateLimitError);
    assert.equal(e.code, "cooldownd_cooldown");
    assert.match(e.message, /cooldown/);
    assert.equal(e.headers.get("cooldownd-reason"), "cooldown");
    assert.equal(e.headers.get("x-should-retry"), "false");
    assert.ok(Math.abs(Number(e.headers.get("retry-after")) - 3600) <= 60, `retry-after ${e.headers.get("retry-after")}`);
    return true;
  });
  assert.deepEqual(models(), ["limited"], "the second proxy did not reach the provider");
  assert.equal(provider.requests[0]!.headers.authorization, `Bearer ${key}`, "the key passed through untouched");
});

test("a stream arrives chunk by chunk", async () => {
  const stream = await sdk(b).chat.completions.create({ model: "stream", messages: [{ role: "user", content: "x" }], stream: true });
  const seen: string[] = [];
  for await (const ev of stream) {
    seen.push(ev.choices[0]?.delta.content ?? "");
    if (seen.length === 1) release(); // the provider holds "two" until now
  }
  assert.deepEqual(seen, ["one", "two"]);
});

test("a fallback rewrites the model", async () => {
  const before = provider.requests.length;
  const r = await sdk(a).chat.completions.create({ model: "big", messages: [{ role: "user", content: "x" }] });
  assert.equal(r.model, "small");
  assert.deepEqual(models().slice(before), ["big", "small"]);
  for (const p of [a, b]) assert.ok(!p.logs().includes(key), "no key in the proxy's log");
  assert.ok(!server.logs().includes(key), "no key in cooldownd's log");
});
