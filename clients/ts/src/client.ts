// A thin client of the agent's local API over node:http with socketPath, so
// the same code reaches a unix socket and a Windows named pipe. No runtime
// dependency beyond Node.
import http from "node:http";
import { AgentNotRunningError, RoomrelayError, errorFromBody, isTransportGone } from "./errors.js";
import { discover, type DiscoverOptions, type Endpoint } from "./discovery.js";
import { EventStream, type EventStreamOptions } from "./events.js";
import type { OAuthApprovalRequest, OAuthDecideResponse, OAuthDecision } from "./oauth.js";
import type { AuditOutcome, CheckResponse, DecisionResponse, EnableRequest, ProjectResponse, ProjectSpec, ProjectsResponse, Proposal, ProposalDetail, Status } from "./types.js";

export const API_PREFIX = "/localapi/v1";
/** The Host header the agent expects of local clients. */
export const HOST = "roomrelay.local";
/** Bodies larger than this are refused before parsing (the agent's answers are small). */
const MAX_BODY = 16 << 20;

export interface ClientOptions {
  /** The unix socket or Windows pipe (an Endpoint's path). */
  socketPath: string;
  /** Sent as Roomrelay-Client ("app/version"); the agent logs and audits it. */
  client?: string;
  /** Per request (default 30 s); the events stream has none. */
  timeoutMs?: number;
}

export interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

export class LocalAPIClient {
  /** The endpoint in use; a client made by discover() moves it when the agent restarts elsewhere. */
  socketPath: string;
  /** The discovery file's contents last read (clients made by discover()). */
  endpoint?: Endpoint;
  private readonly discoverOpts?: DiscoverOptions;
  readonly clientName: string;
  readonly timeoutMs: number;
  /** The Roomrelay-Api-Version of the latest answer. */
  apiVersion?: string;

  constructor(opts: ClientOptions & { discover?: DiscoverOptions; endpoint?: Endpoint }) {
    this.socketPath = opts.socketPath;
    this.discoverOpts = opts.discover;
    this.endpoint = opts.endpoint;
    this.clientName = opts.client ?? "roomrelay-localapi-ts/0.1.0";
    this.timeoutMs = opts.timeoutMs ?? 30_000;
  }

  /**
   * discover finds the running agent (see discover()) and returns a client
   * for it. That client re-reads the discovery file when the endpoint
   * refuses a connection (the agent restarted: new pid and boot id, maybe a
   * new socket) and retries once on the new endpoint, so an app keeps one
   * client across agent restarts. Only a request that never reached the
   * agent is retried.
   */
  static async discover(opts: DiscoverOptions & Omit<ClientOptions, "socketPath"> = {}): Promise<{ client: LocalAPIClient; endpoint: Endpoint }> {
    const endpoint = await discover(opts);
    const d: DiscoverOptions = { home: opts.home, env: opts.env, platform: opts.platform };
    return { client: new LocalAPIClient({ ...opts, socketPath: endpoint.path, discover: d, endpoint }), endpoint };
  }

  /** open starts a request and resolves with the response head; the caller reads the body. */
  async open(method: string, path: string, opts: { body?: unknown; headers?: Record<string, string>; signal?: AbortSignal; timeoutMs?: number } = {}): Promise<http.IncomingMessage> {
    try {
      return await this.openOnce(method, path, opts);
    } catch (err) {
      // Refused or no socket: the request never reached an agent, so it is
      // safe to send again once the discovery file names a live endpoint.
      if (!this.discoverOpts || !(err instanceof AgentNotRunningError) || !isDialRefused(err.cause)) throw err;
      let ep: Endpoint;
      try {
        ep = await discover(this.discoverOpts);
      } catch {
        throw err;
      }
      if (ep.path === this.socketPath && ep.boot_id === this.endpoint?.boot_id) throw err;
      this.endpoint = ep;
      this.socketPath = ep.path;
      return this.openOnce(method, path, opts);
    }
  }

