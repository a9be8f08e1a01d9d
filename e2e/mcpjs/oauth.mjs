// oauth.mjs: the whole OAuth sign-in of the hub's MCP front with the
// official TS SDK client, headless. Discovery, dynamic registration, the
// consent page driven over HTTP with a cookie jar (the approver's login
// link first), the code exchange, tools/list, read_room reaching the
// device, a silent refresh once the access token expired, and after the
// operator revokes the grant (the Go test does it when this prints
// {"step":"await_revoke"} and answers on stdin) a refused call.
//
// Env: ROOMRELAY_MCP_URL, ROOMRELAY_LOGIN_URL (an approver's one-time
// login link), ROOMRELAY_PROJECT, ROOMRELAY_ACCESS_TTL_MS (the hub's
// --oauth-access-ttl). Lines on stdout starting with { are step records.
//
// Without ROOMRELAY_LOGIN_URL it signs in as Claude Code does on a hub
// nobody configured (a loopback hub started with no flags): it registers
// http://localhost:PORT/callback with its port, nobody is an approver, so
// the consent page's device code is approved on the laptop: it prints
// {"step":"device_code","code":…} and waits for the line `approved` on
// stdin, then the page's wait link goes on to the callback. The run then
// ends after read_room (no refresh or revocation steps).
import { createInterface } from "node:readline";

// ROOMRELAY_MCP_SDK=v2 runs the v2 client package (@modelcontextprotocol/client),
// which also checks the iss callback parameter; default the v1 SDK.
const v2 = process.env.ROOMRELAY_MCP_SDK === "v2";
const { Client, StreamableHTTPClientTransport, UnauthorizedError } = v2
  ? await import("@modelcontextprotocol/client")
  : {
      ...(await import("@modelcontextprotocol/sdk/client/index.js")),
      ...(await import("@modelcontextprotocol/sdk/client/streamableHttp.js")),
      ...(await import("@modelcontextprotocol/sdk/client/auth.js")),
    };

const mcpURL = new URL(need("ROOMRELAY_MCP_URL"));
const loginURL = process.env.ROOMRELAY_LOGIN_URL || "";
const deviceMode = loginURL === "";
const project = need("ROOMRELAY_PROJECT");
const accessTTL = deviceMode ? 0 : Number(need("ROOMRELAY_ACCESS_TTL_MS"));
const stdinLines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function waitLine(want) {
  for (;;) {
    const { value, done } = await stdinLines.next();
    if (done) fail(`stdin ended before the line ${want}`);
    if (value.trim() === want) return;
  }
}

function need(k) {
  const v = process.env[k];
  if (!v) fail(`${k} is not set`);
  return v;
}
function fail(msg) {
  console.error("oauth: " + msg);
  process.exit(1);
}
const step = (o) => console.log(JSON.stringify(o));

// Every request the client makes, counted, and the last /mcp status.
let requests = 0;
let lastMCPStatus = 0;
const realFetch = globalThis.fetch;
globalThis.fetch = async (input, init) => {
  requests++;
  const r = await realFetch(input, init);
  const u = new URL(typeof input === "string" || input instanceof URL ? input : input.url);
  if (u.pathname === mcpURL.pathname) lastMCPStatus = r.status;
  return r;
};

// A cookie jar: name → value, for the hub's origin only.
const jar = new Map();
function keep(r) {
  for (const c of r.headers.getSetCookie()) {
    const [nv] = c.split(";");
    const i = nv.indexOf("=");
    jar.set(nv.slice(0, i), nv.slice(i + 1));
  }
}
const cookie = () => [...jar].map(([k, v]) => `${k}=${v}`).join("; ");

