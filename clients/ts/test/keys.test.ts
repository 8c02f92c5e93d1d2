import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { deriveId, idHex, normalizeEndpoint, InvalidConnectionError } from "../src/keys.js";
import { execFileSync } from "node:child_process";
import { repoRoot } from "./helpers.js";

interface Vector {
  name: string; provider: string; endpoint: string; credential: string; scope: string; salt_hex: string;
  normalized_endpoint: string; id_hex: string;
}

// The Go implementation's own vectors file, read where it lives (not a copy).
const vectors: Vector[] = JSON.parse(readFileSync(join(repoRoot, "internal/keys/testdata/vectors.json"), "utf8"));

test("keys: every vector of internal/keys/testdata/vectors.json", () => {
  assert.ok(vectors.length >= 15, `only ${vectors.length} vectors`);
  for (const v of vectors) {
    assert.equal(normalizeEndpoint(v.endpoint), v.normalized_endpoint, v.name);
    const id = deriveId(Buffer.from(v.salt_hex, "hex"), { provider: v.provider, endpoint: v.endpoint, credential: v.credential, scope: v.scope });
    assert.equal(idHex(id), v.id_hex, v.name);
  }
});

test("keys: normalisation cases of docs/keys.md and internal/keys", () => {
  const ok: [string, string][] = [
    ["https://api.openai.com/v1///", "https://api.openai.com/v1"],
    ["HTTPS://API.OpenAI.COM/v1", "https://api.openai.com/v1"],
    ["https://h/V1/Chat", "https://h/V1/Chat"],
    ["http://localhost:80", "http://localhost"],
    ["https://h:80", "https://h:80"],
    ["http://h:08080", "http://h:8080"],
    ["https://h:/v1", "https://h/v1"],
    ["https://h/v1/#", "https://h/v1"],
    [" \thttps://h/v1\r\n", "https://h/v1"],
    ["http://[::1]:8080/", "http://[::1]:8080"],
    ["https://[2001:0DB8:0:0::1]:443/v1", "https://[2001:db8::1]/v1"],
    ["http://[::ffff:1.2.3.4]/", "http://[::ffff:1.2.3.4]"],
    ["https://h/a%2fb/%e2%82%ac", "https://h/a%2Fb/%E2%82%AC"],
    ["https://h/a:b@c!$&'()*+,;=~", "https://h/a:b@c!$&'()*+,;=~"],
    ["http://my_llm.internal", "http://my_llm.internal"],
    ["https://h/v1.0/..x", "https://h/v1.0/..x"],
    ["https://h//v1", "https://h//v1"],
  ];
  for (const [inp, want] of ok) {
    assert.equal(normalizeEndpoint(inp), want, inp);
    assert.equal(normalizeEndpoint(want), want, "idempotent: " + want);
  }
  const bad = ["", " \t ", "https://h/" + "a".repeat(2048), "api.openai.com/v1", "ftp://h/v1", "https:h", "https:///v1",
    "https://user:sk-secret@h/v1", "https://@h/v1", "https://h/v1?key=sk-secret", "https://h/v1?", "https://bücher.example/v1",
    "https://%C3%BC.example", "http://[fe80::1%25en0]/", "http://[127.0.0.1]/", "http://h:0", "http://h:65536",
    "http://h:99999999999999999999999", "https://h/a b", "https://h/a%zz", "https://h/a%2", "https://h/a[b]", "https://h/v1/./x",
    "https://h/v1/..", "https://h/v1/%2e%2E/x", "https://h/v1\x00"];
  for (const inp of bad) {
    assert.throws(() => normalizeEndpoint(inp), (e: unknown) => {
      assert.ok(e instanceof InvalidConnectionError);
      if (inp.length >= 4) assert.ok(!e.message.includes(inp), "the error quotes the input");
      assert.ok(!e.message.includes("secret"));
      return true;
    }, JSON.stringify(inp));
  }
});

