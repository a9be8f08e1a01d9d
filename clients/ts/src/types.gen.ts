// Generated from the local API's OpenAPI document (agent/localapi/openapi.json,
// whose components agent/localapi TestComponentsMatchGoTypes checks against
// the agent's Go types) by `go test ./agent/localapi -run TestTSTypes -update`.
// Do not edit: change the Go types and openapi.json, then regenerate; the
// test fails while this file differs from what the document generates.
// types.ts exports these under the client's public names.
//
// Within v1 fields are only added: every object may carry fields this
// version does not know; ignore them. A union ending in (string & {}) lists
// the values known today: accept others.

export interface ErrorResponse {
  error: { code: string; message: string; retryable: boolean };
}

export interface ProviderState {
  connected: boolean;
  app?: string;
  version?: string;
  /** the provider's process id as the peer check saw it (SO_PEERCRED, LOCAL_PEERPID, the pipe client's pid) */
  pid?: number;
  /** when this connection became the provider */
  since?: string;
  /** the provider's executable, where the OS tells it (Linux /proc, Windows), as the peer check saw it; shown to the owner, never used to decide */
  exe?: string;
  /** the room provider the owner's policy selects (app: the desktop app answers reads; builtin: roomrelay's own store) */
  selected?: "app" | "builtin" | (string & {});
}

export interface APIInfo {
  version: string;
  min: string;
}

export interface Status {
  /** connecting, online, backoff, sleeping, needs_enrollment, stopped, error (clients must accept others) */
  state: "connecting" | "online" | "backoff" | "sleeping" | "needs_enrollment" | "stopped" | "error" | (string & {});
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
  /** -1 when the store could not be read */
  pending_proposals: number;
  api: APIInfo;
  boot_id: string;
}

/** one line of the event stream; x-event-data maps each type to the schema of its data (false: no data) */
export interface AgentEvent<D = Record<string, unknown>> {
  seq: number;
  boot_id: string;
  time: string;
  /** status, policy_changed, proposal_created, proposal_decided, install_changed, build_state, command_ran, provider_changed, provider_selected, snapshot, resync, ping; clients must ignore types they do not know */
  type: "snapshot" | "status" | "policy_changed" | "proposal_created" | "proposal_decided" | "install_changed" | "build_state" | "command_ran" | "provider_changed" | "provider_selected" | "resync" | "ping" | (string & {});
  data?: D;
}

export interface Snapshot {
  status: Status;
  projects_revision: string;
  pending_proposals: string[];
  provider: ProviderState;
}

export interface RateInfo {
  events: number;
  per_seconds: number;
  burst: number;
}

export interface ProjectView {
  project: string;
  enabled: boolean;
  commands: string[];
  /** empty: every room */
  rooms: string[];
  rate: RateInfo;
  max?: Record<string, number>;
  enrolled: boolean;
}

export interface ProjectsResponse {
  revision: string;
  projects: ProjectView[];
}

export interface ProjectSpec {
  enabled: boolean;
  commands: string[];
  /** empty or ["*"]: every room */
  rooms?: string[];
  rate?: RateInfo;
  max?: Record<string, number>;
}

export interface EnableRequest {
  allow?: string[];
  deny?: string[];
  only?: string[];
  /** absent: unchanged; ["*"]: every room */
  rooms?: string[];
}

export interface ProjectResponse {
  revision: string;
  project: ProjectView;
  changed: boolean;
}

export interface Proposal {
  id: string;
  project: string;
  room_id: string;
  /** snippet or repo */
  kind: "snippet" | "repo" | (string & {});
  name: string;
  repository_id?: string;
  version_id?: string;
  idempotency_key: string;
  content_hash: string;
  /** pending, approved, declined */
  state: "pending" | "approved" | "declined" | (string & {});
  file_count: number;
  total_bytes: number;
  created_at: string;
  decided_at?: string;
  instance_id?: string;
  proposed_by?: string;
  /** an approved proposal's install: pending (the desktop app has not acknowledged it yet), installed, failed (see install_error); absent before a decision and for a declined proposal. Clients must accept other values */
  install_state?: "pending" | "installed" | "failed" | (string & {});
  /** why the install failed (roomrelay's text with the error code first, e.g. invalid_args when the app refused the content hash) */
  install_error?: string;
}

export interface ProposalsResponse {
  proposals: Proposal[];
}

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

export interface ProposalDetail extends Proposal {
  files: ProposalFile[];
  name_hidden?: HiddenReport;
  has_hidden: boolean;
  hidden_warning?: string;
}

