// The room provider against a REAL agent whose owner selected the app
// (`provider app`): e2e/tsclient_test.go (TestTSClientProvider) starts it and
// sets ROOMRELAY_TS_APP_PROJECT. Outside that harness it skips.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import {
  LocalAPIClient,
  Provider,
  ProviderError,
  ProviderErrorCodes,
  contentHash,
  discover,
  type AppsInstallParams,
  type ProviderHandlers,
  type RoomRef,
} from "../src/index.js";
import { eventually, hubCall, nextMatching, world } from "./helpers.js";

const w = world();
const skip = w?.appProject ? false : "not under the Go harness with `provider app` (go test ./e2e -run TestTSClientProvider)";
const ROOM = "app-room";

interface Log {
  reads: RoomRef[];
  installs: AppsInstallParams[];
  canceled: string[];
}

function appHandlers(log: Log, extra: Partial<ProviderHandlers> = {}): ProviderHandlers {
  const installed = new Map<string, string>();
  return {
    roomsRead(p) {
      log.reads.push(p);
      if (p.room_id !== ROOM) throw new ProviderError("not_found", "no such room");
      // Extra fields must never reach the cloud.
      return { id: ROOM, name: "App's room", app_count: installed.size, secret: "LEAKMARK" } as never;
    },
    appsList() {
      return { apps: [...installed.values()].map((id) => ({ instance_id: id, name: "Standup timer", source: "snippet" as const, launcher: { state: "active" as const, position: 0 } })), next_cursor: "" };
    },
    appsInstall(p) {
      log.installs.push(p);
      if (contentHash(p.files ?? {}) !== p.content_hash) throw new ProviderError(ProviderErrorCodes.HASH_MISMATCH, "hash mismatch");
      installed.set(p.proposal_id, p.instance_id);
      return { instance_id: p.instance_id };
    },
    ...extra,
  };
}

let client: LocalAPIClient;
// Providers and streams a failing test left open would keep node running.
const open: Array<{ close(): unknown }> = [];
function track<T extends { close(): unknown }>(s: T): T {
  open.push(s);
  return s;
}
after(async () => {
  for (const s of open) await s.close();
});

test("the app registers, its room reaches the cloud, answers are slim", { skip }, async () => {
  const ww = w!;
  const ep = await discover({ home: ww.home });
  client = new LocalAPIClient({ socketPath: ep.path });
  const log: Log = { reads: [], installs: [], canceled: [] };
  const p = track(new Provider({ socketPath: ep.path, app: { name: "suite-app", version: "1.0" }, handlers: appHandlers(log), rooms: [{ id: ROOM, project: ww.appProject!, name: "App's room" }] }));
  const hello = await p.start();
  assert.equal(hello.protocol_version, 1);
  assert.ok(hello.projects?.includes(ww.appProject!), `hello names the enabled project: ${JSON.stringify(hello)}`);
  const st = await eventually("status shows the provider", async () => {
    const s = await client.status();
    return s.provider.connected && s.provider.app === "suite-app" ? s : undefined;
  });
  // The agent names the provider's process as its peer check saw it: this one.
  assert.equal(st.provider.pid, process.pid, `status names this process as the provider: ${JSON.stringify(st.provider)}`);
  assert.equal(st.provider.exe, process.execPath, "and its executable");
  assert.ok(st.provider.since, "and since when");
  const res = await eventually("read_room answered by the app", async () => {
    const r = await hubCall(ww, "read_room", ww.appProject!, { room_id: ROOM });
    return r.ok ? r : undefined;
  });
  assert.equal((res.result as { name?: string }).name, "App's room");
  assert.ok(!JSON.stringify(res).includes("LEAKMARK"), "a field the app added is dropped");
  const asked = log.reads.at(-1)!;
  assert.equal(asked.project, ww.appProject);
  assert.ok(asked.deadline_ms > Date.now() - 60_000, "the request carries the command's deadline (Unix ms)");
  const missing = await hubCall(ww, "read_room", ww.appProject!, { room_id: "no-such-room" });
  assert.equal(missing.error?.code, "not_found");
  await p.close();
});

