// The room provider: the desktop app owns its Rooms and roomrelay asks it
// for them. The app dials a websocket on the local API endpoint (subprotocol
// roomrelay.provider.v1) and both sides speak JSON-RPC 2.0: the app says
// provider.hello and rooms.changed; roomrelay sends rooms.read, apps.list,
// apps.status, apps.files, apps.install and apps.set_build_state, which the
// app answers through the handlers it supplies, and $/cancelRequest when the
// cloud caller gave up. The newest provider connection wins: a replaced one
// (close code 4001) does not reconnect. Every other drop is dialled again
// with backoff, reading the discovery file afresh before each dial, so an
// agent restart (new pid, boot id, maybe socket) needs nothing from the app.
import { EventEmitter } from "node:events";
import net from "node:net";
import WebSocket from "ws";
import { API_PREFIX, HOST } from "./client.js";
import { CloseCodes, ProviderErrorCodes } from "./constants.js";
import { discover, type DiscoverOptions, type Endpoint } from "./discovery.js";
import { RoomrelayError } from "./errors.js";

export const PROVIDER_SUBPROTOCOL = "roomrelay.provider.v1";
export const PROVIDER_PROTOCOL_VERSION = 1;
/** The close code roomrelay uses when a newer provider connection replaced this one (CloseCodes.REPLACED). */
export const CLOSE_REPLACED = CloseCodes.REPLACED;
/** No protocol version in common: dialling again cannot help. */
export const CLOSE_UNSUPPORTED_VERSION = CloseCodes.UNSUPPORTED_VERSION;
/** A protocol error (no hello in time, binary, bad JSON). */
export const CLOSE_PROTOCOL_ERROR = CloseCodes.PROTOCOL_ERROR;
/** The owner's policy selects the builtin provider (`provider builtin`): the app is not used. */
export const CLOSE_NOT_SELECTED = CloseCodes.NOT_SELECTED;
/** Requests from roomrelay handled at once; more are refused (roomrelay caps its own side too). */
const MAX_IN_FLIGHT = 8;

export interface ProviderRoom {
  id: string;
  project: string;
  name: string;
}

/** Every request from roomrelay carries these (docs/provider-protocol.md). */
export interface RequestBase {
  /** The command's deadline, Unix milliseconds (same machine clock). */
  deadline_ms: number;
  project: string;
}
export interface RoomRef extends RequestBase {
  room_id: string;
}
export interface RoomsReadResult {
  /** Must equal the room_id asked for. */
  id: string;
  name: string;
  app_count: number;
}
export interface AppsListParams extends RoomRef {
  /** 1 to 50: answer at most this many. */
  limit: number;
  /** "" for the first page. */
  cursor: string;
}
export interface Launcher {
  state: "active" | "hidden";
  position: number;
}
export interface ProviderApp {
  instance_id: string;
  name: string;
  source: "snippet" | "repo";
  launcher: Launcher;
}
export interface AppsListResult {
  apps: ProviderApp[];
  /** "" on the last page. */
  next_cursor: string;
}
export interface AppRef extends RoomRef {
  instance_id: string;
}
export interface BuildState {
  state: "none" | "ok" | "failed";
  phase?: string;
  checked_at?: string;
  summary?: string;
}
export interface AppsStatusResult extends ProviderApp {
  review: { state: "approved" | "owner_added"; reviewed_at?: string };
  /** 64 lowercase hex digits, or "". */
  content_hash: string;
  /** Read only with the build_state capability. */
  build?: BuildState;
}
export interface AppsFilesResult {
  files: Record<string, string>;
  /** Must equal contentHash(files). */
  content_hash: string;
}
export interface AppsInstallParams extends RoomRef {
  proposal_id: string;
  /** Assigned by roomrelay at approval: install the app under this id. */
  instance_id: string;
  name: string;
  kind: "snippet" | "repo" | (string & {});
  /** With kind snippet. */
  files?: Record<string, string>;
  /** With kind repo. */
  repository_id?: string;
  version_id?: string;
  content_hash: string;
  approved_at?: string;
}
export interface AppsInstallResult {
  /** Must equal the instance_id asked for. */
  instance_id: string;
}
export interface SetBuildStateParams extends AppRef {
  content_hash: string;
  state: string;
  phase?: string;
  summary?: string;
  checked_at?: string;
}

