// flow.mjs — the whole roomrelay MCP user flow, driven by the official
// TypeScript SDK client over streamable HTTP.
//
// Env: ROOMRELAY_MCP_URL, ROOMRELAY_MCP_TOKEN (write), ROOMRELAY_MCP_READ_TOKEN
// (read-only), ROOMRELAY_SNIPPET_DIR, optional ROOMRELAY_EXPECT_NO_SANDBOX=1.
//
// stdout: progress lines start with "flow: "; the only lines that start with
// "{" are the step records {"step":...} a Go test may watch for. "proposed"
// is emitted just before wait_for_review, once the checks that need the
// proposal pending are done: the owner may approve it from then on.
// Exit 0 = pass; otherwise a "flow: FAIL ..." message on stderr and exit 1.
import { createHash, randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join, relative, sep } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const CALL_TIMEOUT_MS = 60_000;
const WAIT_TIMEOUT_MS = 70_000;
const EXPECTED_TOOLS = [
  "list_local_rooms", "read_room", "list_room_apps", "read_room_app_status",
  "propose_room_snippet_app", "propose_room_repo_app", "smoke_run_room_app", "wait_for_review",
];
const READ_ONLY_TOOLS = ["read_room", "list_room_apps", "read_room_app_status"];
const DESTRUCTIVE_TOOLS = ["propose_room_snippet_app", "propose_room_repo_app"];

let step = "setup";
let closing = false;
class FlowError extends Error {}
const fail = (msg) => { throw new FlowError(msg); };
const check = (cond, msg) => { if (!cond) fail(msg); };
const log = (msg) => console.log(`flow: ${msg}`);
const record = (obj) => console.log(JSON.stringify(obj));
const brief = (v) => { const s = JSON.stringify(v); return s && s.length > 600 ? s.slice(0, 600) + "…" : s; };

function env(name, { required = true } = {}) {
  const v = process.env[name];
  if (required && !v) fail(`environment variable ${name} is not set`);
  return v;
}

function firstText(result) {
  const t = (result?.content ?? []).find((c) => c.type === "text");
  return t ? t.text : "";
}

// Stable JSON: object keys sorted recursively, no whitespace.
function canonicalJSON(v) {
  if (Array.isArray(v)) return `[${v.map(canonicalJSON).join(",")}]`;
  if (v && typeof v === "object") {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonicalJSON(v[k])}`).join(",")}}`;
  }
  return JSON.stringify(v);
}

function readTree(dir) {
  const files = {};
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) files[relative(dir, p).split(sep).join("/")] = readFileSync(p, "utf8");
    }
  };
  walk(dir);
  return Object.fromEntries(Object.entries(files).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

// True if any property named key (anywhere in v) has the given value.
function deepHas(v, key, value) {
  if (Array.isArray(v)) return v.some((x) => deepHas(x, key, value));
  if (v && typeof v === "object") {
    return Object.entries(v).some(([k, x]) => (k === key && x === value) || deepHas(x, key, value));
  }
  return false;
}

async function connect(url, token, label) {
  const client = new Client({ name: `roomrelay-e2e-flow-${label}`, version: "0.0.0" });
  // The SDK reports a failed/aborted standalone GET stream here; a stateless
  // server need not offer one, so this is logged, not fatal.
  client.onerror = (e) => {
    if (!closing) log(`${label} transport notice (not fatal): ${e?.message ?? e}`);
  };
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport, { timeout: CALL_TIMEOUT_MS });
  return client;
}

async function listAllTools(client) {
  const tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : {}, { timeout: CALL_TIMEOUT_MS });
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor);
  return tools;
}

async function call(client, name, args, opts = {}) {
  return client.callTool({ name, arguments: args }, undefined, { timeout: CALL_TIMEOUT_MS, ...opts });
}

function expectOK(result, what) {
  check(!result.isError, `${what}: unexpected isError: ${brief(firstText(result) || result)}`);
  check(result.structuredContent && typeof result.structuredContent === "object",
    `${what}: no structuredContent in result ${brief(result)}`);
  return result.structuredContent;
}

