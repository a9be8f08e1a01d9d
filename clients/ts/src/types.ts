// The local API's shapes (/localapi/v1), written from its OpenAPI document
// (GET /localapi/v1/openapi.json, agent/localapi/openapi.json), which Go
// checks against the agent's Go types (agent/localapi
// TestComponentsMatchGoTypes). test/types.test.ts checks every interface
// here against the document field by field (names, and which are
// optional), so an edit that drifts fails CI; the suite against a real
// agent (test/agent.test.ts) checks the document the agent serves. Within v1 fields are only added:
// every object may carry fields this version does not know; ignore them.

export type AgentState = "online" | "connecting" | "sleeping" | "backoff" | "needs_enrollment" | "stopped" | (string & {});

export interface ProviderState {
  connected: boolean;
  /** The room provider the owner's policy selects (app: the desktop app answers reads; builtin: roomrelay's own store). */
  selected?: "app" | "builtin" | (string & {});
  app?: string;
  version?: string;
  /** The provider's process id, as the agent's peer check saw it. */
  pid?: number;
  /** The provider's executable, where the OS tells it (Linux, Windows); for the owner's eyes. */
  exe?: string;
  /** When this connection became the provider. */
  since?: string;
}

export interface Status {
  state: AgentState;
  hub: string;
  device_id: string;
  session_id?: string;
  connected_since?: string;
  last_error?: string;
  last_error_at?: string;
  next_retry_at?: string;
  reconnects: number;
  in_flight: number;
  queued_events: number;
  notes?: string[];
  pid: number;
  updated_at: string;
  provider: ProviderState;
  /** -1 when the agent could not count them. */
  pending_proposals: number;
  api: { version: string; min: string };
  boot_id: string;
}

export interface RateInfo {
  events: number;
  per_seconds: number;
  burst: number;
}

/** One project of GET /projects: its policy and whether the hub enrolled the device for it. */
export interface ProjectView {
  project: string;
  enabled: boolean;
  commands: string[];
  /** Empty: every room of the project. */
  rooms: string[];
  rate: RateInfo;
  max?: Record<string, number>;
  enrolled: boolean;
}

export interface ProjectsResponse {
  /** The policy revision, also the ETag: send it as If-Match. */
  revision: string;
  projects: ProjectView[];
}

/** PUT /projects/{id}: the project's whole policy. */
export interface ProjectSpec {
  enabled: boolean;
  commands: string[];
  /** Absent, empty or ["*"]: every room. */
  rooms?: string[];
  rate?: RateInfo;
  max?: Record<string, number>;
}

/** The CLI's enable flags: --allow, --deny, --only, --rooms. */
export interface EnableRequest {
  allow?: string[];
  deny?: string[];
  only?: string[];
  rooms?: string[];
}

export interface ProjectResponse {
  revision: string;
  project: ProjectView;
  /** False when the change was already in force (nothing written). */
  changed: boolean;
}

export type ProposalState = "pending" | "approved" | "declined" | (string & {});
export type InstallState = "pending" | "installed" | "failed" | (string & {});

export interface Proposal {
  id: string;
  project: string;
  room_id: string;
  kind: "snippet" | "repo" | (string & {});
  name: string;
  repository_id?: string;
  version_id?: string;
  idempotency_key: string;
  content_hash: string;
  state: ProposalState;
  file_count: number;
  total_bytes: number;
  created_at: string;
  decided_at?: string;
  instance_id?: string;
  proposed_by?: string;
  /** An approved proposal's install; absent before a decision and for a declined one. */
  install_state?: InstallState;
  /** Why the install failed (install_state "failed"). */
  install_error?: string;
}

/** Hidden characters found in a text (the review page's banner). */
export interface HiddenReport {
  control: number;
  bidi: number;
  invisible: number;
  runes: string[];
  more?: boolean;
  summary: string;
}

export interface ProposalFile {
  path: string;
  content: string;
  bytes: number;
  lines: number;
  hidden?: HiddenReport;
}

/** GET /proposals/{id}: every file in full, in path order, with the hidden-character report. */
export interface ProposalDetail extends Proposal {
  files: ProposalFile[];
  name_hidden?: HiddenReport;
  has_hidden: boolean;
  hidden_warning?: string;
}

export interface CheckResponse {
  proposal_id: string;
  content_hash: string;
  state: string;
  summary: string;
  [k: string]: unknown;
}

export interface DecisionResponse {
  proposal: Proposal;
  state: ProposalState;
  decided_via: string;
  /** True when the same decision had been made before (idempotent repeat). */
  repeated: boolean;
}

export interface AuditOutcome {
  seq: number;
  time: string;
  command: string;
  project: string;
  room?: string;
  /** "ok", an error code, or "denied:<code>". */
  outcome: string;
  duration_ms: number;
}

/** The data of a snapshot line (initial=1, and after a resync). */
export interface Snapshot {
  status: Status;
  projects_revision: string;
  pending_proposals: string[];
  provider: ProviderState;
}

/** One line of GET /localapi/v1/events. */
export interface AgentEvent<D = Record<string, unknown>> {
  seq: number;
  boot_id: string;
  time: string;
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
  /** Absent for events that carry nothing (e.g. ping). */
  data?: D;
}

/** data of proposal_created. */
export interface ProposalCreatedData {
  proposal_id: string;
  project: string;
  room_id: string;
  kind: string;
  name: string;
  content_hash: string;
  file_count: number;
  total_bytes: number;
  proposed_by?: string;
  created_at: string;
}

/** data of proposal_decided. */
export interface ProposalDecidedData {
  proposal_id: string;
  project: string;
  room_id: string;
  state: ProposalState;
  content_hash: string;
  instance_id?: string;
  decided_via?: string;
  /** The install committed with an approval: installed (builtin room) or pending (install_changed follows). */
  install_state?: InstallState;
}

/** data of install_changed: an approved app's delivery to the provider. */
export interface InstallChangedData {
  proposal_id: string;
  instance_id: string;
  project: string;
  room_id: string;
  install_state: InstallState;
  error?: string;
}

/** data of build_state: a smoke-run's outcome (after an approval, of the approved files in the agent's store; or smoke_run_room_app). */
export interface BuildStateData {
  project: string;
  room_id: string;
  instance_id: string;
  /** The hash of the files that ran. */
  content_hash: string;
  state: "ok" | "failed" | (string & {});
  phase?: string;
  summary?: string;
  checked_at: string;
}

/** data of provider_changed. */
export interface ProviderChangedData {
  connected: boolean;
  app?: { name: string; version: string; capabilities?: { install?: boolean; files?: boolean; build_state?: boolean; notifications?: boolean } };
  /** The connection's process and executable as the peer check saw them, and since when (absent when disconnected). */
  pid?: number;
  exe?: string;
  since?: string;
}

/** data of command_ran (after its audit line; never arguments). */
export interface CommandRanData {
  command: string;
  project: string;
  room?: string;
  outcome: string;
  denied: boolean;
  duration_ms: number;
  caller?: string;
}
