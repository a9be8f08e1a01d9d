// tokens.mjs — token economy of the roomrelay MCP front, counted with
// cl100k_base (js-tiktoken, ranks bundled, works offline).
//
// Env: ROOMRELAY_MCP_URL, ROOMRELAY_MCP_TOKEN, optional ROOMRELAY_ROOM_ID.
// Counts are of the raw JSON the server sent: tools/list and tools/call are
// done with plain fetch (initialize → notifications/initialized → method),
// each tool entry / the CallToolResult re-serialised compactly with
// JSON.stringify (key order as sent). A tool set is counted as
// JSON.stringify(array of those tool objects, in server order). The SDK
// client's (parsed, normalised) view is counted too, for comparison only.
//
// The budgets are of what a model reads: a tool's name, description,
// annotations and input schema. A tool's outputSchema (#28) is for the
// client's validator of structuredContent; a client that hands MCP tools to
// a model has no place to put it (a Messages API tool is name, description
// and input_schema), so it is counted apart (output_schema_tokens), with no
// budget, and the seed's 939 stays comparable with the seed's own tools.
//
// stdout: progress lines start with "tokens: "; the last line is
//   {"seed_tools_tokens":N,"all_tools_tokens":M,"read_result_tokens":K|null,
//    "output_schema_tokens":O}
// Exit 1 if seed_tools_tokens > 939 or read_result_tokens > 150, or on error.
import { Tiktoken } from "js-tiktoken/lite";
import cl100k_base from "js-tiktoken/ranks/cl100k_base";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const SEED_TOOLS = ["read_room", "list_room_apps", "read_room_app_status", "propose_room_snippet_app", "propose_room_repo_app"];
const SEED_BUDGET = 939;
const READ_BUDGET = 150;
const TIMEOUT_MS = 60_000;
const PROTOCOL_VERSION = "2025-06-18";

const enc = new Tiktoken(cl100k_base);
const count = (s) => enc.encode(s).length;
const log = (m) => console.log(`tokens: ${m}`);
class TokensError extends Error {}
const fail = (m) => { throw new TokensError(m); };

// ---- raw JSON-RPC over streamable HTTP --------------------------------------

class RawSession {
  constructor(url, token) {
    this.url = url;
    this.headers = {
      Authorization: `Bearer ${token}`,
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
    };
    this.nextId = 1;
  }

  async post(message) {
    const res = await fetch(this.url, {
      method: "POST",
      headers: this.headers,
      body: JSON.stringify(message),
      signal: AbortSignal.timeout(TIMEOUT_MS),
    });
    const sid = res.headers.get("mcp-session-id");
    if (sid) this.headers["Mcp-Session-Id"] = sid;
    return res;
  }

  async notify(method, params) {
    const res = await this.post({ jsonrpc: "2.0", method, ...(params ? { params } : {}) });
    await res.body?.cancel();
    if (!res.ok) fail(`${method}: HTTP ${res.status}`);
  }

  // Returns the JSON-RPC response message (parsed; key order as sent).
  async request(method, params) {
    const id = this.nextId++;
    const res = await this.post({ jsonrpc: "2.0", id, method, ...(params ? { params } : {}) });
    if (!res.ok) fail(`${method}: HTTP ${res.status}: ${(await res.text()).slice(0, 300)}`);
    const ctype = res.headers.get("content-type") ?? "";
    let msg;
    if (ctype.includes("text/event-stream")) msg = await readSSEResponse(res, id);
    else if (ctype.includes("application/json")) msg = JSON.parse(await res.text());
    else fail(`${method}: unexpected Content-Type ${JSON.stringify(ctype)}`);
    if (!msg) fail(`${method}: no JSON-RPC response with id ${id} in the stream`);
    if (msg.error) fail(`${method}: JSON-RPC error ${JSON.stringify(msg.error)}`);
    return msg;
  }
}