async function main() {
  const url = env("ROOMRELAY_MCP_URL");
  const token = env("ROOMRELAY_MCP_TOKEN");
  const readToken = env("ROOMRELAY_MCP_READ_TOKEN");
  const snippetDir = env("ROOMRELAY_SNIPPET_DIR");
  const expectNoSandbox = process.env.ROOMRELAY_EXPECT_NO_SANDBOX === "1";

  step = "a:connect";
  const client = await connect(url, token, "write");
  const caps = client.getServerCapabilities();
  log(`connected to ${brief(client.getServerVersion())}, capabilities ${brief(caps)}`);
  check(caps?.tools, `server capabilities have no "tools": ${brief(caps)}`);
  // Go's ToolCapabilities.ListChanged is `omitempty`, so false may arrive as absent.
  check(caps.tools.listChanged !== true, `tools.listChanged must be false, got ${brief(caps.tools)}`);

  step = "b:tools/list";
  const tools = await listAllTools(client);
  const names = tools.map((t) => t.name).sort();
  const missing = EXPECTED_TOOLS.filter((n) => !names.includes(n));
  const extra = names.filter((n) => !EXPECTED_TOOLS.includes(n));
  check(missing.length === 0 && extra.length === 0,
    `tools/list must name exactly ${EXPECTED_TOOLS.join(", ")}; missing [${missing}], unexpected [${extra}]`);
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  for (const n of READ_ONLY_TOOLS) {
    check(byName[n].annotations?.readOnlyHint === true, `${n}: annotations.readOnlyHint must be true, got ${brief(byName[n].annotations)}`);
  }
  for (const n of DESTRUCTIVE_TOOLS) {
    check(byName[n].annotations?.destructiveHint === true, `${n}: annotations.destructiveHint must be true, got ${brief(byName[n].annotations)}`);
  }
  log(`tools/list ok: ${names.join(", ")}`);

  step = "c:list_local_rooms";
  const roomsSC = expectOK(await call(client, "list_local_rooms", {}), "list_local_rooms");
  check(Array.isArray(roomsSC.rooms), `list_local_rooms: structuredContent.rooms is not an array: ${brief(roomsSC)}`);
  for (const r of roomsSC.rooms) {
    check(typeof r.room_id === "string" && typeof r.name === "string" && typeof r.project === "string"
      && r.presence && typeof r.presence.state === "string"
      && (r.device_id === undefined || typeof r.device_id === "string")
      && (r.presence.last_seen === undefined || typeof r.presence.last_seen === "string"),
      `list_local_rooms: room does not match {room_id, name, project, device_id?, presence:{state, last_seen?}}: ${brief(r)}`);
  }
  const standup = roomsSC.rooms.find((r) => r.name === "Standup");
  check(standup, `list_local_rooms: no room named "Standup" among ${brief(roomsSC.rooms.map((r) => r.name))}`);
  const roomId = standup.room_id;
  record({ step: "rooms", room_id: roomId });

  step = "d:read_room";
  const roomSC = expectOK(await call(client, "read_room", { room_id: roomId }), "read_room");
  check((roomSC.room_id ?? roomSC.id) === roomId, `read_room: room_id/id ${brief(roomSC.room_id ?? roomSC.id)} != ${roomId}`);
  log("read_room ok");

  step = "e:propose_room_snippet_app";
  const files = readTree(snippetDir);
  for (const f of ["src/App.tsx", "src/styles.css"]) check(f in files, `${snippetDir} has no ${f} (found ${Object.keys(files)})`);
  const name = "Standup timer";
  const key = "snip-" + createHash("sha256").update(canonicalJSON({ room_id: roomId, name, files })).digest("hex").slice(0, 32);
  const proposeArgs = { room_id: roomId, name, files, idempotency_key: key };
  const p1 = expectOK(await call(client, "propose_room_snippet_app", proposeArgs), "propose_room_snippet_app");
  check(typeof p1.proposal_id === "string" && p1.proposal_id !== "", `propose: no proposal_id in ${brief(p1)}`);
  check(p1.state === "pending_review", `propose: state ${brief(p1.state)}, want "pending_review"`);
  check(p1.duplicate === false, `propose: duplicate ${brief(p1.duplicate)}, want false (is the store clean?)`);
  const proposalId = p1.proposal_id;
  log(`proposed ${proposalId}, pending review`);

  step = "f:idempotency";
  const p2 = expectOK(await call(client, "propose_room_snippet_app", proposeArgs), "propose (same key)");
  check(p2.duplicate === true && p2.proposal_id === proposalId,
    `propose with the same key: want duplicate true and proposal_id ${proposalId}, got ${brief(p2)}`);
  const otherKey = "snip-" + randomBytes(16).toString("hex");
  const p3 = expectOK(await call(client, "propose_room_snippet_app", { ...proposeArgs, idempotency_key: otherKey }), "propose (new key, same content)");
  check(p3.duplicate === true && p3.proposal_id === proposalId,
    `propose with a new key and the same content: want duplicate true and proposal_id ${proposalId}, got ${brief(p3)}`);
  const changedFiles = { ...files, "src/styles.css": files["src/styles.css"] + "\n/* changed by flow.mjs */\n" };
  const p4 = await call(client, "propose_room_snippet_app", { ...proposeArgs, files: changedFiles });
  check(p4.isError === true && firstText(p4).startsWith("idempotency_conflict"),
    `propose with the same key and changed content: want isError with text "idempotency_conflict…", got ${brief(p4)}`);
  log("idempotency ok (same key, content dedupe, conflict)");

  step = "g:read-token";
  const readClient = await connect(url, readToken, "read");
  await listAllTools(readClient); // lets the SDK cache output schemas, as a real client would
  const pr = await call(readClient, "propose_room_snippet_app", { ...proposeArgs, idempotency_key: "snip-" + randomBytes(16).toString("hex") });
  check(pr.isError === true && firstText(pr).includes("rooms:write"),
    `propose with a read-only token: want isError with text mentioning rooms:write, got ${brief(pr)}`);
  closing = true;
  await readClient.close();
  closing = false;
  log("read-only token refused rooms:write ok");

  step = "h:wait_for_review";
  // Only now may the owner decide: the checks above rely on the proposal
  // still being pending (content dedupe matches pending proposals only), so
  // the "proposed" record, the Go test's cue to approve, comes after them.
  record({ step: "proposed", proposal_id: proposalId, room_id: roomId });
  let progress = 0;
  const w = await client.callTool(
    { name: "wait_for_review", arguments: { room_id: roomId, proposal_id: proposalId, timeout_seconds: 50 } },
    undefined,
    {
      timeout: WAIT_TIMEOUT_MS,
      resetTimeoutOnProgress: true,
      onprogress: (p) => { progress++; log(`progress ${brief(p)}`); },
    },
  );
  const wSC = expectOK(w, "wait_for_review");
  check(wSC.state === "approved", `wait_for_review: state ${brief(wSC.state)}, want "approved" (${brief(wSC)})`);
  check(typeof wSC.instance_id === "string" && wSC.instance_id !== "", `wait_for_review: no instance_id in ${brief(wSC)}`);
  const instanceId = wSC.instance_id;
  record({ step: "approved", instance_id: instanceId, progress_notifications: progress });

  step = "i:list_room_apps";
  const apps = await call(client, "list_room_apps", { room_id: roomId });
  check(!apps.isError, `list_room_apps: unexpected isError: ${brief(firstText(apps))}`);
  check(deepHas(apps.structuredContent, "instance_id", instanceId) || deepHas(apps.structuredContent, "id", instanceId),
    `list_room_apps: instance ${instanceId} not listed in ${brief(apps.structuredContent ?? apps)}`);
  log("list_room_apps ok");

  step = "j:read_room_app_status";
  const st = await call(client, "read_room_app_status", { room_id: roomId, instance_id: instanceId });
  check(!st.isError, `read_room_app_status: unexpected isError: ${brief(firstText(st))}`);
  log(`read_room_app_status ok: ${brief(st.structuredContent ?? firstText(st))}`);

  step = "k:smoke_run_room_app";
  const sm = await call(client, "smoke_run_room_app", { room_id: roomId, instance_id: instanceId });
  if (expectNoSandbox) {
    check(sm.isError === true && firstText(sm).startsWith("sandbox_failed"),
      `smoke_run_room_app (ROOMRELAY_EXPECT_NO_SANDBOX=1): want isError with text "sandbox_failed…", got ${brief(sm)}`);
  } else {
    check(!sm.isError && sm.structuredContent?.ok === true, `smoke_run_room_app: want structuredContent.ok true, got ${brief(sm)}`);
  }
  log("smoke_run_room_app ok");

  step = "l:error-shape";
  let nf;
  try {
    nf = await call(client, "read_room", { room_id: "no-such-room" });
  } catch (e) {
    fail(`read_room no-such-room threw instead of returning an isError result (structuredContent invalid for outputSchema?): ${e?.message ?? e}`);
  }
  check(nf.isError === true && firstText(nf).startsWith("not_found"),
    `read_room no-such-room: want isError with text "not_found…", got ${brief(nf)}`);
  log("error shape ok");

  closing = true;
  await client.close();
  step = "m:done";
  record({ step: "done" });
}

try {
  await main();
  process.exit(0);
} catch (e) {
  const msg = e instanceof FlowError ? e.message
    : `${e?.name ?? "Error"}: ${e?.message ?? e}${e?.cause ? ` (cause: ${e.cause.message ?? e.cause})` : ""}`;
  console.error(`flow: FAIL at step ${step}: ${msg}`);
  process.exit(1);
}
