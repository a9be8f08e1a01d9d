// The local API's types are generated: Go types → openapi.json (agent/localapi
// TestComponentsMatchGoTypes) → src/types.gen.ts (agent/localapi TestTSTypes,
// which fails while the file differs from what openapi.json generates). This
// test checks what the client makes of the generated file: every public name
// it has always exported is still there (tsc fails here otherwise), the open
// value sets still take values this version does not know, and the file
// still says it is generated.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";
import type * as api from "../src/index.js";

// dist/test/types.test.js -> the package root
const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");

/** The client's public type names, each one used so tsc checks it exists. */
export type PublicTypes = [
  api.AgentEvent,
  api.AgentState,
  api.AuditOutcome,
  api.BuildStateData,
  api.CheckResponse,
  api.CommandRanData,
  api.DecisionResponse,
  api.EnableRequest,
  api.HiddenReport,
  api.InstallChangedData,
  api.InstallState,
  api.OAuthApprovalRequest,
  api.OAuthDecideResponse,
  api.OAuthDecision,
  api.ProjectResponse,
  api.ProjectSpec,
  api.ProjectView,
  api.ProjectsResponse,
  api.Proposal,
  api.ProposalCreatedData,
  api.ProposalDecidedData,
  api.ProposalDetail,
  api.ProposalFile,
  api.ProposalState,
  api.ProviderChangedData,
  api.ProviderState,
  api.RateInfo,
  api.Snapshot,
  api.Status,
];

test("the open value sets take values this version does not know", () => {
  const state: api.AgentState = "a_state_from_a_later_agent";
  const known: api.ProposalState = "approved";
  const install: api.InstallState = "installed";
  const ev: api.AgentEvent<api.ProposalDecidedData> = {
    seq: 1,
    boot_id: "b",
    time: "2026-01-01T00:00:00Z",
    type: "proposal_decided",
    data: { proposal_id: "p", project: "p1", room_id: "r", state: known, content_hash: "", install_state: install },
  };
  assert.equal(ev.data?.state, "approved");
  assert.equal(state, "a_state_from_a_later_agent");
  // The check is tsc's: these lines compile only while the unions stay open.
  const laterProposal: api.ProposalState = "a_proposal_state_from_a_later_agent";
  const laterInstall: api.InstallState = "an_install_state_from_a_later_agent";
  assert.equal(laterProposal + laterInstall, "a_proposal_state_from_a_later_agentan_install_state_from_a_later_agent");
});

test("types.gen.ts is generated from openapi.json", () => {
  const gen = readFileSync(path.join(pkg, "src", "types.gen.ts"), "utf8");
  assert.match(gen, /^\/\/ Generated from the local API's OpenAPI document/);
  assert.match(gen, /go test \.\/agent\/localapi -run TestTSTypes -update/);
});