/** What every handler gets besides its params. */
export interface RequestContext {
  id: string | number;
  method: string;
  /** Aborted on $/cancelRequest, at the deadline, or when the connection closes. */
  signal: AbortSignal;
  deadline?: Date;
}

type H<P, R> = (params: P, ctx: RequestContext) => R | Promise<R>;

/** The app's answers to roomrelay's requests; a missing one answers "method not found". */
export interface ProviderHandlers {
  roomsRead?: H<RoomRef, RoomsReadResult>;
  appsList?: H<AppsListParams, AppsListResult>;
  appsStatus?: H<AppRef, AppsStatusResult>;
  appsFiles?: H<AppRef, AppsFilesResult>;
  appsInstall?: H<AppsInstallParams, AppsInstallResult>;
  appsSetBuildState?: H<SetBuildStateParams, Record<string, unknown>>;
}

const methods: Record<string, keyof ProviderHandlers> = {
  "rooms.read": "roomsRead",
  "apps.list": "appsList",
  "apps.status": "appsStatus",
  "apps.files": "appsFiles",
  "apps.install": "appsInstall",
  "apps.set_build_state": "appsSetBuildState",
};

/**
 * A handler's refusal with a code (ProviderErrorCodes): not_found (no such
 * room or app), invalid_args, hash_mismatch (an apps.install whose files do
 * not hash to its content_hash), busy; what each does to an install is
 * INSTALL_ANSWERS. The message stays on the device (roomrelay logs it,
 * never forwards it).
 */
export class ProviderError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "ProviderError";
  }
}

export interface HelloResult {
  protocol_version: number;
  roomrelay?: { version?: string };
  projects?: string[];
  heartbeat_s?: number;
  [k: string]: unknown;
}

export interface ProviderOptions {
  /**
   * A fixed endpoint (tests). Without it, the usual way, the provider reads
   * the discovery file (localapi.json) before every dial, each reconnect
   * included: an agent restart moves its pid and boot id, and may move the
   * socket.
   */
  socketPath?: string;
  /** Where the discovery file is (a roomrelay home, the environment). */
  discover?: DiscoverOptions;
  app: { name: string; version: string };
  capabilities?: { install?: boolean; files?: boolean; build_state?: boolean; notifications?: boolean };
  handlers: ProviderHandlers;
  /** The app's room directory, sent after every hello. */
  rooms?: ProviderRoom[];
  /** Dial again when the connection drops or the agent is not running yet (default true). */
  reconnect?: boolean;
  maxBackoffMs?: number;
  /** Largest websocket message accepted (default 4 MiB). */
  maxPayload?: number;
}

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
}

/**
 * Provider keeps the app registered with the local agent, reconnecting on
 * its own. Events: "connected" (HelloResult; `endpoint` is then the
 * discovery file's contents it dialled), "disconnected" ({code, reason}),
 * "reconnecting" ({delayMs, error}), "replaced", "not_selected",
 * "request" ({method, params}) before each handler runs, and "error"
 * (Error) for what the app may want to log: emitted only when someone
 * listens, so an app without an "error" listener is never crashed by one
 * (a handler that throws is answered with code internal).
 */
export class Provider extends EventEmitter {
  private ws?: WebSocket;
  private rooms: ProviderRoom[];
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly inFlight = new Map<string, InFlight>();
  private stopped = false;
  private backoff = 100;
  private timer?: NodeJS.Timeout;
  /** The latest hello answer while connected. */
  hello?: HelloResult;
  /** The endpoint of the latest dial (from the discovery file, or socketPath). */
  endpoint?: Endpoint;

  constructor(private readonly opts: ProviderOptions) {
    super();
    this.rooms = opts.rooms ?? [];
  }

  get connected(): boolean {
    return this.hello !== undefined && this.ws?.readyState === WebSocket.OPEN;
  }

