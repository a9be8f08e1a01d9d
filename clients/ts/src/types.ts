// The local API's shapes (/localapi/v1). Their one source is the agent's Go
// types: agent/localapi/openapi.json is checked against them field by field
// (agent/localapi TestComponentsMatchGoTypes), and types.gen.ts is generated
// from openapi.json (agent/localapi TestTSTypes, which fails when the file
// differs from what the document generates). This file only names what the
// client exports. Within v1 fields are only added: every object may carry
// fields this version does not know; ignore them.
import type { Proposal, Status } from "./types.gen.js";

export type {
  AgentEvent,
  AuditOutcome,
  BuildStateData,
  CheckResponse,
  CommandRanData,
  DecisionResponse,
  EnableRequest,
  HiddenReport,
  InstallChangedData,
  PolicyChangedData,
  ProjectResponse,
  ProjectSpec,
  ProjectView,
  ProjectsResponse,
  Proposal,
  ProposalCreatedData,
  ProposalDecidedData,
  ProposalDetail,
  ProposalFile,
  ProviderChangedData,
  ProviderState,
  RateInfo,
  ResyncData,
  Snapshot,
  Status,
  StatusEventData,
} from "./types.gen.js";

/** The agent's connection state: the values known today, others possible. */
export type AgentState = Status["state"];
/** A proposal's state: the values known today, others possible. */
export type ProposalState = Proposal["state"];
/** An approved proposal's install: the values known today, others possible. */
export type InstallState = NonNullable<Proposal["install_state"]>;
