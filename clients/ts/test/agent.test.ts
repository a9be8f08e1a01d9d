// The client against a REAL agent: e2e/tsclient_test.go builds roomrelay,
// starts a hub and `roomrelay run` on a temporary home, and runs this file
// with the world in ROOMRELAY_TS_* variables. Outside that harness it skips.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import path from "node:path";
import {
  ConflictError,
  HashMismatchError,
  LocalAPIClient,
  LocalAPIError,
  NotFoundError,
  PreconditionFailedError,
  contentHash,
  discover,
  type AgentEvent,
  type Endpoint,
} from "../src/index.js";
import { eventually, hubCall, nextMatching, world } from "./helpers.js";

const w = world();
const skip = w ? false : "not under the Go harness (go test ./e2e -run TestTSClient)";
let client: LocalAPIClient;
let endpoint: Endpoint;
// Streams a failing test left open would keep node running: close them all.
const open: Array<{ close(): void }> = [];
function track<T extends { close(): void }>(s: T): T {
  open.push(s);
  return s;
}
after(() => open.forEach((s) => s.close()));

function worldOrThrow() {
  if (!w) throw new Error("no world");
  return w;
}

test("discovery finds the agent through localapi.json and status answers", { skip }, async () => {
  const w = worldOrThrow();
  endpoint = await discover({ home: w.home });
  assert.equal(endpoint.source, "file");
  assert.equal(endpoint.transport, "unix");
  assert.match(endpoint.api ?? "", /^1\.\d+$/);
  client = new LocalAPIClient({ socketPath: endpoint.path, client: "agent-test/1.0" });
  const st = await eventually("status online", async () => {
    const s = await client.status();
    return s.state === "online" ? s : undefined;
  });
  assert.equal(st.device_id, w.deviceId);
  assert.equal(st.boot_id, endpoint.boot_id, "status and localapi.json name the same boot");
  assert.match(st.api.version, /^1\.\d+$/);
  assert.match(client.apiVersion ?? "", /^1\.\d+$/, "Roomrelay-Api-Version on the answer");
  assert.equal(typeof st.pending_proposals, "number");
  assert.equal(typeof st.provider.connected, "boolean");
});

test("errors are typed: not_found, unsupported_api_version, agent_not_running", { skip }, async () => {
  await assert.rejects(client.proposal("prop_doesnotexist0000"), (e: unknown) => e instanceof NotFoundError && e.code === "not_found" && e.status === 404);
  await assert.rejects(client.request("GET", "/localapi/v2/status"), (e: unknown) => e instanceof LocalAPIError && e.code === "unsupported_api_version" && e.status === 404);
  const gone = new LocalAPIClient({ socketPath: path.join(worldOrThrow().home, "no-such.sock") });
  await assert.rejects(gone.status(), (e: unknown) => e instanceof Error && (e as LocalAPIError).code === "agent_not_running" && (e as LocalAPIError).retryable);
});

test("the served OpenAPI document describes every route and field the client uses", { skip }, async (t) => {
  const doc = (await client.openapi()) as OpenAPIDoc;
  if (!doc.paths && Object.keys(doc).length === 0) {
    // The agent serves the document's placeholder ({}) until it is written;
    // the Go harness accepts this one skip by its marker and no other.
    t.skip("OPENAPI-PENDING: the agent serves an empty OpenAPI document");
    return;
  }
  assert.match(String(doc.openapi), /^3\.1\./);
  const checks: Array<[string, string, string[], string?]> = [
    ["get", "status", ["state", "hub", "device_id", "reconnects", "in_flight", "queued_events", "pid", "updated_at", "provider", "pending_proposals", "api", "boot_id"]],
    ["get", "projects", ["revision", "projects"]],
    ["put", "projects/{id}", ["revision", "project", "changed"]],
    ["post", "projects/{id}/enable", ["revision", "project", "changed"]],
    ["post", "projects/{id}/disable", ["revision", "project", "changed"]],
    ["get", "proposals", ["proposals"]],
    ["get", "proposals/{id}", ["id", "project", "room_id", "kind", "name", "content_hash", "state", "file_count", "total_bytes", "created_at", "install_state", "install_error", "files", "has_hidden"]],
    ["post", "proposals/{id}/check", ["proposal_id", "content_hash", "state", "summary"]],
    ["post", "proposals/{id}/approve", ["proposal", "state", "decided_via"]],
    ["post", "proposals/{id}/decline", ["proposal", "state", "decided_via"]],
    ["get", "audit", ["entries"]],
    ["get", "events", []],
    ["get", "openapi.json", []],
  ];
  for (const [method, route, fields] of checks) {
    const op = operation(doc, method, route);
    assert.ok(op, `${method.toUpperCase()} ${route} is in the document`);
    if (fields.length === 0) continue;
    const props = responseProperties(doc, op);
    for (const f of fields) assert.ok(props.has(f), `${method.toUpperCase()} ${route}: the document's 200 answer has "${f}" (has ${[...props].join(", ")})`);
  }
  // A real answer carries every property the document marks required.
  const st = (await client.status()) as unknown as Record<string, unknown>;
  for (const f of requiredOf(doc, operation(doc, "get", "status")!)) assert.ok(f in st, `status answer has required "${f}"`);
});

