// OAuth device approval through a REAL agent and hub: e2e/tsclient_test.go
// runs the hub with --public-url (its authorization server on) and this file
// with the world in ROOMRELAY_TS_* variables. A browser's sign-in is started
// over HTTP (registration, the consent page with its device code); the app
// reads and approves it through the agent. Outside the harness it skips.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { ConflictError, ForbiddenError, LocalAPIClient, NotFoundError, discover } from "../src/index.js";
import { world } from "./helpers.js";

const w = world();
const skip = w ? false : "not under the Go harness (go test ./e2e -run TestTSClient)";

/** startSignIn registers a client and opens the consent page as a browser would; it returns the device code the page shows. */
async function startSignIn(hubURL: string): Promise<string> {
  const reg = await fetch(`${hubURL}/oauth/register`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ client_name: "TS client test", redirect_uris: ["http://127.0.0.1/callback"] }),
  });
  assert.equal(reg.status, 201, "registration");
  const { client_id } = (await reg.json()) as { client_id: string };
  const challenge = createHash("sha256").update("v".repeat(50)).digest("base64url");
  const q = new URLSearchParams({ response_type: "code", client_id, redirect_uri: "http://127.0.0.1:45680/callback", state: "s", code_challenge: challenge, code_challenge_method: "S256" });
  const page = await (await fetch(`${hubURL}/oauth/authorize?${q}`, { redirect: "manual" })).text();
  const m = /roomrelay oauth approve ([A-Z0-9]{4}-[A-Z0-9]{4})/.exec(page);
  assert.ok(m, `the consent page shows a device code:\n${page.slice(0, 500)}`);
  return m[1];
}

test("oauth: the app reads a sign-in by its code and approves it for this device; refusals are typed", { skip }, async () => {
  if (!w) return;
  const ep = await discover({ home: w.home });
  const client = new LocalAPIClient({ socketPath: ep.path, client: "oauth-test/1.0" });
  const code = await startSignIn(w.hubURL);

  await assert.rejects(client.oauthRequest("ZZZZ-ZZZZ"), (e: unknown) => e instanceof NotFoundError && e.status === 404);
  const req = await client.oauthRequest(code);
  assert.equal(req.client_name, "TS client test");
  assert.equal(req.client_verified, false);
  assert.equal(req.redirect_host, "127.0.0.1:45680");
  assert.deepEqual(req.projects, [w.project]);

  await assert.rejects(
    client.decideOAuth(code, { approve: true, project: "proj-not-mine" }),
    (e: unknown) => e instanceof ForbiddenError && /not enrolled for project proj-not-mine/.test((e as Error).message),
  );
  const res = await client.decideOAuth(code, { approve: true });
  assert.equal(res.approved, true);
  assert.equal(res.project, w.project);
  assert.equal(res.scope, "read");
  assert.equal(res.device, w.deviceId);
  assert.equal(res.decided_via, "app");
  await assert.rejects(client.decideOAuth(code, { approve: false }), (e: unknown) => e instanceof ConflictError && e.status === 409);

  const audit = await client.audit(20);
  assert.ok(audit.some((a) => a.command === "localapi.oauth_approve" && a.outcome === "ok"), "the approval is audited");
  assert.ok(audit.some((a) => a.command === "localapi.oauth_approve" && a.outcome === "denied:forbidden"), "the refusal is audited");
});
