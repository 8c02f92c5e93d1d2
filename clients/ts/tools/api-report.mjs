// The API report of @cooldownd/client (api/client.api.md): what the public
// entry (src/index.ts) exports, as API Extractor reads it from the emitted
// declarations. `check` fails when the built declarations (dist/src) differ
// from the committed report; `update` rewrites the report, on purpose, with
// an entry in CHANGELOG.md. test/api.test.ts runs the same comparison in
// `npm test` and `make test-ts`.
//
//   node tools/api-report.mjs check|update [entry.d.ts]
//
// The report is API Extractor's, less its "(undocumented)" marks: a doc
// comment added to a member is not an API change.

import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Extractor, ExtractorConfig } from "@microsoft/api-extractor";

const root = fileURLToPath(new URL("..", import.meta.url));
/** The committed baseline. */
export const baselinePath = join(root, "api", "client.api.md");
const configPath = join(root, "api", "api-extractor.json");

/** Drops the report's "(undocumented)" marks (a doc comment is not an API change). */
export function normalize(report) {
  return report
    .replace(/\r\n/g, "\n")
    .split("\n")
    .filter((l) => !/^\s*\/\/ \(undocumented\)$/.test(l))
    .map((l) => l.replace(/^(\s*\/\/ @\w+) \(undocumented\)$/, "$1"))
    .join("\n");
}

/**
 * The normalized API report of the declarations at entry (an index.d.ts
 * beside the other emitted .d.ts files, inside clients/ts so that the
 * dependencies' types resolve). Throws on an extractor or compiler error.
 */
export function apiReport(entry = join(root, "dist", "src", "index.d.ts")) {
  const out = mkdtempSync(join(root, "build", "api-report-"));
  try {
    const configObject = ExtractorConfig.loadFile(configPath);
    configObject.mainEntryPointFilePath = resolve(entry);
    configObject.apiReport = { ...configObject.apiReport, reportFolder: out, reportTempFolder: out };
    const config = ExtractorConfig.prepare({
      configObject, configObjectFullPath: configPath, packageJsonFullPath: join(root, "package.json"),
    });
    const problems = [];
    const result = Extractor.invoke(config, {
      localBuild: true, // write the report to out (a temp dir), never to api/
      messageCallback: (m) => {
        if (m.logLevel === "error" || m.logLevel === "warning") problems.push(m.formatMessageWithLocation(root));
        m.handled = true;
      },
    });
    if (!result.succeeded || problems.length > 0) {
      throw new Error(`api-extractor: ${result.errorCount} errors, ${result.warningCount} warnings:\n${problems.join("\n")}`);
    }
    return normalize(readFileSync(join(out, "client.api.md"), "utf8"));
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}

/** The committed baseline's text. */
export function baseline() {
  return readFileSync(baselinePath, "utf8");
}

/** The lines of got that differ from want, as a short unified-style listing. */
export function differences(want, got, max = 40) {
  const a = want.split("\n");
  const b = got.split("\n");
  const inA = new Set(a);
  const inB = new Set(b);
  const lines = [...a.filter((l) => !inB.has(l)).map((l) => "- " + l), ...b.filter((l) => !inA.has(l)).map((l) => "+ " + l)];
  return lines.slice(0, max).join("\n") + (lines.length > max ? `\n… ${lines.length - max} more` : "");
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const [mode, entry] = process.argv.slice(2);
  mkdirSync(join(root, "build"), { recursive: true });
  const got = apiReport(entry);
  if (mode === "update") {
    writeFileSync(baselinePath, got);
    console.log(`wrote ${baselinePath}: review it with git diff and say the change in CHANGELOG.md`);
  } else if (mode === "check") {
    if (got !== baseline()) {
      console.error(`The public API differs from api/client.api.md:\n${differences(baseline(), got)}\n\n` +
        "If the change is meant, run `npm run api:update`, commit api/client.api.md and add the change to CHANGELOG.md " +
        "(a removed or changed export is a major version).");
      process.exit(1);
    }
    console.log("the public API matches api/client.api.md");
  } else {
    console.error("usage: node tools/api-report.mjs check|update [entry.d.ts]");
    process.exit(2);
  }
}
