// Hash parity with Go: relay/testdata/contenthash.golden.json is written and
// checked by Go (relay.TestContentHashGolden); idemkey.golden.json comes from
// an independent Python reference checked by Go too.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";
import { canonicalSnippet, contentHash, repoKey, snippetKey, sortedPaths } from "../src/hash.js";

// dist/test/hash.test.js -> the repository's relay/testdata
const testdata = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..", "relay", "testdata");

interface Vector { name: string; files: Record<string, string>; sorted_paths: string[]; content_hash: string }

test("contentHash equals relay.ContentHash on the Go corpus", () => {
  const g = JSON.parse(readFileSync(path.join(testdata, "contenthash.golden.json"), "utf8")) as { vectors: Vector[] };
  assert.ok(g.vectors.length >= 10, "the corpus has its vectors");
  for (const v of g.vectors) {
    assert.deepEqual(sortedPaths(v.files), v.sorted_paths, `${v.name}: path order`);
    assert.equal(contentHash(v.files), v.content_hash, `${v.name}: content hash`);
    assert.equal(contentHash(new Map(Object.entries(v.files))), v.content_hash, `${v.name}: content hash of a Map`);
  }
});

test("the corpus holds a case JavaScript's default sort gets wrong, and NFC beside NFD", () => {
  const g = JSON.parse(readFileSync(path.join(testdata, "contenthash.golden.json"), "utf8")) as { vectors: Vector[] };
  assert.ok(g.vectors.some((v) => JSON.stringify(Object.keys(v.files).sort()) !== JSON.stringify(v.sorted_paths)));
  const nfc = "src/caf\u00e9.ts";
  assert.ok(g.vectors.some((v) => nfc in v.files && nfc.normalize("NFD") in v.files));
  // Normalizing would merge the two names: the hash must take them as given.
  const both = g.vectors.find((v) => nfc in v.files && nfc.normalize("NFD") in v.files)!;
  const normalized: Record<string, string> = {};
  for (const [p, c] of Object.entries(both.files)) normalized[p.normalize("NFC")] = c;
  assert.notEqual(contentHash(normalized), both.content_hash);
});

test("snippetKey, repoKey and the canonical encoding equal the reference vectors", () => {
  const g = JSON.parse(readFileSync(path.join(testdata, "idemkey.golden.json"), "utf8")) as {
    snippets: Array<{ room_id: string; name: string; files: Record<string, string>; canonical: string; key: string; content_hash: string }>;
    repos: Array<{ room_id: string; name: string; repository_id: string; version_id: string; key: string }>;
  };
  for (const [i, v] of g.snippets.entries()) {
    assert.equal(canonicalSnippet(v.room_id, v.name, v.files).toString("utf8"), v.canonical, `snippet ${i}: canonical`);
    assert.equal(snippetKey(v.room_id, v.name, v.files), v.key, `snippet ${i}: key`);
    assert.equal(contentHash(v.files), v.content_hash, `snippet ${i}: content hash`);
  }
  for (const [i, v] of g.repos.entries()) {
    assert.equal(repoKey(v.room_id, v.name, v.repository_id, v.version_id), v.key, `repo ${i}: key`);
  }
});