  /** start dials; it resolves at the first hello (and keeps reconnecting after, unless told not to). */
  start(): Promise<HelloResult> {
    this.stopped = false;
    const first = new Promise<HelloResult>((resolve, reject) => {
      const onHello = (h: HelloResult) => {
        this.off("fatal", onFatal);
        resolve(h);
      };
      const onFatal = (e: Error) => {
        this.off("connected", onHello);
        reject(e);
      };
      this.once("connected", onHello);
      this.once("fatal", onFatal);
    });
    void this.dial();
    return first;
  }

  /** setRooms replaces the directory and tells roomrelay at once when connected. */
  setRooms(rooms: ProviderRoom[]): void {
    this.rooms = rooms;
    if (this.connected) this.notify("rooms.changed", { rooms });
  }

  /** notify sends a JSON-RPC notification (e.g. apps.changed). */
  notify(method: string, params: unknown): void {
    this.send({ jsonrpc: "2.0", method, params });
  }

  /** close disconnects and stops reconnecting. */
  close(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    const ws = this.ws;
    if (!ws || ws.readyState === WebSocket.CLOSED) return Promise.resolve();
    return new Promise((resolve) => {
      ws.once("close", () => resolve());
      ws.close(1000, "app closing");
      setTimeout(() => {
        ws.terminate();
        resolve();
      }, 2000).unref();
    });
  }

  private async dial(): Promise<void> {
    if (this.stopped) return;
    let ep: Endpoint;
    try {
      ep = this.opts.socketPath !== undefined ? { transport: "unix", path: this.opts.socketPath, source: "option" } : await discover(this.opts.discover);
    } catch (err) {
      this.retry(err as Error);
      return;
    }
    if (this.stopped) return;
    this.endpoint = ep;
    const socketPath = ep.path;
    const ws = new WebSocket(`ws://${HOST}${API_PREFIX}/provider`, PROVIDER_SUBPROTOCOL, {
      createConnection: () => net.connect(socketPath),
      perMessageDeflate: false,
      maxPayload: this.opts.maxPayload ?? 4 << 20,
      handshakeTimeout: 10_000,
      headers: { "Roomrelay-Client": `${this.opts.app.name}/${this.opts.app.version}` },
    });
    this.ws = ws;
    ws.on("open", () => void this.onOpen(ws));
    ws.on("message", (data, isBinary) => this.onMessage(ws, data as Buffer, isBinary));
    ws.on("unexpected-response", (_req, res) => {
      const e = new RoomrelayError(res.statusCode === 403 ? "forbidden" : "bad_response", `provider: the agent answered HTTP ${res.statusCode} to the websocket upgrade`, { status: res.statusCode, retryable: (res.statusCode ?? 0) >= 500 });
      res.resume();
      ws.terminate();
      this.report(e);
      if (!e.retryable) {
        this.stopped = true;
        this.emit("fatal", e);
      }
    });
    ws.on("error", (err) => this.report(err));
    ws.on("close", (code, reason) => this.onClose(ws, code, reason.toString()));
  }

  private async onOpen(ws: WebSocket): Promise<void> {
    if (ws.protocol !== PROVIDER_SUBPROTOCOL) {
      ws.close(1002, "subprotocol");
      return;
    }
    try {
      const hello = (await this.call("provider.hello", {
        protocol_versions: [PROVIDER_PROTOCOL_VERSION],
        app: this.opts.app,
        capabilities: { install: true, files: true, build_state: true, notifications: false, ...this.opts.capabilities },
      })) as HelloResult;
      this.hello = hello;
      // The file was read before the dial: an agent that restarted binds
      // its socket (the same path) before it rewrites localapi.json, so a
      // dial in between reaches the new agent with the old file's pid and
      // boot id. The agent answered hello, so its file is written now:
      // read it again, so that endpoint names the agent that answered.
      if (this.opts.socketPath === undefined) {
        try {
          const fresh = await discover(this.opts.discover);
          if (fresh.path === this.endpoint?.path) this.endpoint = fresh;
        } catch {
          // Keep the endpoint dialled; the next dial reads the file again.
        }
      }
      this.backoff = 100;
      this.notify("rooms.changed", { rooms: this.rooms });
      this.emit("connected", hello);
    } catch (err) {
      this.report(err);
      ws.close(1002, "hello failed");
    }
  }

