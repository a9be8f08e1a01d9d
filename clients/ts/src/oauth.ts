// OAuth device approval through the agent (docs/oauth.md, docs/localapi.md):
// an MCP client's sign-in shows a short code on the hub's consent page; the
// app shows what asks and lets its owner approve for this device's rooms.

// The shapes are generated from openapi.json (types.gen.ts).
import type { OAuthDecideRequest } from "./types.gen.js";

export type { OAuthApprovalRequest, OAuthDecideResponse } from "./types.gen.js";

/** The body of POST /oauth/{code}. */
export type OAuthDecision = OAuthDecideRequest;