test("the app closed: app_not_running at once, proposals still wait, install on reopen exactly once", { skip }, async () => {
  const ww = w!;
  const ep = await discover({ home: ww.home });
  const events = track(client.events({ types: ["provider_changed", "install_changed"], initial: true }));
  const it = events[Symbol.asyncIterator]();
  assert.equal((await nextMatching(it, () => true)).type, "snapshot");
  await eventually("status shows no provider", async () => !(await client.status()).provider.connected);
  const t0 = Date.now();
  const r = await hubCall(ww, "read_room", ww.appProject!, { room_id: ROOM });
  assert.equal(r.error?.code, "app_not_running", JSON.stringify(r));
  assert.equal(r.error?.retryable, true);
  void t0; // the ≤100 ms bound is measured on the agent side (Go tests); this call includes a process start
  const files = { "src/App.tsx": "export default function App() { return <p>é 😀</p> }\n" };
  const prop = await hubCall(ww, "propose_room_snippet_app", ww.appProject!, { room_id: ROOM, name: "Standup timer", files, idempotency_key: "ts-provider-suite-1" });
  assert.ok(prop.ok, `a proposal is accepted while the app is closed: ${JSON.stringify(prop)}`);
  const pending = (await client.proposals("pending")).find((x) => x.content_hash === contentHash(files));
  assert.ok(pending, "pending in roomrelay's store");
  const d = await client.approve(pending.id, contentHash(files));
  assert.equal(d.state, "approved");
  // Nobody installed it yet: the proposal views say so.
  assert.equal(d.proposal.install_state, "pending");
  assert.equal((await client.proposal(pending.id)).install_state, "pending");
  // Reopen: exactly one apps.install, with the hash the app recomputes.
  const log: Log = { reads: [], installs: [], canceled: [] };
  const p = track(new Provider({ socketPath: ep.path, app: { name: "suite-app", version: "1.1" }, handlers: appHandlers(log), rooms: [{ id: ROOM, project: ww.appProject!, name: "App's room" }] }));
  await p.start();
  await eventually("apps.install delivered", () => log.installs.length > 0);
  const inst = log.installs[0];
  assert.equal(inst.proposal_id, pending.id);
  assert.equal(inst.content_hash, contentHash(inst.files ?? {}));
  if (d.proposal.instance_id) assert.equal(inst.instance_id, d.proposal.instance_id, "installed under the id roomrelay assigned");
  await nextMatching(it, (e) => e.type === "install_changed" && JSON.stringify(e.data).includes("installed"));
  assert.equal((await client.proposal(pending.id)).install_state, "installed");
  const listed = (await client.proposals("approved")).find((x) => x.id === pending.id);
  assert.equal(listed?.install_state, "installed", "the list view too");
  const list = await hubCall(ww, "list_room_apps", ww.appProject!, { room_id: ROOM });
  assert.ok(list.ok && JSON.stringify(list).includes(inst.instance_id), `list_room_apps: ${JSON.stringify(list)}`);
  await new Promise((res) => setTimeout(res, 500));
  assert.equal(log.installs.length, 1, "delivered once");
  events.close();
  await p.close();
});

test("the newest provider wins; a slow request is canceled at its deadline", { skip }, async () => {
  const ww = w!;
  const ep = await discover({ home: ww.home });
  const canceled: string[] = [];
  const slow: Partial<ProviderHandlers> = {
    roomsRead(_p, ctx) {
      return new Promise((_res, rej) => {
        ctx.signal.addEventListener("abort", () => {
          canceled.push(String(ctx.id));
          rej(new Error("canceled"));
        });
      });
    },
  };
  const first = track(new Provider({ socketPath: ep.path, app: { name: "first", version: "1" }, handlers: appHandlers({ reads: [], installs: [], canceled: [] }), rooms: [{ id: ROOM, project: ww.appProject!, name: "App's room" }] }));
  await first.start();
  const replaced = new Promise((res) => first.once("replaced", res));
  const second = track(new Provider({ socketPath: ep.path, app: { name: "second", version: "1" }, handlers: appHandlers({ reads: [], installs: [], canceled: [] }, slow), rooms: [{ id: ROOM, project: ww.appProject!, name: "App's room" }] }));
  await second.start();
  await replaced;
  assert.equal(first.connected, false);
  await eventually("status names the second app", async () => (await client.status()).provider.app === "second");
  const r = await hubCall(ww, "read_room", ww.appProject!, { room_id: ROOM }, "2s");
  assert.equal(r.ok, false);
  await eventually("$/cancelRequest reached the handler", () => canceled.length > 0);
  await second.close();
  await first.close();
});

