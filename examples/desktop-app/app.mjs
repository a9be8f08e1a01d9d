#!/usr/bin/env node
// A small desktop app that owns its Rooms and plugs them into roomrelay:
// it keeps its Rooms in its own JSON file, registers with the running agent
// as the room provider, shows the relay's state and the proposals waiting
// for the owner, and approves a proposal bound to the content hash it shows,
// from its own prompt. Everything goes through @roomrelay/localapi.
//
//   node app.mjs [--home DIR] [--data FILE] [--project ID]
//
// Prompt commands: status, rooms, add-room ID NAME, list, show ID,
// approve ID [HASH], decline ID, quit. Lines starting with a word and a
// colon (ready:, relay:, approval needed:, installed: …) are stable output
// that scripts (the demo, the tests) wait for.
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import {
  HashMismatchError,
  LocalAPIClient,
  Provider,
  ProviderError,
  ProviderErrorCodes,
  contentHash,
} from "@roomrelay/localapi";
import { RoomsFile } from "./store.mjs";

const { values: opt } = parseArgs({
  options: {
    home: { type: "string" },
    data: { type: "string", default: "desktop-app.rooms.json" },
    project: { type: "string", default: "proj-a" },
  },
});
const discoverOpts = { home: opt.home ?? process.env.ROOMRELAY_HOME };
const store = new RoomsFile(opt.data, { project: opt.project });
const say = (line) => process.stdout.write(line + "\n");

// --- the relay's state and the review queue

// One client for the app's life: made by discover(), it re-reads
// localapi.json when the agent restarts (and the event stream resumes on it).
let client;
async function connectClient() {
  const found = await LocalAPIClient.discover({ ...discoverOpts, client: "rooms-desktop-app/0.1.0" });
  client = found.client;
  return found.endpoint;
}

async function showStatus() {
  const s = await client.status();
  const prov = s.provider.connected ? `provider ${s.provider.app ?? "connected"}` : "no provider";
  say(`relay: ${s.state}${s.hub ? ` (hub ${s.hub})` : ""}, ${prov}, ${s.pending_proposals} proposal(s) waiting`);
  if (s.last_error) say(`relay: last error: ${s.last_error}`);
}

async function listPending() {
  const ps = await client.proposals("pending");
  if (ps.length === 0) say("no proposals wait for your approval");
  for (const p of ps) say(`approval needed: ${p.id} "${p.name}" for room ${p.room_id} (${p.file_count} files, hash ${p.content_hash.slice(0, 12)})`);
  return ps;
}

async function show(id) {
  const p = await client.proposal(id);
  say(`proposal ${p.id}: "${p.name}" for room ${p.room_id} of ${p.project}, ${p.state}`);
  if (p.has_hidden) say(`WARNING: ${p.hidden_warning ?? "hidden characters in the code"}`);
  for (const f of p.files ?? []) {
    say(`--- ${f.path} (${f.bytes} bytes${f.hidden ? `, ${f.hidden.summary}` : ""})`);
    say(f.content);
  }
  // The hash is computed here, from what was shown: approval binds to it.
  const shown = Object.fromEntries((p.files ?? []).map((f) => [f.path, f.content]));
  const h = p.kind === "snippet" ? contentHash(shown) : p.content_hash;
  say(`content hash: ${h}`);
  return h;
}

async function approve(id, hash) {
  // Without a hash: the one of the code shown now (never a hash the agent
  // merely reports: the app recomputes it from the files it displays).
  const h = hash ?? (await show(id));
  try {
    const d = await client.approve(id, h);
    say(`approved: ${id}${d.repeated ? " (again)" : ""}, instance ${d.proposal.instance_id ?? "?"}`);
  } catch (err) {
    if (err instanceof HashMismatchError) say(`refused: ${id}: the code changed since you saw it; show it again`);
    else throw err;
  }
}

// --- the room provider: roomrelay asks, the app answers from its file

const handlers = {
  roomsRead({ project, room_id }) {
    const r = store.room(project, room_id);
    if (!r) throw new ProviderError(ProviderErrorCodes.NOT_FOUND, `no room ${room_id}`);
    return { id: r.id, name: r.name, app_count: r.apps.length };
  },
  appsList({ project, room_id, limit, cursor }) {
    const r = store.room(project, room_id);
    if (!r) throw new ProviderError(ProviderErrorCodes.NOT_FOUND, `no room ${room_id}`);
    const start = cursor ? Number(cursor) : 0;
    const page = r.apps.slice(start, start + limit);
    const next = start + limit < r.apps.length ? String(start + limit) : "";
    return { apps: page.map(({ instance_id, name, source, launcher }) => ({ instance_id, name, source, launcher })), next_cursor: next };
  },
  appsStatus({ project, room_id, instance_id }) {
    const a = store.app(project, room_id, instance_id);
    if (!a) throw new ProviderError(ProviderErrorCodes.NOT_FOUND, `no app ${instance_id}`);
    return {
      instance_id: a.instance_id, name: a.name, source: a.source, launcher: a.launcher,
      review: { state: a.proposal_id ? "approved" : "owner_added", reviewed_at: a.reviewed_at },
      content_hash: a.content_hash ?? "",
      ...(a.build ? { build: a.build } : {}),
    };
  },
  appsFiles({ project, room_id, instance_id }) {
    const a = store.app(project, room_id, instance_id);
    if (!a || a.source !== "snippet") throw new ProviderError(ProviderErrorCodes.NOT_FOUND, `no snippet app ${instance_id}`);
    return { files: a.files, content_hash: contentHash(a.files) };
  },
  appsInstall(p) {
    const r = store.install(p);
    if (r.error) {
      say(`install refused: ${p.proposal_id}: ${r.message}`);
      throw new ProviderError(r.error, r.message);
    }
    if (!r.repeated) say(`installed: "${p.name}" as ${r.instance_id} in room ${p.room_id} (hash ${p.content_hash.slice(0, 12)})`);
    return { instance_id: r.instance_id };
  },
  appsSetBuildState({ project, room_id, instance_id, state, phase, summary, checked_at }) {
    const a = store.app(project, room_id, instance_id);
    if (a) {
      a.build = { state, phase, summary, checked_at };
      store.save();
    }
    return {};
  },
};