class Provider {
  constructor() {
    this.info = undefined;
    this.tok = undefined;
    this.verifier = undefined;
    this.code = undefined;
    this.saves = 0;
    this.noBrowser = false;
    this.signedIn = false;
  }
  get redirectUrl() {
    return "http://localhost:53682/callback";
  }
  get clientMetadata() {
    return {
      client_name: "roomrelay e2e (TS SDK)",
      // Registered without the port (accepted: any loopback port matches), or
      // with it, as Claude Code registers.
      redirect_uris: [deviceMode ? "http://localhost:53682/callback" : "http://localhost/callback"],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  state() {
    return "state-" + Math.random().toString(36).slice(2);
  }
  clientInformation() {
    return this.info;
  }
  saveClientInformation(i) {
    this.info = i;
  }
  tokens() {
    return this.tok;
  }
  saveTokens(t) {
    this.tok = t;
    this.saves++;
  }
  saveCodeVerifier(v) {
    this.verifier = v;
  }
  codeVerifier() {
    return this.verifier;
  }
  // The "browser": sign in once with the login link, open the consent page,
  // post the approval, read the code from the redirect.
  async redirectToAuthorization(url) {
    if (this.noBrowser) throw new Error("the client asked for the browser again (expected after revocation)");
    if (deviceMode) return this.approveOnDevice(url);
    if (!this.signedIn) {
      const r = await fetch(loginURL, { redirect: "manual" });
      keep(r);
      if (r.status !== 200) fail(`login link: ${r.status}`);
      this.signedIn = true;
    }
    const page = await fetch(url, { redirect: "manual", headers: { cookie: cookie() } });
    keep(page);
    const html = await page.text();
    if (page.status !== 200) fail(`consent page ${page.status}: ${html.slice(0, 300)}`);
    const csp = page.headers.get("content-security-policy") || "";
    if (!csp.includes("frame-ancestors 'none'") || page.headers.get("cache-control") !== "no-store") fail("consent page headers: " + csp);
    const field = (n) => (html.match(new RegExp(`name="${n}" value="([^"]*)"`)) || [])[1];
    const body = new URLSearchParams({ req: field("req"), csrf: field("csrf"), project, access: "write", action: "approve" });
    const r = await fetch(new URL("/oauth/authorize/decision", url), {
      method: "POST",
      redirect: "manual",
      headers: { cookie: cookie(), "content-type": "application/x-www-form-urlencoded" },
      body,
    });
    if (r.status !== 303) fail(`decision: ${r.status} ${await r.text()}`);
    this.callback(url, new URL(r.headers.get("location")));
  }
  // The consent page with nobody signed in: its device code, approved on
  // the laptop (the Go test runs `roomrelay oauth approve CODE`), then the
  // page's "continue" link, which redirects to the callback.
  async approveOnDevice(url) {
    const page = await fetch(url, { redirect: "manual" });
    keep(page);
    const html = await page.text();
    if (page.status !== 200) fail(`consent page ${page.status}: ${html.slice(0, 300)}`);
    const code = (html.match(/roomrelay oauth approve ([A-Z0-9]{4}-[A-Z0-9]{4})/) || [])[1];
    const req = (html.match(/name="req" value="([^"]*)"/) || [])[1];
    if (!code || !req) fail("no device code on the consent page: " + html.slice(0, 500));
    step({ step: "device_code", code });
    await waitLine("approved");
    const wait = new URL("/oauth/authorize/wait", url);
    wait.search = new URLSearchParams({ req, code }).toString();
    const r = await fetch(wait, { redirect: "manual", headers: { cookie: cookie() } });
    if (r.status !== 303) fail(`wait page after approval: ${r.status} ${await r.text()}`);
    this.callback(url, new URL(r.headers.get("location")));
  }
  callback(url, loc) {
    if (loc.host !== "localhost:53682" || loc.pathname !== "/callback") fail("redirected to " + loc);
    if (loc.searchParams.get("state") !== url.searchParams.get("state")) fail("state mismatch");
    if (loc.searchParams.get("iss") !== new URL(url).origin) fail("iss " + loc.searchParams.get("iss"));
    this.code = loc.searchParams.get("code");
    this.params = loc.searchParams;
  }
}

const provider = new Provider();
const newClient = () => new Client({ name: "roomrelay-oauth-e2e", version: "1.0.0" });
const transport = () => new StreamableHTTPClientTransport(mcpURL, { authProvider: provider });

// 1. The authorization, counted from the first request to connected.
const t0 = performance.now();
let first = transport();
try {
  await newClient().connect(first);
  fail("connected without authorization");
} catch (e) {
  if (!(e instanceof UnauthorizedError)) throw e;
}
await (v2 ? first.finishAuth(provider.params) : first.finishAuth(provider.code));
const client = newClient();
await client.connect(transport());
const authMs = Math.round(performance.now() - t0);
const authRequests = requests;
if (!provider.tok?.access_token?.startsWith("rro_")) fail("no rro_ access token");
step({ step: "authorized", sdk: v2 ? "v2" : "v1", requests: authRequests, ms: authMs });

// 2. Tools and a device round trip.
const tools = await client.listTools();
if (tools.tools.length !== 8) fail(`tools/list: ${tools.tools.length} tools`);
const text = (r) => r.content.map((c) => c.text || "").join("");
const call = async (name, args) => {
  const r = await client.callTool({ name, arguments: args });
  if (r.isError) fail(`${name}: ${text(r)}`);
  return r;
};
const rooms = await call("list_local_rooms", {});
const roomId = (rooms.structuredContent?.rooms || [])[0]?.room_id;
if (!roomId) fail("no room listed: " + text(rooms));
await call("read_room", { room_id: roomId });
step({ step: "read_room", room_id: roomId });
if (deviceMode) {
  step({ step: "done", auth_requests: authRequests, auth_ms: authMs });
  process.exit(0);
}

// 3. The access token expires; the next call refreshes silently.
const before = provider.tok.refresh_token;
await new Promise((r) => setTimeout(r, accessTTL + 1000));
await call("read_room", { room_id: roomId });
if (provider.tok.refresh_token === before) fail("no refresh happened after the access token expired");
step({ step: "refreshed", token_saves: provider.saves });

// 4. The operator revokes the grant; the next call is refused.
step({ step: "await_revoke" });
await waitLine("revoked");
provider.noBrowser = true;
let refused = false;
try {
  const r = await client.callTool({ name: "read_room", arguments: { room_id: roomId } });
  refused = false;
  fail("a call after revocation succeeded: " + text(r));
} catch (e) {
  refused = true;
  if (lastMCPStatus !== 401) fail(`after revocation: ${e}; last /mcp status ${lastMCPStatus}, want 401`);
}
step({ step: "done", refused, auth_requests: authRequests, auth_ms: authMs });
process.exit(0);
