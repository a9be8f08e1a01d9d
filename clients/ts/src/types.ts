// The local API's shapes (/localapi/v1), written from its OpenAPI document
// (GET /localapi/v1/openapi.json); test/agent.test.ts checks them against the
// document a real agent serves. Within v1 fields are only added: every
// object may carry fields this version does not know, and clients ignore them.

export type AgentState = "online" | "connecting" | "sleeping" | "backoff" | "needs_enrollment" | "stopped" | (string & {});

export interface ProviderState {
  connected: boolean;
  app?: string;
  version?: string;
  pid?: number;
  since?: string;
  [k: string]: unknown;
}

export interface Status {
  state: AgentState;
  hub?: string;
  device_id?: string;
  session_id?: string;
  connected_since?: string;
  last_error?: string;
  last_error_at?: string;
  next_retry_at?: string;
  reconnects?: number;
  in_flight?: number;
  queued_events?: number;
  provider?: ProviderState;
  pending_proposals?: number;
  api?: { version: string; min?: string };
  boot_id?: string;
  [k: string]: unknown;
}

export interface Project {
  id: string;
  enrolled?: boolean;
  enabled: boolean;
  commands?: string[];
  rooms?: "*" | string[];
  rate?: unknown;
  max?: unknown;
  [k: string]: unknown;
}

export interface ProjectsList {
  projects: Project[];
  /** The policy revision: send it back as If-Match. */
  etag: string;
}

/** The CLI's enable/disable flags: --allow, --deny, --only, --rooms. */
export interface EnableRequest {
  allow?: string[];
  deny?: string[];
  only?: string[];
  rooms?: "*" | string[];
}

export type ProposalState = "pending" | "approved" | "declined" | "expired" | (string & {});
export type InstallState = "pending" | "installed" | "failed" | (string & {});

export interface ProposalSummary {
  id: string;
  project: string;
  room_id: string;
  kind: "snippet" | "repo" | (string & {});
  name: string;
  content_hash: string;
  file_count?: number;
  total_bytes?: number;
  proposed_by?: string;
  created_at?: string;
  state: ProposalState;
  install_state?: InstallState;
  [k: string]: unknown;
}

export interface ProposalFile {
  path: string;
  content: string;
  size?: number;
  lines?: number;
  hidden?: unknown;
  [k: string]: unknown;
}

export interface Proposal extends ProposalSummary {
  files?: ProposalFile[];
  repository_id?: string;
  version_id?: string;
}

export interface Decision {
  id?: string;
  state: ProposalState;
  install_state?: InstallState;
  instance_id?: string;
  [k: string]: unknown;
}

/** One line of GET /localapi/v1/events. */
export interface AgentEvent<D = Record<string, unknown>> {
  seq: number;
  boot_id: string;
  time?: string;
  type:
    | "snapshot"
    | "status"
    | "policy_changed"
    | "proposal_created"
    | "proposal_decided"
    | "install_changed"
    | "build_state"
    | "command_ran"
    | "provider_changed"
    | "resync"
    | "ping"
    | (string & {});
  data: D;
}

export interface AuditEntry {
  command?: string;
  project?: string;
  room?: string;
  outcome?: string;
  code?: string;
  ms?: number;
  [k: string]: unknown;
}