// The provider reconnects on its own, reading localapi.json before every
// dial: an agent restart (new pid, boot id) needs no loop here.
const provider = new Provider({
  discover: discoverOpts,
  app: { name: "Rooms desktop app (example)", version: "0.1.0" },
  capabilities: { install: true, files: true, build_state: true, notifications: true },
  handlers,
  rooms: store.directory(),
});
let bootId;
provider.on("connected", (h) => {
  const boot = provider.endpoint?.boot_id;
  if (bootId && boot && boot !== bootId) say(`provider: the agent restarted (boot ${boot})`);
  bootId = boot;
  say(`ready: provider connected (protocol ${h.protocol_version}, projects ${(h.projects ?? []).join(",") || "none"})`);
});
provider.on("disconnected", ({ code, reason }) => say(`provider: disconnected (${code}${reason ? " " + reason : ""}); reconnecting`));
provider.on("replaced", () => say("provider: another window of the app took over"));
provider.on("not_selected", () => say("provider: the owner's policy uses roomrelay's builtin rooms (add `provider app` to use this app)"));
// Optional: without an "error" listener the provider still answers a
// throwing handler with internal and never crashes the app.
// The agent being away (restarting) is not news: "reconnecting" covers it.
const away = new Set(["agent_not_running", "no_discovery", "ENOENT", "ECONNREFUSED", "ECONNRESET"]);
provider.on("error", (err) => {
  if (!away.has(err.code)) say(`provider: ${err.message}`);
});

// --- live events

async function followEvents() {
  const stream = client.events({ initial: false });
  for await (const ev of stream) {
    const d = ev.data ?? {};
    switch (ev.type) {
      case "status":
        say(`relay: ${d.state ?? "changed"}`);
        break;
      case "proposal_created":
        say(`approval needed: ${d.proposal_id ?? d.id} "${d.name ?? ""}" for room ${d.room_id ?? "?"} (hash ${String(d.content_hash ?? "").slice(0, 12)})`);
        break;
      case "proposal_decided":
        say(`decided: ${d.proposal_id} ${d.state}${d.decided_via ? ` via ${d.decided_via}` : ""}`);
        break;
      case "install_changed":
        say(`install: ${d.proposal_id ?? ""} ${d.install_state ?? d.state ?? ""}`);
        break;
      case "resync":
        await showStatus().catch(() => {});
        break;
    }
  }
}

// --- the prompt

async function command(line) {
  const [cmd, ...args] = line.trim().split(/\s+/);
  switch (cmd) {
    case "":
      return;
    case "status":
      return showStatus();
    case "rooms":
      for (const r of store.data.rooms) say(`room ${r.id} "${r.name}" (${r.project}): ${r.apps.map((a) => a.name).join(", ") || "no apps"}`);
      return;
    case "add-room":
      store.addRoom(opt.project, args[0], args.slice(1).join(" ") || args[0]);
      provider.setRooms(store.directory());
      say(`room added: ${args[0]}`);
      return;
    case "list":
      return void (await listPending());
    case "show":
      return void (await show(args[0]));
    case "approve":
      return approve(args[0], args[1]);
    case "decline":
      await client.decline(args[0]);
      return say(`declined: ${args[0]}`);
    case "quit":
    case "exit":
      return quit();
    default:
      say("commands: status, rooms, add-room ID NAME, list, show ID, approve ID [HASH], decline ID, quit");
  }
}

async function quit() {
  await provider.close();
  say("bye");
  process.exit(0);
}

async function main() {
  const ep = await connectClient();
  say(`agent: ${ep.path} (boot ${ep.boot_id ?? "?"})`);
  await showStatus();
  await listPending();
  followEvents().catch((err) => say(`events: ${err.message}`));
  provider.start().catch((err) => say(`provider: ${err.message}`));
  const rl = createInterface({ input: process.stdin, output: process.stdout, terminal: process.stdin.isTTY });
  rl.setPrompt("rooms> ");
  if (process.stdin.isTTY) rl.prompt();
  // One command at a time, in order, also when lines arrive piped.
  let chain = Promise.resolve();
  rl.on("line", (line) => {
    chain = chain
      .then(() => command(line))
      .catch((err) => say(`error: ${err.code ? err.code + ": " : ""}${err.message}`))
      .then(() => process.stdin.isTTY && rl.prompt());
  });
  rl.on("close", () => void chain.then(quit));
  process.on("SIGINT", () => void quit());
  process.on("SIGTERM", () => void quit());
}

main().catch((err) => {
  say(`error: ${err.code ? err.code + ": " : ""}${err.message}`);
  process.exit(1);
});