test("projects: If-Match writes, 412 on a stale revision, enable and disable", { skip }, async () => {
  const w = worldOrThrow();
  const before = await client.projects();
  const p = before.projects.find((x) => x.project === w.project);
  assert.ok(p, `project ${w.project} is listed`);
  assert.equal(p.enrolled, true);
  const commands = [...new Set([...p.commands, "propose_room_snippet_app", "read_room"])].sort();
  const put = await client.putProject(w.project, { enabled: true, commands, rooms: p.rooms, rate: p.rate }, before.revision);
  assert.notEqual(put.revision, before.revision, "the write changed the revision");
  assert.deepEqual([...put.project.commands].sort(), commands);
  await assert.rejects(
    client.putProject(w.project, { enabled: true, commands: ["read_room"], rooms: [] }, before.revision),
    (e: unknown) => e instanceof PreconditionFailedError && e.status === 412,
  );
  const after = await client.projects();
  assert.equal(after.revision, put.revision, "a refused write leaves the policy as it was");
  await assert.rejects(
    client.putProject(w.project, { enabled: true, commands: ["rm_rf"], rooms: [] }, after.revision),
    (e: unknown) => e instanceof LocalAPIError && e.code === "invalid_args",
  );
  // enable is idempotent when nothing changes.
  const en = await client.enableProject(w.project, {});
  assert.equal(en.project.enabled, true);
});

test("events: a snapshot first, resume with since= without loss or duplicates, resync on another boot", { skip }, async () => {
  const w = worldOrThrow();
  const s1 = track(client.events({ initial: true }));
  const it1 = s1[Symbol.asyncIterator]();
  const snap = await nextMatching(it1, () => true);
  assert.equal(snap.type, "snapshot");
  assert.equal(snap.boot_id, endpoint.boot_id);
  // A change while the stream is open.
  await client.disableProject(w.project);
  const ev1 = await nextMatching(it1, (e) => e.type === "policy_changed");
  s1.close();
  // Two changes while no stream is open, then resume: both, in order, once.
  await client.enableProject(w.project, {});
  const mid = await client.projects();
  const p = mid.projects.find((x) => x.project === w.project)!;
  await client.putProject(w.project, { enabled: true, commands: p.commands, rooms: p.rooms, rate: { ...p.rate, burst: p.rate.burst + 1 } }, mid.revision);
  const s2 = track(client.events({ since: s1.lastSeq, bootId: s1.bootId, reconnect: false }));
  const it2 = s2[Symbol.asyncIterator]();
  const seen: AgentEvent[] = [];
  const a = await nextMatching(it2, (e) => e.type === "policy_changed", 15_000, seen);
  const b = await nextMatching(it2, (e) => e.type === "policy_changed", 15_000, seen);
  s2.close();
  assert.ok(a.seq > ev1.seq && b.seq > a.seq, `seqs ascend: ${ev1.seq} < ${a.seq} < ${b.seq}`);
  assert.ok(!seen.some((e) => e.type === "resync"), "no resync when the ring holds the point");
  const seqs = seen.map((e) => e.seq);
  assert.equal(new Set(seqs).size, seqs.length, "no event twice");
  // Another boot's point: the agent says resync, then a fresh snapshot.
  const s3 = track(client.events({ since: b.seq, bootId: "0000not-this-boot", reconnect: false }));
  const it3 = s3[Symbol.asyncIterator]();
  const r = await nextMatching(it3, () => true);
  assert.equal(r.type, "resync");
  assert.equal((await nextMatching(it3, () => true)).type, "snapshot");
  s3.close();
});

