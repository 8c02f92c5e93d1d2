// The fetch wrapper guarding real SDKs (openai, @anthropic-ai/sdk) against
// a fake provider on loopback, with the SDKs' own retries set to 0.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { Client } from "../src/client.js";
import { DenyReason } from "../src/breaker.js";
import { DeniedError } from "../src/errors.js";
import { silentLogger } from "../src/log.js";
import { fastPolicy, startServer, type Server } from "./helpers.js";
import { FakeProvider, Proxy, anthropicMessage, chatCompletion, json } from "./fakes.js";

let server: Server;
let provider: FakeProvider;
let cd: Client;

before(async () => {
  server = await startServer(fastPolicy);
  provider = await FakeProvider.start();
  cd = new Client(server.url, { logger: silentLogger, backoffBaseMs: 20, admitTimeoutMs: 2000 });
});
after(async () => {
  await cd.close();
  await provider.close();
  await server.stop();
});

/** The cause chain of an SDK error, for the DeniedError the fetch rejected with. */
function causes(e: unknown): unknown[] {
  const out: unknown[] = [];
  for (let x = e; x && out.length < 10; x = (x as { cause?: unknown }).cause) out.push(x);
  return out;
}

test("openai: a 429 is retried by the guard (not the SDK), the POST body replayed, the answer parsed", async () => {
  const key = `sk-openai-${process.pid}`;
  const conn = cd.connection({ provider: "openai", endpoint: provider.url + "/v1", credential: key, scope: "gpt-4o" });
  const oa = new OpenAI({ apiKey: key, baseURL: provider.url + "/v1", fetch: cd.fetch(conn), maxRetries: 0 });
  provider.answer(json(429, { error: { type: "requests", code: "rate_limit_exceeded" } }, { "retry-after-ms": "300" }), json(200, chatCompletion("hi")));
  const r = await oa.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "hello" }] });
  assert.equal(r.choices[0]!.message.content, "hi");
  assert.equal(provider.requests.length, 2);
  assert.deepEqual(provider.requests.map((q) => JSON.parse(q.body).messages[0].content), ["hello", "hello"]);
  assert.equal(provider.requests[0]!.headers["x-stainless-retry-count"], "0");
  // cooldownd never saw the key: only the id and label.
  assert.ok(!conn.label.includes(key));
});

test("openai: a final error response reaches the SDK as its usual error; the next call is denied for everyone", async () => {
  const key = `sk-openai-auth-${process.pid}`;
  const conn = cd.connection({ provider: "openai", endpoint: provider.url + "/v1", credential: key });
  const oa = new OpenAI({ apiKey: key, baseURL: provider.url + "/v1", fetch: cd.fetch(conn), maxRetries: 0 });
  provider.answer(json(401, { error: { type: "invalid_request_error", code: "invalid_api_key", message: "Incorrect API key" } }));
  await assert.rejects(oa.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] }),
    (e: unknown) => e instanceof OpenAI.AuthenticationError && e.status === 401 && e.code === "invalid_api_key");
  // The auth block is shared: a second SDK client (another process) is denied without calling the provider.
  const other = new Client(server.url, { logger: silentLogger, noWait: true, admitTimeoutMs: 2000 });
  const oa2 = new OpenAI({ apiKey: key, baseURL: provider.url + "/v1", fetch: other.fetch(other.connection({ provider: "openai", endpoint: provider.url + "/v1", credential: key })), maxRetries: 0 });
  await assert.rejects(oa2.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] }),
    (e: unknown) => causes(e).some((c) => c instanceof DeniedError && c.reason === DenyReason.Auth));
  assert.equal(provider.requests.length, 1);
  await other.close();
});

test("openai: the SDK's abort reaches the provider call and is not retried", async () => {
  const key = `sk-openai-abort-${process.pid}`;
  const conn = cd.connection({ provider: "openai", endpoint: provider.url + "/v1", credential: key });
  const oa = new OpenAI({ apiKey: key, baseURL: provider.url + "/v1", fetch: cd.fetch(conn), maxRetries: 0 });
  const ctl = new AbortController();
  // The caller aborts once the provider has the request (not on a timer: a loaded machine's
  // Admit can take longer than any fixed delay, and then nothing reaches the provider).
  provider.answer((_q, res) => { ctl.abort(); setTimeout(() => res.writeHead(200).end("{}"), 3000); });
  await assert.rejects(oa.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] }, { signal: ctl.signal }),
    (e: unknown) => e instanceof OpenAI.APIUserAbortError);
  assert.equal(provider.requests.length, 1);
});