  private openOnce(method: string, path: string, opts: { body?: unknown; headers?: Record<string, string>; signal?: AbortSignal; timeoutMs?: number }): Promise<http.IncomingMessage> {
    const payload = opts.body === undefined ? undefined : Buffer.from(JSON.stringify(opts.body), "utf8");
    const headers: Record<string, string> = { Accept: "application/json", "Roomrelay-Client": this.clientName, ...opts.headers };
    if (payload) {
      headers["Content-Type"] = "application/json";
      headers["Content-Length"] = String(payload.length);
    }
    return new Promise((resolve, reject) => {
      const req = http.request({ socketPath: this.socketPath, host: HOST, method, path, headers, signal: opts.signal });
      const timeout = opts.timeoutMs ?? this.timeoutMs;
      if (timeout > 0) {
        req.setTimeout(timeout, () => req.destroy(new RoomrelayError("timeout", `${method} ${path}: no answer in ${timeout} ms`, { retryable: true })));
      }
      req.on("response", (res) => {
        req.setTimeout(0);
        const v = res.headers["roomrelay-api-version"];
        if (typeof v === "string") this.apiVersion = v;
        resolve(res);
      });
      req.on("error", (err) => reject(wrapTransport(err, method, path)));
      req.end(payload);
    });
  }

  /** request sends a request and reads the whole answer; an error status throws its typed exception. */
  async request(method: string, path: string, opts: { body?: unknown; headers?: Record<string, string>; signal?: AbortSignal } = {}): Promise<RawResponse> {
    const res = await this.open(method, path, opts);
    const body = await readBody(res, method, path);
    if (res.statusCode === undefined || res.statusCode >= 400) {
      throw errorFromBody(res.statusCode ?? 0, parseJSON(body));
    }
    return { status: res.statusCode, headers: res.headers, body };
  }

  async json<T>(method: string, path: string, opts: { body?: unknown; headers?: Record<string, string>; signal?: AbortSignal } = {}): Promise<T> {
    const r = await this.request(method, path, opts);
    const v = parseJSON(r.body);
    if (v === undefined) throw new RoomrelayError("bad_response", `${method} ${path}: the answer is not JSON`, { status: r.status });
    return v as T;
  }

  /** GET /status: the live agent state, the provider's, pending proposals, the API version. */
  status(): Promise<Status> {
    return this.json<Status>("GET", `${API_PREFIX}/status`);
  }

  /** GET /projects: each project's policy, and the revision a write must name (If-Match). */
  projects(): Promise<ProjectsResponse> {
    return this.json<ProjectsResponse>("GET", `${API_PREFIX}/projects`);
  }

  /** PUT /projects/{id} with If-Match: revision; a stale one throws PreconditionFailedError. */
  putProject(id: string, spec: ProjectSpec, revision: string): Promise<ProjectResponse> {
    return this.json<ProjectResponse>("PUT", `${API_PREFIX}/projects/${encodeURIComponent(id)}`, { body: spec, headers: { "If-Match": `"${revision}"` } });
  }

  /** POST /projects/{id}/enable: the CLI's `roomrelay enable` rules (allow, deny, only, rooms). */
  enableProject(id: string, req: EnableRequest = {}): Promise<ProjectResponse> {
    return this.json<ProjectResponse>("POST", `${API_PREFIX}/projects/${encodeURIComponent(id)}/enable`, { body: req });
  }

  /** POST /projects/{id}/disable. */
  disableProject(id: string): Promise<ProjectResponse> {
    return this.json<ProjectResponse>("POST", `${API_PREFIX}/projects/${encodeURIComponent(id)}/disable`, { body: {} });
  }

  /** GET /proposals (no files); state is pending (the agent's default), approved, declined or all. */
  async proposals(state?: "pending" | "approved" | "declined" | "all"): Promise<Proposal[]> {
    const q = state ? `?state=${encodeURIComponent(state)}` : "";
    const v = await this.json<{ proposals?: Proposal[] }>("GET", `${API_PREFIX}/proposals${q}`);
    return v.proposals ?? [];
  }

  /** GET /proposals/{id}: every file in full and the hidden-character report. */
  proposal(id: string): Promise<ProposalDetail> {
    return this.json<ProposalDetail>("GET", `${API_PREFIX}/proposals/${encodeURIComponent(id)}`);
  }

