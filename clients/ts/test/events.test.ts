// The event stream's client-side rules against a scripted ndjson server on a
// real unix socket: the cases a real agent cannot be made to produce on cue
// (a stream cut mid-way, a seq gap, an agent that restarted without saying
// resync). The real agent's resume and resync are in agent.test.ts.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { LocalAPIClient, type AgentEvent } from "../src/index.js";

function line(seq: number, boot: string, type = "status"): string {
  return JSON.stringify({ seq, boot_id: boot, type, data: { n: seq } }) + "\n";
}

test("reconnects after a cut, resumes with since and boot_id, drops repeats, reports a gap and a new boot", async () => {
  const sock = path.join(mkdtempSync(path.join(os.tmpdir(), "rr-ev-")), "s.sock");
  const asked: string[] = [];
  let conn = 0;
  const server = http.createServer((req, res) => {
    asked.push(req.url ?? "");
    res.writeHead(200, { "Content-Type": "application/x-ndjson" });
    conn++;
    if (conn === 1) {
      res.end(line(1, "A") + line(2, "A")); // then the agent cuts the stream
    } else if (conn === 2) {
      // A resume that overlaps (2 again), then a gap (4 after 3 is fine, 7 is not).
      res.end(line(2, "A") + line(3, "A") + JSON.stringify({ seq: 3, boot_id: "A", type: "ping" }) + "\n" + line(7, "A"));
    } else {
      res.end(line(1, "B")); // restarted, and this scripted agent does not say so
    }
  });
  await new Promise<void>((r) => server.listen(sock, r));
  const c = new LocalAPIClient({ socketPath: sock });
  const s = c.events({ maxBackoffMs: 20 });
  const got: AgentEvent[] = [];
  for await (const ev of s) {
    got.push(ev);
    if (got.length === 7) s.close();
  }
  server.close();
  assert.deepEqual(
    got.map((e) => `${e.type}:${e.seq}:${e.boot_id}`),
    ["status:1:A", "status:2:A", "status:3:A", "resync:7:A", "status:7:A", "resync:1:B", "status:1:B"],
  );
  assert.equal(asked[0], "/localapi/v1/events");
  assert.equal(asked[1], "/localapi/v1/events?since=2&boot_id=A");
  assert.equal(asked[2], "/localapi/v1/events?since=7&boot_id=A");
});
