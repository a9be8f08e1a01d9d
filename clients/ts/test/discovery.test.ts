// discover() reads localapi.json and nothing else: a socket sitting where
// the old default guess pointed is never used (docs/localapi.md: "do not
// guess"). Real files and real listening sockets; no agent needed.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { chownSync, mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { LocalAPIClient, RoomrelayError, configDir, discover } from "../src/index.js";

// Short paths: a unix socket address holds ~104 bytes.
const tmp = mkdtempSync(path.join(os.tmpdir(), "rrdisc-"));
const servers: net.Server[] = [];
after(() => {
  for (const s of servers) s.close();
  rmSync(tmp, { recursive: true, force: true });
});

function listen(p: string): Promise<void> {
  mkdirSync(path.dirname(p), { recursive: true });
  const s = net.createServer((c) => c.destroy());
  servers.push(s);
  return new Promise((resolve) => s.listen(p, resolve));
}

test("with a home: only <home>/config/localapi.json, never <home>/state/localapi.sock", { skip: process.platform === "win32" && "unix sockets" }, async () => {
  const home = path.join(tmp, "h");
  await listen(path.join(home, "state", "localapi.sock"));
  await assert.rejects(discover({ home, env: {} }), (e: unknown) => e instanceof RoomrelayError && e.code === "no_discovery" && e.retryable, "no discovery file: the agent is not running, whatever socket lies around");
  mkdirSync(path.join(home, "config"), { recursive: true });
  writeFileSync(path.join(home, "config", "localapi.json"), JSON.stringify({ transport: "unix", path: "/elsewhere/x.sock", pid: 42, boot_id: "b1", api: "1.0" }));
  const ep = await discover({ home, env: {} });
  assert.equal(ep.path, "/elsewhere/x.sock", "the file's endpoint, not a guess");
  assert.equal(ep.source, "file");
  assert.equal(ep.boot_id, "b1");
  assert.equal(ep.pid, 42);
});

test("without a home (Linux): $XDG_CONFIG_HOME/roomrelay/localapi.json, never $XDG_RUNTIME_DIR's socket", { skip: process.platform === "win32" && "unix sockets" }, async () => {
  const env = { HOME: path.join(tmp, "u"), XDG_CONFIG_HOME: path.join(tmp, "cfg"), XDG_RUNTIME_DIR: path.join(tmp, "run") };
  await listen(path.join(env.XDG_RUNTIME_DIR, "roomrelay", "localapi.sock"));
  await assert.rejects(discover({ env, platform: "linux" }), (e: unknown) => e instanceof RoomrelayError && e.code === "no_discovery");
  assert.equal(configDir({ env, platform: "linux" }), path.join(env.XDG_CONFIG_HOME, "roomrelay"));
  mkdirSync(path.join(env.XDG_CONFIG_HOME, "roomrelay"), { recursive: true });
  writeFileSync(path.join(env.XDG_CONFIG_HOME, "roomrelay", "localapi.json"), JSON.stringify({ transport: "unix", path: "/from/the/file.sock" }));
  assert.equal((await discover({ env, platform: "linux" })).path, "/from/the/file.sock");
});

test("config dirs per OS: macOS Application Support, Windows %AppData%", () => {
  assert.equal(configDir({ env: { HOME: "/Users/a" }, platform: "darwin" }), path.join("/Users/a", "Library", "Application Support", "roomrelay"));
  assert.equal(configDir({ env: { HOME: "/h", APPDATA: "/appdata" }, platform: "win32" }), path.join("/appdata", "roomrelay"));
});

test("a half-written discovery file is retryable (an agent starting up)", async () => {
  const home = path.join(tmp, "half");
  mkdirSync(path.join(home, "config"), { recursive: true });
  writeFileSync(path.join(home, "config", "localapi.json"), '{"transport":"un');
  await assert.rejects(discover({ home, env: {} }), (e: unknown) => e instanceof RoomrelayError && e.code === "no_discovery" && e.retryable);
});

test("a client from discover() follows the discovery file when its endpoint refuses", { skip: process.platform === "win32" && "unix sockets" }, async () => {
  const home = path.join(tmp, "move");
  mkdirSync(path.join(home, "config"), { recursive: true });
  const file = path.join(home, "config", "localapi.json");
  const first = path.join(tmp, "a.sock");
  writeFileSync(file, JSON.stringify({ transport: "unix", path: first, boot_id: "boot-1" }));
  const { client } = await LocalAPIClient.discover({ home, env: {} });
  // The agent "restarted" elsewhere: a new socket answering HTTP, a new boot id.
  const second = path.join(tmp, "b.sock");
  const srv = (await import("node:http")).createServer((_req, res) => {
    res.setHeader("Content-Type", "application/json");
    res.end(JSON.stringify({ state: "online", provider: { connected: false }, pending_proposals: 0 }));
  });
  servers.push(srv as unknown as net.Server);
  await new Promise<void>((resolve) => srv.listen(second, resolve));
  writeFileSync(file, JSON.stringify({ transport: "unix", path: second, boot_id: "boot-2" }));
  const st = await client.status();
  assert.equal(st.state, "online");
  assert.equal(client.socketPath, second);
  assert.equal(client.endpoint?.boot_id, "boot-2");
  // A client given a fixed socket does not move.
  const fixed = new LocalAPIClient({ socketPath: first });
  await assert.rejects(fixed.status(), (e: unknown) => e instanceof RoomrelayError && e.code === "agent_not_running");
});

test("a discovery file or socket of another user: not_yours, never used (#29.5)", { skip: (typeof process.getuid !== "function" || process.getuid() !== 0) && "needs root to chown to another uid" }, async () => {
  const home = path.join(tmp, "o");
  const sock = path.join(home, "s.sock");
  await listen(sock);
  mkdirSync(path.join(home, "config"), { recursive: true });
  const file = path.join(home, "config", "localapi.json");
  writeFileSync(file, JSON.stringify({ transport: "unix", path: sock }), { mode: 0o600 });
  assert.equal((await discover({ home, env: {} })).path, sock, "ours: used");
  chownSync(sock, 65534, 65534);
  await assert.rejects(discover({ home, env: {} }), (e: unknown) => e instanceof RoomrelayError && e.code === "not_yours" && /the socket .* belongs to uid 65534/.test(e.message));
  chownSync(sock, 0, 0);
  chownSync(file, 65534, 65534);
  await assert.rejects(discover({ home, env: {} }), (e: unknown) => e instanceof RoomrelayError && e.code === "not_yours" && /the discovery file .* belongs to uid 65534/.test(e.message));
});