  /** call sends a request to roomrelay and waits for its answer. */
  call(method: string, params: unknown): Promise<unknown> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      if (!this.send({ jsonrpc: "2.0", id, method, params })) {
        this.pending.delete(id);
        reject(new RoomrelayError("agent_not_running", `provider: not connected (${method})`, { retryable: true }));
      }
    });
  }

  private send(msg: unknown): boolean {
    const ws = this.ws;
    if (!ws || ws.readyState !== WebSocket.OPEN) return false;
    ws.send(JSON.stringify(msg));
    return true;
  }

  private onMessage(ws: WebSocket, data: Buffer, isBinary: boolean): void {
    if (isBinary || ws !== this.ws) return;
    let msg: { id?: string | number | null; method?: string; params?: unknown; result?: unknown; error?: { code: number; message: string; data?: { code?: string } } };
    try {
      msg = JSON.parse(data.toString("utf8"));
    } catch {
      this.send({ jsonrpc: "2.0", id: null, error: { code: -32700, message: "parse error" } });
      return;
    }
    if (typeof msg !== "object" || msg === null) return;
    if (msg.method === undefined) {
      // An answer to one of our requests.
      const p = typeof msg.id === "number" ? this.pending.get(msg.id) : undefined;
      if (!p) return;
      this.pending.delete(msg.id as number);
      if (msg.error) p.reject(new RoomrelayError(msg.error.data?.code ?? "internal", msg.error.message));
      else p.resolve(msg.result);
      return;
    }
    if (msg.method === "$/cancelRequest") {
      const id = (msg.params as { id?: string | number } | undefined)?.id;
      if (id !== undefined) this.inFlight.get(String(id))?.abort(new RoomrelayError("canceled", "roomrelay canceled the request"));
      return;
    }
    if (msg.id === undefined || msg.id === null) return; // a notification we do not know: ignore (additive protocol)
    void this.handle(msg.id, msg.method, msg.params);
  }

  private async handle(id: string | number, method: string, params: unknown): Promise<void> {
    const name = methods[method];
    const fn = name ? (this.opts.handlers[name] as H<unknown, unknown> | undefined) : undefined;
    if (!fn) {
      this.send({ jsonrpc: "2.0", id, error: { code: -32601, message: `method not found: ${method}` } });
      return;
    }
    if (this.inFlight.size >= MAX_IN_FLIGHT) {
      this.send({ jsonrpc: "2.0", id, error: { code: -32000, message: "too many requests in flight", data: { code: "rate_limited" } } });
      return;
    }
    const key = String(id);
    const call = new InFlight(deadlineOf(params));
    this.inFlight.set(key, call);
    if (this.listenerCount("request") > 0) this.emit("request", { id, method, params });
    const ctx: RequestContext = {
      id,
      method,
      // Made on first use: most handlers answer at once and never look, and
      // an AbortController and a deadline timer per request were a good part
      // of this client's time per read (BenchmarkProviderReadRoom, #28 §4).
      get signal() {
        return call.signal;
      },
      deadline: call.deadline,
    };
    try {
      const out = fn(params ?? {}, ctx);
      // A handler that answers synchronously is answered in the same tick.
      const result = isThenable(out) ? await out : out;
      if (!call.expired()) this.send({ jsonrpc: "2.0", id, result: result ?? {} });
    } catch (err) {
      if (call.expired() && !(err instanceof ProviderError)) return; // canceled: roomrelay no longer waits
      const code = err instanceof ProviderError ? err.code : ProviderErrorCodes.INTERNAL;
      const message = err instanceof ProviderError ? err.message : "the app failed to answer";
      // Answer first: roomrelay must not wait for a deadline because the
      // app's own logging threw.
      this.send({ jsonrpc: "2.0", id, error: { code: -32000, message, data: { code } } });
      if (!(err instanceof ProviderError)) this.report(err instanceof Error ? err : new Error(`a ${method} handler threw ${String(err)}`));
    } finally {
      call.done();
      this.inFlight.delete(key);
    }
  }

  private onClose(ws: WebSocket, code: number, reason: string): void {
    if (ws !== this.ws) return;
    const wasConnected = this.hello !== undefined;
    this.hello = undefined;
    for (const [, p] of this.pending) p.reject(new RoomrelayError("agent_not_running", "provider: the connection closed", { retryable: true }));
    this.pending.clear();
    for (const [, call] of this.inFlight) call.abort(new RoomrelayError("agent_not_running", "the connection closed"));
    this.inFlight.clear();
    if (wasConnected) this.emit("disconnected", { code, reason });
    if (code === CLOSE_REPLACED || code === CLOSE_UNSUPPORTED_VERSION) {
      // A newer connection of this (or another) app took over: dialling
      // again would take it back and the two would fight. Or roomrelay
      // speaks no version this client does: dialling again cannot help.
      this.stopped = true;
      if (code === CLOSE_REPLACED) this.emit("replaced", { reason });
      this.emit("fatal", new RoomrelayError(code === CLOSE_REPLACED ? "replaced" : "unsupported_protocol_version", `provider: closed (${code} ${reason})`));
      return;
    }
    if (code === CLOSE_NOT_SELECTED) {
      // The owner chose the builtin provider; they may switch to the app
      // later (provider app), so keep trying, slowly.
      this.emit("not_selected", { reason });
      this.backoff = this.opts.maxBackoffMs ?? 5000;
    }
    this.retry(new RoomrelayError("agent_not_running", `provider: closed (${code} ${reason})`, { retryable: true }));
  }

  private retry(err: Error): void {
    if (this.stopped) return;
    if (this.opts.reconnect === false) {
      this.stopped = true;
      this.emit("fatal", err);
      return;
    }
    clearTimeout(this.timer);
    const delayMs = this.backoff;
    this.timer = setTimeout(() => void this.dial(), delayMs);
    this.backoff = Math.min(this.backoff * 2, this.opts.maxBackoffMs ?? 5000);
    this.emit("reconnecting", { delayMs, error: err });
  }

  /** report emits "error" only where someone listens: an EventEmitter throws an unheard one, which would crash the app. */
  private report(err: unknown): void {
    if (this.listenerCount("error") > 0) this.emit("error", err);
  }
}