test("a handler that throws is answered internal; without an error listener the app lives on", { skip }, async () => {
  const ww = w!;
  const throwing: Partial<ProviderHandlers> = {
    roomsRead() {
      throw new TypeError("a bug in the app's handler");
    },
  };
  // No "error" listener: an unheard "error" event would throw out of the
  // emitter and crash this process (and fail the whole suite).
  const p = track(new Provider({ discover: { home: ww.home }, app: { name: "throwing-app", version: "1" }, handlers: appHandlers({ reads: [], installs: [], canceled: [] }, throwing), rooms: [{ id: ROOM, project: ww.appProject!, name: "App's room" }] }));
  await p.start();
  assert.equal(p.listenerCount("error"), 0);
  const r = await hubCall(ww, "read_room", ww.appProject!, { room_id: ROOM });
  assert.equal(r.error?.code, "internal", `the cloud sees internal: ${JSON.stringify(r)}`);
  assert.ok(!JSON.stringify(r).includes("a bug in the app"), "the app's message stays on the device");
  assert.ok(p.connected, "the provider is still connected");
  // With a listener, the app hears about it.
  const heard: unknown[] = [];
  p.on("error", (e) => heard.push(e));
  const r2 = await hubCall(ww, "read_room", ww.appProject!, { room_id: ROOM });
  assert.equal(r2.error?.code, "internal");
  await eventually("the error reached the listener", () => heard.length > 0);
  assert.ok(heard[0] instanceof TypeError && heard[0].message === "a bug in the app's handler", String(heard[0]));
  await p.close();
});

test("the agent restarts (new pid and boot id): the provider re-reads the discovery file and reconnects on its own", { skip }, async () => {
  const ww = w!;
  const restartURL = process.env.ROOMRELAY_TS_RESTART_URL;
  assert.ok(restartURL, "the harness serves ROOMRELAY_TS_RESTART_URL");
  const log: Log = { reads: [], installs: [], canceled: [] };
  const p = track(new Provider({ discover: { home: ww.home }, app: { name: "restart-app", version: "1" }, handlers: appHandlers(log), rooms: [{ id: ROOM, project: ww.appProject!, name: "App's room" }], maxBackoffMs: 500 }));
  const hellos: unknown[] = [];
  p.on("connected", (h) => hellos.push(h));
  const disconnects: Array<{ code: number }> = [];
  p.on("disconnected", (d) => disconnects.push(d));
  await p.start();
  const before = p.endpoint;
  assert.equal(before?.source, "file", "dialled from the discovery file");
  assert.ok(before?.boot_id && before.pid, `the endpoint names the agent: ${JSON.stringify(before)}`);
  const { client: c } = await LocalAPIClient.discover({ home: ww.home });
  // Kill -9 the agent and start it again (the harness owns the process).
  const res = await fetch(restartURL!, { method: "POST" });
  const newBoot = (await res.text()).trim();
  assert.equal(res.status, 200, newBoot);
  assert.notEqual(newBoot, before!.boot_id);
  await eventually("the provider reconnected to the new agent", () => hellos.length >= 2 && p.connected, 30_000);
  assert.ok(disconnects.length >= 1, "it saw the drop");
  assert.equal(p.endpoint?.boot_id, newBoot, "the endpoint was read afresh: the new boot id");
  assert.notEqual(p.endpoint?.pid, before!.pid, "and the new pid");
  // The cloud reaches the app's room again, and the same LocalAPIClient
  // talks to the new agent.
  const r = await eventually("read_room answered by the app after the restart", async () => {
    const r = await hubCall(ww, "read_room", ww.appProject!, { room_id: ROOM });
    return r.ok ? r : undefined;
  }, 30_000);
  assert.equal((r.result as { name?: string }).name, "App's room");
  const st = await eventually("status from the new agent", async () => {
    const s = await c.status();
    return s.provider.connected ? s : undefined;
  });
  assert.equal(st.provider.app, "restart-app");
  await p.close();
});
