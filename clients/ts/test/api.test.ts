// The public API (what src/index.ts exports) against its committed report,
// api/client.api.md (tools/api-report.mjs, API Extractor): a change to the
// surface fails here until the report is updated on purpose
// (`npm run api:update`, with a CHANGELOG.md entry).
import { test } from "node:test";
import assert from "node:assert/strict";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { tsRoot } from "./helpers.js";

interface ApiReportTool {
  apiReport(entry?: string): string;
  baseline(): string;
  differences(want: string, got: string): string;
}
const tool = (await import(pathToFileURL(join(tsRoot, "tools", "api-report.mjs")).href).catch((e: Error) => {
  throw new Error(`tools/api-report.mjs: ${e.message} (a node_modules older than package-lock.json? run npm ci in clients/ts)`);
})) as ApiReportTool;

/** The declarations tsc emitted for this run (npm test and make test-ts build them into build/src). */
const built = join(tsRoot, "build", "src");

test("the public entry's declarations match api/client.api.md", () => {
  const got = tool.apiReport(join(built, "index.d.ts"));
  const want = tool.baseline();
  assert.ok(got === want, `the public API differs from api/client.api.md:\n${tool.differences(want, got)}\n\n` +
    "If the change is meant: `cd clients/ts && npm run api:update`, commit api/client.api.md and add it to CHANGELOG.md.");
});

/** Edits of a copy of the emitted declarations; each must (or, a doc comment, must not) change the report. */
const edits: { name: string; file: string; from: string; to: string; changed: boolean | "error"; shows?: string }[] = [
  { name: "an export removed", file: "index.d.ts", from: "Client, allowed, ", to: "Client, ", changed: true, shows: "allowed" },
  { name: "an option's type changed", file: "options.d.ts", from: "maxRetries?: number;", to: "maxRetries?: string;", changed: true, shows: "maxRetries?: string" },
  { name: "an internal type reaching the public surface", file: "options.d.ts", from: "failMode?: FailMode;",
    to: "failMode?: import(\"./breaker.js\").Phase;", changed: "error", shows: "Phase" },
  { name: "a doc comment added (not an API change)", file: "options.d.ts", from: "backoffCapMs?: number;",
    to: "/** The backoff's cap. */\n    backoffCapMs?: number;", changed: false },
];

test("the check catches a changed surface, and only that", async (t) => {
  mkdirSync(join(tsRoot, "build"), { recursive: true });
  const dir = mkdtempSync(join(tsRoot, "build", "api-test-")); // inside clients/ts: the dependencies' types resolve
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const want = tool.baseline();
  for (const e of edits) {
    await t.test(e.name, () => {
      const copy = join(dir, e.name.replace(/\W+/g, "-"));
      cpSync(built, copy, { recursive: true, filter: (p) => !p.endsWith(".js") && !p.endsWith(".map") });
      const f = join(copy, e.file);
      const before = readFileSync(f, "utf8");
      const after = before.replace(e.from, e.to);
      assert.notEqual(after, before, `the edit applies to ${e.file}`);
      writeFileSync(f, after);
      if (e.changed === "error") {
        assert.throws(() => tool.apiReport(join(copy, "index.d.ts")), (err: Error) => err.message.includes("ae-forgotten-export") && err.message.includes(e.shows!));
        return;
      }
      const got = tool.apiReport(join(copy, "index.d.ts"));
      if (!e.changed) {
        assert.ok(got === want, tool.differences(want, got));
        return;
      }
      assert.notEqual(got, want);
      assert.ok(tool.differences(want, got).includes(e.shows!), tool.differences(want, got));
    });
  }
});
