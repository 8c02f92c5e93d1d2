// The package as a user gets it: the README's install steps (npm pack in a
// copy of the package, npm install of the tarball into a fresh Node project
// outside the repository), then the README's opening example, compiled
// against the installed declarations, runs against a real cooldownd and a
// fake OpenAI-compatible provider on loopback.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { CooldownService, Outcome as WireOutcome } from "../src/gen/v1/cooldown_pb.js";
import { fastPolicy, startServer, tsRoot, type Server } from "./helpers.js";
import { FakeProvider, chatCompletion, json } from "./fakes.js";

const run = promisify(execFile);
const readme = readFileSync(join(tsRoot, "README.md"), "utf8");
const manifest = JSON.parse(readFileSync(join(tsRoot, "package.json"), "utf8")) as {
  name: string; version: string; devDependencies: Record<string, string>;
};

/** The fenced blocks of a language in a Markdown text, in order. */
export function blocks(md: string, lang: string): string[] {
  return [...md.matchAll(new RegExp("^```" + lang + "\\n([\\s\\S]*?)^```$", "gm"))].map((m) => m[1]!);
}

/** The environment of the npm and node the test starts: the parent npm's own variables dropped (npm test sets them). */
function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (k.startsWith("npm_") && !["npm_config_cache", "npm_config_registry", "npm_config_userconfig"].includes(k)) continue;
    if (k.startsWith("COOLDOWND_") || k.startsWith("OPENAI_")) continue;
    env[k] = v;
  }
  return { ...env, npm_config_prefer_offline: "true", npm_config_audit: "false", npm_config_fund: "false", npm_config_update_notifier: "false", ...extra };
}

