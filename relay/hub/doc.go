// Package hub is roomrelay's cloud end: the agent websocket endpoint,
// enrollment, presence, command routing, the room directory, client tokens
// and the admin HTTP API, all stored and routed through NATS (an embedded
// in-process server with JetStream by default, or an external server by
// URL; one code path for both).
//
// The hub is a library: New, then Run(ctx) for NATS and the dispatcher, and
// Handler() served on the caller's own listener (cli/hubcmd/hub_serve.go owns the
// http.Server, its timeouts and TLS). Its Go API (Command, WaitProposal,
// Rooms, ResolveRoom, Device, Devices, Presence, Pair, Enroll, Revoke, the
// client token methods) is what the HTTP handlers and package mcpfront call;
// Track wraps a caller's handler (the MCP front) in the hub's readiness and
// shutdown.
//
// # HTTP API
//
// Admin endpoints need "Authorization: Bearer <admin token>"; without it they
// answer 401 unauthorized. Errors other than command results have the body
// {"error":{"code":..., "message":...}}.
//
//	POST /v1/pairing-codes        admin  {project, ttl_seconds?} → 201 {code, project, expires_at}
//	POST /v1/enroll               -      {code, device_name, os} → 200 {device_id, token, project, projects}
//	                                     with a device bearer token: adds the project to that device
//	GET  /v1/device/audit-head    device → {device_id, seq, hash, reported_at}: the audit anchor,
//	                                     the furthest audit head the device reported (hello, audit_head)
//	GET  /v1/devices[?project=P]  admin  → {devices: [device...]}
//	GET  /v1/devices/{id}         admin  → device (presence, projects, policy, os, agent_version, last_seen)
//	POST /v1/devices/{id}/revoke  admin  → device (revoked; its socket is closed with 4003)
//	POST /v1/devices/{id}/commands admin {id?, project_id, name, args?, timeout_ms?} → result
//	GET  /v1/devices/{id}/proposals/{pid}?wait=30s
//	                              admin  → {proposal_id, state, project?, room_id?, instance_id?, decided_at?}
//	POST /v1/client-tokens        admin  {project, scope: read|write, name?} → 201 {id, token, ...} (token shown once)
//	GET  /v1/client-tokens        admin  → {tokens: [{id, name, project, scope, created, last_used?, revoked?}]}
//	POST /v1/client-tokens/{id}/revoke admin → the token, revoked
//	GET  /v1/agent/connect        device websocket, subprotocol roomrelay.v1
//	GET  /v1/healthz              -      → {status, node} (liveness)
//	GET  /v1/readyz               -      → 200 {status: ready, node} while NATS is connected and a KV
//	                                     write and read succeed; 503 {status: not_ready, node, reason}
//	                                     while draining or degraded
//
// Enrollment statuses: 400 invalid_request (malformed code or body),
// 404 pairing_code_unknown, 409 pairing_code_used (also the loser of two
// concurrent uses of one code), 410 pairing_code_expired, 401 invalid_token
// or revoked (a bearer token was sent but is not valid).
//
// Agent endpoint statuses before the upgrade: 426 websocket_required or
// subprotocol_required (the body names roomrelay.v1), 401 with
// WWW-Authenticate for a missing, wrong or revoked token, 503 while the node
// shuts down. After the upgrade the hub closes with the relay close codes:
// 1002/1007 for bad frames, 1009 for an oversized frame, 4001 for another
// protocol version, 1008 when hello names another device, 4009 when a newer
// session of the device took over, 4003 on revoke, 1001 on shutdown.
//
// A proposal's state is pending, approved or declined. With wait (a duration
// up to 60s, or seconds) the hub answers as soon as the device reports the
// owner's decision (a KV watch on rr_proposals, no polling), or with the
// current state when the wait ends. The hub records each proposal id a device
// returns from a propose_* command it routed (before the caller sees the id);
// an id it neither routed nor saw decided is 404 not_found, as is an unknown
// device.
//
// A command's HTTP body is always the result {id, ok, result | error{code,
// message, retryable}} as the device sent it, or as the hub made it for
// not_found (no such device), not_enrolled, device_offline (no responders)
// and expired (no answer by the deadline). Its status comes from the code:
//
//	ok 200 · invalid_args 400 · not_enrolled, project_not_enabled,
//	command_not_allowed 403 · not_found 404 · idempotency_conflict,
//	pending_review 409 · sandbox_failed 422 · busy, rate_limited 429 ·
//	internal 500 · device_offline, app_not_running 503 · expired 504
//
// # NATS
//
// KV buckets: rr_devices (device id → record), rr_tokens (sha256 of a token →
// device id; the hub never stores a token), rr_pairing (sha256 of a code →
// project, expiry, use; kept 24 h), rr_presence (device id → state, session,
// node, last refresh; history 1), rr_proposals (device.proposal → the
// proposal_decided event; routed.device.proposal → a proposal id a device
// returned through this hub), rr_rooms (b64(project).b64(room).device → the
// room's name: the directory, at most relay.MaxDirectoryRooms per device),
// rr_clients (id.<id> → a client token's record; h.<sha256> → its id,
// deleted on revoke), rr_enroll (sha256 of a client address → its failed
// enrollments in the current window; kept a day). Stream RR_EVENTS keeps
// rr.events.> for 7 days, at most 1,000 messages per device and kind.
//
// Subjects: rr.dev.<id>.cmd (requests to the node holding the socket; no
// responders means device_offline), rr.dev.<id>.ctl (kick, revoke, and
// cancel when an HTTP caller left before the result; acted on by every node
// holding a session of the device), rr.events.<id>.<event> (agent events).
//
// Presence is written only by the node holding the socket, with
// compare-and-set on the revision it last wrote, so a stale session never
// overwrites a newer one. A crashed node's devices read offline by node
// liveness (nodes.go); a live node writes offline when a socket ends and
// retries a failed write every heartbeat. An online record is refreshed
// every 10 minutes (presenceRefresh), not every heartbeat, and a reader
// treats one not refreshed within the bound it carries as offline (its
// writer vanished with no liveness record to tell). While online its
// last_seen is as old as its last write; an offline record's is the last
// frame's; a dead node's devices read last seen at its last beat.
package hub