/**
 * InFlight is one request from roomrelay being handled: aborted on
 * $/cancelRequest, at its deadline, or when the connection closes. Its
 * AbortSignal and deadline timer exist only once the handler asks for the
 * signal; without them the deadline is checked when the answer is ready.
 */
class InFlight {
  private ac?: AbortController;
  private timer?: NodeJS.Timeout;
  private reason?: unknown;

  constructor(readonly deadline?: Date) {}

  get signal(): AbortSignal {
    if (!this.ac) {
      this.ac = new AbortController();
      if (this.reason !== undefined) this.ac.abort(this.reason);
      else if (this.deadline) {
        const left = Math.max(0, this.deadline.getTime() - Date.now());
        this.timer = setTimeout(() => this.abort(new RoomrelayError("timeout", "the command's deadline passed")), left);
      }
    }
    return this.ac.signal;
  }

  abort(reason: unknown): void {
    if (this.reason !== undefined) return;
    this.reason = reason;
    clearTimeout(this.timer);
    this.ac?.abort(reason);
  }

  /** expired: aborted, or past the deadline (roomrelay no longer waits for the answer). */
  expired(): boolean {
    if (this.reason === undefined && this.deadline && Date.now() >= this.deadline.getTime()) {
      this.abort(new RoomrelayError("timeout", "the command's deadline passed"));
    }
    return this.reason !== undefined;
  }

  done(): void {
    clearTimeout(this.timer);
  }
}

function isThenable(v: unknown): v is PromiseLike<unknown> {
  return typeof (v as { then?: unknown } | null)?.then === "function";
}

/** deadlineOf reads params.deadline_ms, Unix milliseconds. */
function deadlineOf(params: unknown): Date | undefined {
  const d = (params as { deadline_ms?: unknown } | null)?.deadline_ms;
  if (typeof d !== "number" || !Number.isFinite(d) || d <= 0) return undefined;
  return new Date(d);
}