let dir: string;
let checkout: string;
let app: string;
let installLog = "";
let server: Server;
let provider: FakeProvider;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "cooldownd-pack-"));
  // A checkout of the package (what `npm pack` reads), outside the working tree so that the
  // build never touches clients/ts itself. Its node_modules is clients/ts's, which `npm ci` made
  // (make test-ts, .ci/run): the test leaves out the block's `npm ci`, which would cost 30 s of
  // CPU to install the same lockfile again.
  checkout = join(dir, "cooldownd");
  const pkg = join(checkout, "clients", "ts");
  mkdirSync(pkg, { recursive: true });
  for (const f of ["package.json", "package-lock.json", "README.md", "CHANGELOG.md", "tsconfig.json", "tsconfig.build.json"]) {
    cpSync(join(tsRoot, f), join(pkg, f));
  }
  cpSync(join(tsRoot, "src"), join(pkg, "src"), { recursive: true });
  symlinkSync(join(tsRoot, "node_modules"), join(pkg, "node_modules"), "dir");
  // A fresh TypeScript project: an ES module with Node's types, which the README's npm install
  // brings along with the tarball and openai (the compiler is clients/ts's own).
  app = join(dir, "app");
  mkdirSync(app);
  writeFileSync(join(app, "package.json"), JSON.stringify({
    name: "app", private: true, type: "module", devDependencies: { "@types/node": manifest.devDependencies["@types/node"] },
  }, null, 2));

  // The README's install block: $COOLDOWND is the checkout, /path/to/your/app the fresh project.
  const [install] = blocks(readme, "sh");
  assert.ok(install, "the README has an install block");
  assert.ok(install.includes(" && npm ci && npm pack"), "the block installs the lockfile, then packs");
  const script = install.replace(" && npm ci && npm pack", " && npm pack").replaceAll("/path/to/your/app", app);
  const [r, srv, prov] = await Promise.all([
    run("bash", ["-euo", "pipefail", "-c", script], { env: childEnv({ COOLDOWND: checkout }), maxBuffer: 64 << 20 }),
    startServer(fastPolicy), FakeProvider.start(),
  ]);
  installLog = r.stdout + r.stderr;
  server = srv;
  provider = prov;
});
after(async () => {
  await provider?.close();
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("npm pack makes the tarball the README installs, holding the build, the README and the CHANGELOG only", async () => {
  const tarball = `cooldownd-client-${manifest.version}.tgz`;
  assert.ok(readdirSync(join(checkout, "clients", "ts")).includes(tarball), `npm pack wrote ${tarball}:\n${installLog}`);
  assert.ok(blocks(readme, "sh")[0]!.includes(tarball), `the README's install block names ${tarball}`);
  const { stdout } = await run("tar", ["-tzf", join(checkout, "clients", "ts", tarball)]);
  const files = stdout.trim().split("\n").map((f) => f.replace(/^package\//, ""));
  for (const f of ["package.json", "README.md", "CHANGELOG.md", "dist/src/index.js", "dist/src/index.d.ts", "dist/src/gen/v1/cooldown_pb.js"]) {
    assert.ok(files.includes(f), `the tarball holds ${f}`);
  }
  assert.deepEqual(files.filter((f) => !f.startsWith("dist/src/") && !["package.json", "README.md", "CHANGELOG.md"].includes(f)), []);
  const installed = JSON.parse(readFileSync(join(app, "package.json"), "utf8")) as { dependencies: Record<string, string> };
  assert.match(installed.dependencies[manifest.name] ?? "", new RegExp(`^file:.*${tarball.replaceAll(".", "\\.")}$`));
});

test("the README's example compiles against the installed package and runs against cooldownd as pasted", async () => {
  const [example] = blocks(readme, "ts");
  assert.ok(example, "the README opens with a TypeScript example");
  assert.ok(readme.indexOf("```ts") < readme.indexOf("## "), "the example comes before the first section");
  assert.ok(example.trim().split("\n").length <= 12, "the example is about ten lines");
  writeFileSync(join(app, "example.ts"), example);
  writeFileSync(join(app, "tsconfig.json"), JSON.stringify({
    // skipLibCheck as most projects have it (checking openai's and Node's declarations costs 10 s of
    // CPU); the package's types are still resolved from its exports, or strict mode fails the import.
    compilerOptions: { module: "nodenext", target: "es2022", strict: true, types: ["node"], skipLibCheck: true }, files: ["example.ts"],
  }, null, 2));
  await run(process.execPath, [join(tsRoot, "node_modules", "typescript", "bin", "tsc"), "-p", app], { cwd: app })
    .catch((e: { stdout: string }) => assert.fail(`tsc on the README's example:\n${e.stdout}`));

  const key = `sk-pack-${process.pid}`;
  // A 429 first: the guard waits its retry-after-ms and retries; the SDK's own retries stay off.
  provider.answer(json(429, { error: { type: "requests", code: "rate_limit_exceeded" } }, { "retry-after-ms": "200" }),
    json(200, chatCompletion("hello from the fake provider")));
  const { stdout } = await run(process.execPath, ["example.js"], {
    cwd: app, timeout: 60_000,
    env: childEnv({ COOLDOWND_URL: server.url, OPENAI_API_KEY: key, OPENAI_BASE_URL: provider.url + "/v1" }),
  });
  assert.equal(stdout.trim(), "hello from the fake provider");
  assert.equal(provider.requests.length, 2, "the 429 was retried once");
  assert.deepEqual(provider.requests.map((q) => q.headers["x-stainless-retry-count"]), ["0", "0"], "by the guard, not by the SDK");
  assert.ok(provider.requests.every((q) => q.headers.authorization === `Bearer ${key}`));

  // cooldownd heard both outcomes of the example's connection, and never the key.
  const rpc = createClient(CooldownService, createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" }));
  const { connections } = await rpc.listConnections({});
  assert.equal(connections.length, 1, "the example's one connection");
  const c = connections[0]!;
  assert.match(c.connection?.label ?? "", /^openai gpt-4o-mini [0-9a-f]{8}…$/);
  assert.equal(c.lastOutcome, WireOutcome.SUCCESS);
  assert.equal(c.lastHttpStatus, 200);
  assert.ok(!server.logs().includes(key));
});

test("the package's entry points are its exports: the client, ./wire, and nothing deeper", async () => {
  const probe = async (code: string) =>
    (await run(process.execPath, ["--input-type=module", "-e", code], { cwd: app, env: childEnv() })).stdout.trim();
  assert.equal(await probe(`import * as m from "@cooldownd/client"; console.log(typeof m.Client, typeof m.State, typeof m.wire);`),
    "function undefined undefined");
  assert.equal(await probe(`import { CooldownService } from "@cooldownd/client/wire"; console.log(CooldownService.typeName);`),
    "cooldown.v1.CooldownService");
  assert.equal(await probe(`import("@cooldownd/client/dist/src/breaker.js").then(() => console.log("imported"), (e) => console.log(e.code));`),
    "ERR_PACKAGE_PATH_NOT_EXPORTED");
});
