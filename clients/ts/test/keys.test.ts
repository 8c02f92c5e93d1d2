import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { deriveId, idHex, normalizeEndpoint, InvalidConnectionError } from "../src/keys.js";
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
