// OAuth device approval through the agent (docs/oauth.md, docs/localapi.md):
// an MCP client's sign-in shows a short code on the hub's consent page; the
// app shows what asks and lets its owner approve for this device's rooms.

/** GET /oauth/{code}: what the sign-in asks for. */
export interface OAuthApprovalRequest {
  code: string;
  client_id: string;
  /** What the client named itself: unverified unless client_verified. */
  client_name: string;
  client_verified: boolean;
  redirect_uri: string;
  /** Where the browser returns with the code: show it. */
  redirect_host: string;
  /** What the client asked for: "read", or "write" (read and propose apps). */
  scope: "read" | "write" | (string & {});
  /** This device's projects, the ones it may approve for. */
  projects: string[];
  /** The browser's address as the hub saw it, and its user agent. */
  requested_from?: string;
  user_agent?: string;
  expires_at: string;
  [k: string]: unknown;
}

/** The body of POST /oauth/{code}. */
export interface OAuthDecision {
  approve: boolean;
  /** Required when the device is enrolled for several projects. */
  project?: string;
  /** Default read; write only when the client asked for it (each proposal still needs the owner's approval). */
  scope?: "read" | "write";
  decided_via?: "app" | "cli";
}

/** The answer to POST /oauth/{code}: an approved grant is bound to this device. */
export interface OAuthDecideResponse {
  approved: boolean;
  project?: string;
  scope?: string;
  device?: string;
  decided_via: string;
  [k: string]: unknown;
}