export interface CheckResponse {
  proposal_id: string;
  content_hash: string;
  state: "ok" | "failed" | "none" | (string & {});
  summary: string;
  [k: string]: unknown;
}

export interface DecideRequest {
  /** required to approve */
  content_hash?: string;
  decided_via?: "app" | "cli";
}

export interface DecisionResponse {
  proposal: Proposal;
  state: "pending" | "approved" | "declined" | (string & {});
  decided_via: string;
  repeated: boolean;
}

export interface AuditOutcome {
  seq: number;
  time: string;
  command: string;
  project: string;
  room?: string;
  outcome: string;
  duration_ms: number;
}

export interface AuditResponse {
  entries: AuditOutcome[];
}

export interface ProposalDecidedData {
  proposal_id: string;
  project: string;
  room_id: string;
  state: "pending" | "approved" | "declined" | (string & {});
  content_hash: string;
  instance_id?: string;
  decided_via?: string;
  /** the install committed with an approval: installed (builtin room) or pending (a room the desktop app provides; install_changed follows) */
  install_state?: "pending" | "installed" | "failed" | (string & {});
}

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

export interface CommandRanData {
  command: string;
  project: string;
  room?: string;
  outcome: string;
  denied: boolean;
  duration_ms: number;
  caller?: string;
}

export interface OAuthApprovalRequest {
  code: string;
  client_id: string;
  /** what the client named itself; unverified unless client_verified */
  client_name: string;
  client_verified: boolean;
  redirect_uri: string;
  /** where the browser returns with the code: show it */
  redirect_host: string;
  /** what the client asked for (write implies read) */
  scope: "read" | "write" | (string & {});
  /** this device's projects, the ones it may approve for */
  projects: string[];
  /** the browser's address as the hub saw it */
  requested_from?: string;
  user_agent?: string;
  expires_at: string;
  [k: string]: unknown;
}

export interface OAuthDecideRequest {
  approve: boolean;
  /** required when the device is enrolled for several projects */
  project?: string;
  /** default read; write (proposing apps, each still needing the owner's approval) only when the client asked for it */
  scope?: "read" | "write";
  decided_via?: "app" | "cli";
}

export interface OAuthDecideResponse {
  approved: boolean;
  project?: string;
  scope?: "read" | "write" | (string & {});
  /** the grant is bound to this device */
  device?: string;
  decided_via: string;
  [k: string]: unknown;
}

/** data of install_changed: an approved app's delivery to the desktop app */
export interface InstallChangedData {
  proposal_id: string;
  instance_id: string;
  project: string;
  room_id: string;
  /** pending, installed, failed */
  install_state: "pending" | "installed" | "failed" | (string & {});
  /** why it failed */
  error?: string;
}

/** data of provider_changed: the room provider connected (app, pid, exe, since) or went away */
export interface ProviderChangedData {
  connected: boolean;
  app?: { name: string; version: string; capabilities: { install: boolean; files: boolean; build_state: boolean; notifications: boolean } };
  pid?: number;
  exe?: string;
  since?: string;
}

/** data of build_state: a smoke-run's outcome (after an approval, of the approved files in roomrelay's store; or smoke_run_room_app) */
export interface BuildStateData {
  project: string;
  room_id: string;
  instance_id: string;
  /** the hash of the files that ran */
  content_hash: string;
  /** ok or failed (clients must accept others) */
  state: "ok" | "failed" | (string & {});
  phase?: string;
  /** one line; the error text only for apps that came from a cloud proposal */
  summary?: string;
  checked_at: string;
}

/** the room provider the policy selects */
export interface ProviderSelection {
  provider: "app" | "builtin" | (string & {});
  /** the policy file's revision (also the ETag) */
  revision?: string;
  /** PUT: whether the policy file changed */
  changed?: boolean;
}

export interface ProviderSelectRequest {
  provider: "app" | "builtin";
}

/** data of provider_selected: the owner's room-provider selection changed through the local API, and which process changed it */
export interface ProviderSelectedData {
  provider: "app" | "builtin" | (string & {});
  pid?: number;
  exe?: string;
}

/** data of status: the agent's status after a connection-state change (GET status without provider, pending_proposals, api and boot_id) */
export interface StatusEventData {
  /** connecting, online, backoff, sleeping, needs_enrollment, stopped, error (clients must accept others) */
  state: string;
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
}

/** data of policy_changed: the enabled projects after a reload (API, CLI or a hand edit) and the policy file's revision (its ETag) */
export interface PolicyChangedData {
  projects: { project: string; commands: string[] }[];
  revision: string;
}

/** data of resync: why the stream cannot resume where asked; a snapshot line follows */
export interface ResyncData {
  reason: string;
}