  /** POST /proposals/{id}/check: the sandbox's verdict on a pending snippet before approval. */
  checkProposal(id: string): Promise<CheckResponse> {
    return this.json<CheckResponse>("POST", `${API_PREFIX}/proposals/${encodeURIComponent(id)}/check`, { body: {} });
  }

  /**
   * POST /proposals/{id}/approve bound to the content hash the owner saw;
   * another hash throws HashMismatchError and the proposal stays pending.
   * Approving again with the same hash answers the same decision.
   */
  approve(id: string, contentHash: string, decidedVia: "app" | "cli" = "app"): Promise<DecisionResponse> {
    return this.json<DecisionResponse>("POST", `${API_PREFIX}/proposals/${encodeURIComponent(id)}/approve`, { body: { content_hash: contentHash, decided_via: decidedVia } });
  }

  /** POST /proposals/{id}/decline: the files are discarded; declining an approved one throws ConflictError. */
  decline(id: string, decidedVia: "app" | "cli" = "app"): Promise<DecisionResponse> {
    return this.json<DecisionResponse>("POST", `${API_PREFIX}/proposals/${encodeURIComponent(id)}/decline`, { body: { decided_via: decidedVia } });
  }

  /**
   * GET /oauth/{code}: what an MCP client's sign-in asks this device's owner
   * to approve (the code the hub's consent page shows). An unknown, expired
   * or decided code throws NotFoundError.
   */
  oauthRequest(code: string): Promise<OAuthApprovalRequest> {
    return this.json<OAuthApprovalRequest>("GET", `${API_PREFIX}/oauth/${encodeURIComponent(code)}`);
  }

  /**
   * POST /oauth/{code}: approve (read unless scope "write") or deny through
   * the hub with the device token; the grant reaches this device's rooms in
   * one project. A project this device is not enrolled for throws
   * ForbiddenError; a request already decided ConflictError.
   */
  decideOAuth(code: string, decision: OAuthDecision): Promise<OAuthDecideResponse> {
    return this.json<OAuthDecideResponse>("POST", `${API_PREFIX}/oauth/${encodeURIComponent(code)}`, { body: { decided_via: "app", ...decision } });
  }

  /** GET /audit: recent outcomes, newest first (no arguments, no contents). */
  async audit(limit?: number): Promise<AuditOutcome[]> {
    const q = limit ? `?limit=${limit}` : "";
    const v = await this.json<{ entries?: AuditOutcome[] }>("GET", `${API_PREFIX}/audit${q}`);
    return v.entries ?? [];
  }

  /** GET /openapi.json: the contract this agent serves. */
  openapi(): Promise<Record<string, unknown>> {
    return this.json("GET", `${API_PREFIX}/openapi.json`);
  }

  /** events opens the event stream: an async iterable that resumes with since= and reports resyncs. */
  events(opts: EventStreamOptions = {}): EventStream {
    return new EventStream(this, opts);
  }
}

/** isDialRefused: the connect itself failed (nothing sent). */
function isDialRefused(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return code === "ENOENT" || code === "ECONNREFUSED";
}

function wrapTransport(err: unknown, method: string, path: string): Error {
  if (err instanceof RoomrelayError) return err;
  if ((err as Error | null)?.name === "AbortError") return err as Error;
  if (isTransportGone(err)) {
    return new AgentNotRunningError(`${method} ${path}: the roomrelay agent is not running (${(err as Error).message})`, err);
  }
  return new RoomrelayError("internal", `${method} ${path}: ${(err as Error)?.message ?? String(err)}`, { retryable: true, cause: err });
}

function readBody(res: http.IncomingMessage, method: string, path: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let n = 0;
    res.on("data", (c: Buffer) => {
      n += c.length;
      if (n > MAX_BODY) {
        res.destroy();
        reject(new RoomrelayError("bad_response", `${method} ${path}: the answer is over ${MAX_BODY} bytes`));
        return;
      }
      chunks.push(c);
    });
    res.on("end", () => resolve(Buffer.concat(chunks)));
    res.on("error", (err) => reject(wrapTransport(err, method, path)));
  });
}

function parseJSON(b: Buffer): unknown {
  if (b.length === 0) return undefined;
  try {
    return JSON.parse(b.toString("utf8"));
  } catch {
    return undefined;
  }
}
