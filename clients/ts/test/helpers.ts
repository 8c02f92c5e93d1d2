// Shared test helpers: repository paths, the Go tools, a real cooldownd.

import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { join } from "node:path";

/** The repository root (tests run from clients/ts/build/test). */
export const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));
export const tsRoot = join(repoRoot, "clients", "ts");
const binDir = join(tsRoot, "build", "bin");

/** Builds a Go main package of the repository once per test process and returns the binary. */
export function goBinary(pkg: string, name: string, envVar?: string): string {
  if (envVar && process.env[envVar]) return process.env[envVar]!;
  mkdirSync(binDir, { recursive: true });
  const out = join(binDir, name);
  if (!built.has(out)) {
    execFileSync("go", ["build", "-o", out, pkg], { cwd: repoRoot, stdio: ["ignore", "inherit", "inherit"] });
    built.add(out);
  }
  if (!existsSync(out)) throw new Error(`go build of ${pkg} produced nothing`);
  return out;
}
const built = new Set<string>();

/** A free loopback port. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

/** A cooldownd process started by a test. */
export interface Server {
  url: string;
  port: number;
  proc: ChildProcess;
  stop(): Promise<void>;
  logs(): string;
}

/** The sub-second policy the e2e tests run the server with. */
export const fastPolicy = [
  "--open-base", "300ms", "--open-max", "2s", "--jitter", "0", "--lease-ttl", "3s", "--rate-limit-cooldown", "400ms",
  "--overload-floor", "500ms", "--quota-block", "5s", "--auth-block", "5s", "--consecutive-failures", "2",
  // Generous Redis bounds: a loaded test machine must not turn answers into unavailable ones.
  "--redis-timeout", "1s",
];

/** Starts cooldownd (embedded Redis) on a free loopback port and waits for /healthz. */
export async function startServer(extra: string[] = [], port?: number): Promise<Server> {
  const bin = goBinary("./cmd/cooldownd", "cooldownd", "COOLDOWND_BIN");
  port ??= await freePort();
  let out = "";
  const proc = spawn(bin, ["--addr", `127.0.0.1:${port}`, "--log-level", "warn", ...extra], { stdio: ["ignore", "pipe", "pipe"] });
  proc.stdout!.on("data", (b) => { out += b; });
  proc.stderr!.on("data", (b) => { out += b; });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`cooldownd exited ${proc.exitCode}: ${out}`);
    try {
      const r = await fetch(url + "/healthz");
      if (r.ok) break;
    } catch { /* not yet */ }
    if (Date.now() > deadline) {
      proc.kill("SIGKILL");
      throw new Error("cooldownd did not become healthy: " + out);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url, port, proc, logs: () => out,
    stop: () => new Promise<void>((resolve) => {
      if (proc.exitCode !== null) return resolve();
      proc.once("exit", () => resolve());
      proc.kill("SIGTERM");
      setTimeout(() => proc.kill("SIGKILL"), 3000).unref();
    }),
  };
}