test("proposals: created by the cloud, shown in full, approved by content hash only", { skip }, async () => {
  const w = worldOrThrow();
  const files = {
    "src/App.tsx": "export default function App() {\n  return <div className=\"timer\">15:00 ☕</div>\n}\n",
    "src/caf\u00e9.ts": "export const nfc = 1\n",
    "src/\u{1F600}.ts": "export const astral = 2\n",
  };
  // The stream connects on the first next(): its snapshot says it is subscribed.
  const stream = track(client.events({ types: ["proposal_created", "proposal_decided"], initial: true }));
  const it = stream[Symbol.asyncIterator]();
  assert.equal((await nextMatching(it, () => true)).type, "snapshot");
  const res = await hubCall(w, "propose_room_snippet_app", w.project, { room_id: w.room, name: "Standup timer", files, idempotency_key: "ts-client-suite-1" });
  assert.ok(res.ok, `propose: ${JSON.stringify(res)}`);
  const created = await nextMatching(it, (e) => e.type === "proposal_created");
  const data = created.data as { content_hash?: string; proposal_id?: string; id?: string };
  assert.equal(data.content_hash, contentHash(files), "the event's hash is the TS client's hash of the files sent");
  const pending = await client.proposals("pending");
  const summary = pending.find((p) => p.content_hash === contentHash(files));
  assert.ok(summary, "the proposal is pending");
  const full = await client.proposal(summary.id);
  const shown: Record<string, string> = {};
  for (const f of full.files) shown[f.path] = f.content;
  assert.deepEqual(shown, files, "every file in full, names as sent (NFC, astral)");
  assert.equal(contentHash(shown), full.content_hash, "the hash of what the owner sees is the hash approval binds to");
  // A wrong hash: 409 hash_mismatch, still pending.
  await assert.rejects(client.approve(full.id, contentHash({ ...shown, "src/App.tsx": shown["src/App.tsx"] + " " })), (e: unknown) => e instanceof HashMismatchError && e.status === 409);
  assert.equal((await client.proposal(full.id)).state, "pending");
  const ok = await client.approve(full.id, full.content_hash);
  assert.equal(ok.state, "approved");
  assert.equal(ok.decided_via, "app");
  const again = await client.approve(full.id, full.content_hash);
  assert.equal(again.state, "approved", "approving again answers the same decision");
  await assert.rejects(client.decline(full.id), (e: unknown) => e instanceof ConflictError && e.status === 409);
  const decided = await nextMatching(it, (e) => e.type === "proposal_decided");
  assert.equal((decided.data as { state?: string }).state, "approved");
  stream.close();
  // The audit log recorded the cloud's command (no arguments).
  const audit = await client.audit(20);
  assert.ok(audit.some((a) => a.command === "propose_room_snippet_app"), "the propose is in the recent outcomes");
  assert.ok(!JSON.stringify(audit).includes("15:00 ☕"), "no file contents in the audit read");
});

test("the discovery file is 0600 and names this agent", { skip }, async () => {
  const w = worldOrThrow();
  const raw = JSON.parse(await readFile(path.join(w.home, "config", "localapi.json"), "utf8")) as { pid: number; path: string };
  assert.equal(raw.path, endpoint.path);
  assert.equal(raw.pid, (await client.status()).pid);
});

// --- a tiny OpenAPI reader: enough to find an operation's 200 JSON schema.

interface OpenAPIDoc {
  openapi?: string;
  paths?: Record<string, Record<string, unknown>>;
  components?: { schemas?: Record<string, unknown> };
}
type Schema = { $ref?: string; allOf?: Schema[]; properties?: Record<string, unknown>; required?: string[] };

function operation(doc: OpenAPIDoc, method: string, route: string): Record<string, unknown> | undefined {
  for (const [p, item] of Object.entries(doc.paths ?? {})) {
    const norm = p.replace(/\{[^}]+\}/g, "{id}");
    if (norm === `/localapi/v1/${route}` || norm === `/${route}`) return item[method] as Record<string, unknown> | undefined;
  }
  return undefined;
}

function resolve(doc: OpenAPIDoc, s: Schema | undefined, depth = 0): Schema[] {
  if (!s || depth > 10) return [];
  if (s.$ref) {
    const name = s.$ref.replace("#/components/schemas/", "");
    return resolve(doc, doc.components?.schemas?.[name] as Schema | undefined, depth + 1);
  }
  return [s, ...(s.allOf ?? []).flatMap((x) => resolve(doc, x, depth + 1))];
}

function responseSchema(doc: OpenAPIDoc, op: Record<string, unknown>): Schema[] {
  const r = (op.responses as Record<string, { $ref?: string; content?: Record<string, { schema?: Schema }> }> | undefined)?.["200"];
  let resp = r;
  if (resp?.$ref) resp = (doc.components as Record<string, Record<string, unknown>> | undefined)?.responses?.[resp.$ref.split("/").pop()!] as typeof r;
  return resolve(doc, resp?.content?.["application/json"]?.schema);
}

function responseProperties(doc: OpenAPIDoc, op: Record<string, unknown>): Set<string> {
  return new Set(responseSchema(doc, op).flatMap((s) => Object.keys(s.properties ?? {})));
}

function requiredOf(doc: OpenAPIDoc, op: Record<string, unknown>): string[] {
  return responseSchema(doc, op).flatMap((s) => s.required ?? []);
}
