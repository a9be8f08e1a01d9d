// Content hashes and idempotency keys, byte for byte the same as package
// relay in Go (relay/idemkey.go): netstrings over UTF-8, file paths sorted by
// their UTF-8 bytes. The app recomputes the hash of every apps.install and
// shows the owner the hash it approves.
import { createHash } from "node:crypto";

/** A file set: path to content, both taken as UTF-8 exactly as given (no normalization). */
export type Files = Record<string, string> | Map<string, string>;

function entries(files: Files): Array<[Buffer, Buffer]> {
  const list = files instanceof Map ? [...files.entries()] : Object.entries(files);
  const out = list.map(([p, c]): [Buffer, Buffer] => [Buffer.from(p, "utf8"), Buffer.from(c, "utf8")]);
  // Byte order of the UTF-8, as Go's sort.Strings: JavaScript's default
  // sort compares UTF-16 code units, which differs above U+FFFF.
  out.sort((a, b) => Buffer.compare(a[0], b[0]));
  return out;
}

function netstring(parts: Buffer[], s: string | Buffer): void {
  const b = typeof s === "string" ? Buffer.from(s, "utf8") : s;
  parts.push(Buffer.from(`${b.length}:`, "ascii"), b, Buffer.from(",", "ascii"));
}

function appendFiles(parts: Buffer[], files: Files): void {
  const list = entries(files);
  netstring(parts, String(list.length));
  for (const [p, c] of list) {
    netstring(parts, p);
    netstring(parts, c);
  }
}

/** The paths of a file set in the order the encoding uses (UTF-8 byte order). */
export function sortedPaths(files: Files): string[] {
  return entries(files).map(([p]) => p.toString("utf8"));
}

/** content(F): the bytes contentHash hashes. */
export function canonicalContent(files: Files): Buffer {
  const parts: Buffer[] = [];
  netstring(parts, "roomrelay-files-v1");
  appendFiles(parts, files);
  return Buffer.concat(parts);
}

/** snippet(room, name, F): the bytes snippetKey hashes. */
export function canonicalSnippet(roomId: string, name: string, files: Files): Buffer {
  const parts: Buffer[] = [];
  netstring(parts, "roomrelay-snippet-v1");
  netstring(parts, roomId);
  netstring(parts, name);
  appendFiles(parts, files);
  return Buffer.concat(parts);
}

function sha256hex(b: Buffer): string {
  return createHash("sha256").update(b).digest("hex");
}

/** The content hash an approval is bound to: lowercase hex SHA-256 of content(files), as relay.ContentHash. */
export function contentHash(files: Files): string {
  return sha256hex(canonicalContent(files));
}

/** relay.SnippetKey: "snip-" + the first 32 hex digits of SHA-256(snippet(room, name, files)). */
export function snippetKey(roomId: string, name: string, files: Files): string {
  return "snip-" + sha256hex(canonicalSnippet(roomId, name, files)).slice(0, 32);
}

/** relay.RepoKey: "repo-" + the first 32 hex digits of SHA-256(repo(room, name, repository, version)). */
export function repoKey(roomId: string, name: string, repositoryId: string, versionId: string): string {
  const parts: Buffer[] = [];
  netstring(parts, "roomrelay-repo-v1");
  for (const s of [roomId, name, repositoryId, versionId]) netstring(parts, s);
  return "repo-" + sha256hex(Buffer.concat(parts)).slice(0, 32);
}