test("keys: invalid inputs are errors that never hold the credential", () => {
  const base = { provider: "openai", endpoint: "https://api.openai.com/v1", credential: "sk-very-secret" };
  for (const c of [{ ...base, provider: "Open AI" }, { ...base, credential: "" }, { ...base, scope: "x".repeat(257) },
    { ...base, endpoint: "https://sk-very-secret@h" }]) {
    assert.throws(() => deriveId(new Uint8Array(), c), (e: Error) => !e.message.includes("sk-very-secret"));
  }
  assert.throws(() => deriveId(new Uint8Array(5), base), /salt/);
  // ab|c and a|bc differ: the fields are length-prefixed.
  const a = idHex(deriveId(new Uint8Array(), { ...base, credential: "ab", scope: "c" }));
  const b = idHex(deriveId(new Uint8Array(), { ...base, credential: "a", scope: "bc" }));
  assert.notEqual(a, b);
});

test("keys: endpoint normalisation equals internal/keys on thousands of mutated endpoints", () => {
  const seeds = [...new Set([...vectors.map((v) => v.endpoint), "https://api.openai.com/v1/", "HTTPS://API.OpenAI.COM:443/v1#x",
    "http://[0:0:0:0::1]:8080/v1/", "http://[::ffff:1.2.3.4]/", "https://h:/v1", "http://h:08080", "https://h/a%2fb/%e2%82%ac",
    "https://h/a:b@c!$&'()*+,;=~", "http://my_llm.internal", "https://h/v1/%2e%2E/x", "https://u:p@h/v1", "https://h/v1?x",
    "http://[fe80::1%25en0]/", "https://[2001:db8::1]:443/v1", "http://127.0.0.1:11434"])];
  const alphabet = [..."abcXYZ019:/?#[]@%.-_~!$&'()*+,;=<>\"{}|\\^` \tü€", "%2e", "%2E", "%zz", "%4", "::", "//", "[", "]", ":0", ":65535", ":65536", "\x00", "\x7f"];
  let seed = 42; // mulberry32: deterministic inputs
  const rand = (n: number) => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
  };
  const inputs: string[] = [...seeds];
  for (let i = 0; i < 20000; i++) {
    let s = seeds[rand(seeds.length)]!;
    for (let k = 1 + rand(3); k > 0; k--) {
      const at = rand(s.length + 1);
      const piece = alphabet[rand(alphabet.length)]!;
      switch (rand(3)) {
        case 0: s = s.slice(0, at) + piece + s.slice(at); break; // insert
        case 1: s = s.slice(0, at) + piece + s.slice(at + 1); break; // replace
        default: s = s.slice(0, at) + s.slice(at + 1 + rand(3)); // delete
      }
    }
    inputs.push(s);
  }
  const out = execFileSync("go", ["run", "./clients/ts/tools/keystrace"], { cwd: repoRoot, input: JSON.stringify(inputs), maxBuffer: 1 << 28, encoding: "utf8" });
  const want: { ok: boolean; out: string }[] = JSON.parse(out);
  assert.equal(want.length, inputs.length);
  const diffs: string[] = [];
  let accepted = 0;
  inputs.forEach((inp, i) => {
    let got: { ok: boolean; out: string };
    try {
      got = { ok: true, out: normalizeEndpoint(inp) };
    } catch {
      got = { ok: false, out: "" };
    }
    if (want[i]!.ok) accepted++;
    if (got.ok !== want[i]!.ok || got.out !== want[i]!.out) diffs.push(`${JSON.stringify(inp)}: go ${JSON.stringify(want[i])} ts ${JSON.stringify(got)}`);
  });
  assert.deepEqual(diffs.slice(0, 20), [], `${diffs.length} of ${inputs.length} differ`);
  assert.ok(accepted > inputs.length / 10 && accepted < inputs.length, `accepted ${accepted} of ${inputs.length}`);
  console.log(`endpoint differential: ${inputs.length} inputs, ${accepted} accepted by Go, all equal`);
});