test("openai: a stream is returned at its headers and never replayed", async () => {
  const key = `sk-openai-stream-${process.pid}`;
  const conn = cd.connection({ provider: "openai", endpoint: provider.url + "/v1", credential: key });
  const oa = new OpenAI({ apiKey: key, baseURL: provider.url + "/v1", fetch: cd.fetch(conn), maxRetries: 0 });
  provider.answer((_q, res) => {
    res.writeHead(200, { "content-type": "text/event-stream" });
    const chunk = (t: string) => `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "gpt-4o", choices: [{ index: 0, delta: { content: t }, finish_reason: null }] })}\n\n`;
    res.write(chunk("a"));
    setTimeout(() => { res.write(chunk("b")); res.end("data: [DONE]\n\n"); }, 50);
  });
  const stream = await oa.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "x" }], stream: true });
  let text = "";
  for await (const ev of stream) text += ev.choices[0]?.delta.content ?? "";
  assert.equal(text, "ab");
  assert.equal(provider.requests.length, 1);
});

test("anthropic: a 529 overloaded is retried by the guard after the floor; the message parsed", async () => {
  const key = `sk-ant-${process.pid}`;
  const sleeps: number[] = [];
  const guard = new Client(server.url, { logger: silentLogger, admitTimeoutMs: 2000, sleep: async (ms) => { sleeps.push(ms); await new Promise((r) => setTimeout(r, Math.min(ms, 600))); } });
  const conn = guard.connection({ provider: "anthropic", endpoint: provider.url, credential: key, scope: "claude-sonnet-4" });
  const an = new Anthropic({ apiKey: key, baseURL: provider.url, fetch: guard.fetch(conn), maxRetries: 0 });
  provider.answer(json(529, { type: "error", error: { type: "overloaded_error", message: "Overloaded" } }), json(200, anthropicMessage("hello")));
  const m = await an.messages.create({ model: "claude-sonnet-4", max_tokens: 16, messages: [{ role: "user", content: "hi" }] });
  assert.equal((m.content[0] as { text: string }).text, "hello");
  assert.equal(provider.requests.length, 2);
  assert.ok(sleeps.some((s) => s >= 5000), `the overload floor: ${sleeps}`);
  await guard.close();
});

test("no credential or prompt ever reaches cooldownd, on any path", async () => {
  // Every byte the client sends to cooldownd goes through a recording proxy:
  // admits, reports, the queue after a cut, local outcomes, refusals.
  const proxy = new Proxy(server.port);
  await proxy.up();
  const key = "sk-canary-" + "7".repeat(40);
  const prompt = "CANARY PROMPT " + process.pid;
  const c = new Client(proxy.url, { logger: silentLogger, admitTimeoutMs: 2000, backoffBaseMs: 10, maxWaitMs: 1000 });
  const conn = c.connection({ provider: "openai", endpoint: provider.url + "/v1", credential: key, scope: "gpt-4o" });
  const oa = new OpenAI({ apiKey: key, baseURL: provider.url + "/v1", fetch: c.fetch(conn), maxRetries: 0 });
  const ask = () => oa.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: prompt }] });
  provider.answer(json(429, { error: { code: "rate_limit_exceeded", message: prompt } }, { "retry-after-ms": "50" }), json(200, chatCompletion(prompt)),
    json(200, chatCompletion(prompt), { "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "100ms" }),
    json(401, { error: { code: "invalid_api_key", message: `Incorrect API key provided: ${key}` } }));
  await ask();
  await ask();
  await assert.rejects(ask());
  await proxy.cut(); // then the report queue and local outcomes
  await assert.rejects(ask());
  await proxy.up();
  await c.flush({ signal: AbortSignal.timeout(5000) });
  await c.close();
  await proxy.cut();
  const sent = Buffer.concat(proxy.sent);
  assert.ok(sent.length > 500, `only ${sent.length} bytes recorded`);
  for (const secret of [key, key.slice(3, 23), prompt, Buffer.from(key).toString("base64").slice(0, 20)]) {
    assert.equal(sent.indexOf(secret), -1, `cooldownd received ${JSON.stringify(secret)}`);
  }
  assert.ok(provider.requests.length >= 4);
});

test("fetch wrapper: a Request is cloned per attempt; a stream body is sent once and its final error returned as a response", async () => {
  const key = `sk-fetch-${process.pid}`;
  const f = cd.fetch(cd.connection({ provider: "openai", endpoint: provider.url, credential: key }));
  provider.answer(json(500, {}), json(200, { ok: 1 }));
  const r = await f(new Request(provider.url + "/a", { method: "POST", body: "payload" }));
  assert.equal(r.status, 200);
  assert.deepEqual(provider.requests.map((q) => q.body), ["payload", "payload"]);

  const f2 = cd.fetch(cd.connection({ provider: "openai", endpoint: provider.url, credential: key + "-2" }));
  provider.answer(json(500, { error: { type: "server_error" } }), json(200, {}));
  const body = new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode("streamed")); c.close(); } });
  const r2 = await f2(provider.url + "/b", { method: "POST", body, duplex: "half" } as RequestInit);
  assert.equal(r2.status, 500, "not retried: the body cannot be sent again");
  assert.equal(((await r2.json()) as { error: { type: string } }).error.type, "server_error", "the error body is readable");
  assert.equal(provider.requests.length, 1);
});