// Reads SSE events until the response with the given id arrives (the stream
// may stay open after it), then cancels the body.
async function readSSEResponse(res, id) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let data = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (value) buf += value;
      let nl;
      while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf.startsWith("\r\n", nl) ? 2 : 1));
        if (line === "") {
          if (data.length) {
            const m = JSON.parse(data.join("\n"));
            data = [];
            if (m.id === id && ("result" in m || "error" in m)) return m;
          }
        } else if (line.startsWith("data:")) {
          data.push(line.slice(5).replace(/^ /, ""));
        }
      }
      if (done) {
        if (data.length) { const m = JSON.parse(data.join("\n")); if (m.id === id) return m; }
        return undefined;
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

async function rawView(url, token, roomId) {
  const s = new RawSession(url, token);
  const init = await s.request("initialize", {
    protocolVersion: PROTOCOL_VERSION,
    capabilities: {},
    clientInfo: { name: "roomrelay-e2e-tokens", version: "0.0.0" },
  });
  s.headers["MCP-Protocol-Version"] = init.result.protocolVersion;
  await s.notify("notifications/initialized");
  const tools = [];
  let cursor;
  do {
    const page = await s.request("tools/list", cursor ? { cursor } : {});
    tools.push(...page.result.tools);
    cursor = page.result.nextCursor;
  } while (cursor);
  let readResult;
  if (roomId) readResult = (await s.request("tools/call", { name: "read_room", arguments: { room_id: roomId } })).result;
  return { tools, readResult };
}

async function sdkView(url, token, roomId) {
  const client = new Client({ name: "roomrelay-e2e-tokens", version: "0.0.0" });
  client.onerror = () => {}; // a stateless server need not offer the GET stream
  await client.connect(new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  }), { timeout: TIMEOUT_MS });
  const tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : {}, { timeout: TIMEOUT_MS });
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor);
  let readResult;
  if (roomId) readResult = await client.callTool({ name: "read_room", arguments: { room_id: roomId } }, undefined, { timeout: TIMEOUT_MS });
  await client.close();
  return { tools, readResult };
}

function measure({ tools, readResult }) {
  const missing = SEED_TOOLS.filter((n) => !tools.some((t) => t.name === n));
  if (missing.length) fail(`tools/list lacks seed tools: ${missing.join(", ")}`);
  // What a model reads of each tool: everything but outputSchema.
  const modelView = tools.map(({ outputSchema, ...rest }) => rest);
  const seed = modelView.filter((t) => SEED_TOOLS.includes(t.name));
  const perTool = Object.fromEntries(modelView.map((t) => [t.name, count(JSON.stringify(t))]));
  return {
    seed_tools_tokens: count(JSON.stringify(seed)),
    all_tools_tokens: count(JSON.stringify(modelView)),
    output_schema_tokens: count(JSON.stringify(tools.map((t) => t.outputSchema ?? null))),
    read_result_tokens: readResult === undefined ? null : count(JSON.stringify(readResult)),
    perTool,
  };
}

async function main() {
  const url = process.env.ROOMRELAY_MCP_URL;
  const token = process.env.ROOMRELAY_MCP_TOKEN;
  const roomId = process.env.ROOMRELAY_ROOM_ID || undefined;
  if (!url) fail("environment variable ROOMRELAY_MCP_URL is not set");
  if (!token) fail("environment variable ROOMRELAY_MCP_TOKEN is not set");

  const raw = await rawView(url, token, roomId);
  if (raw.readResult?.isError) fail(`read_room ${roomId} returned isError: ${JSON.stringify(raw.readResult).slice(0, 300)}`);
  const sdk = await sdkView(url, token, roomId);
  const r = measure(raw);
  const s = measure(sdk);
  log(`per tool (raw): ${JSON.stringify(r.perTool)}`);
  for (const k of ["seed_tools_tokens", "all_tools_tokens", "read_result_tokens", "output_schema_tokens"]) {
    if (r[k] !== s[k]) log(`note: ${k} differs: raw ${r[k]}, SDK view ${s[k]}; reporting raw`);
  }
  console.log(JSON.stringify({
    seed_tools_tokens: r.seed_tools_tokens,
    all_tools_tokens: r.all_tools_tokens,
    read_result_tokens: r.read_result_tokens,
    output_schema_tokens: r.output_schema_tokens,
  }));
  const over = [];
  if (r.seed_tools_tokens > SEED_BUDGET) over.push(`seed_tools_tokens ${r.seed_tools_tokens} > ${SEED_BUDGET}`);
  if (r.read_result_tokens !== null && r.read_result_tokens > READ_BUDGET) over.push(`read_result_tokens ${r.read_result_tokens} > ${READ_BUDGET}`);
  if (over.length) fail(`over budget: ${over.join("; ")}`);
}

try {
  await main();
  process.exit(0);
} catch (e) {
  const msg = e instanceof TokensError ? e.message
    : `${e?.name ?? "Error"}: ${e?.message ?? e}${e?.cause ? ` (cause: ${e.cause.message ?? e.cause})` : ""}`;
  console.error(`tokens: FAIL: ${msg}`);
  process.exit(1);
}
