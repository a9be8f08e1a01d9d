// The app's own database: its Rooms and their apps in one JSON file,
// written atomically. roomrelay never opens this file; it asks the app.
import { randomBytes } from "node:crypto";
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import path from "node:path";
import { contentHash } from "@roomrelay/localapi";

export class RoomsFile {
  constructor(file, { project = "proj-a" } = {}) {
    this.file = path.resolve(file);
    try {
      this.data = JSON.parse(readFileSync(this.file, "utf8"));
    } catch (err) {
      if (err.code !== "ENOENT") throw new Error(`${this.file}: ${err.message}`);
      // A first start: one Room so there is something to show.
      this.data = { rooms: [{ id: "team-standup", project, name: "Team standup", apps: [] }], installs: {} };
      this.save();
    }
    this.data.installs ??= {};
  }

  save() {
    const tmp = `${this.file}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify(this.data, null, 2) + "\n", { mode: 0o600 });
    renameSync(tmp, this.file);
  }

  /** The directory roomrelay gets in rooms.changed. */
  directory() {
    return this.data.rooms.map((r) => ({ id: r.id, project: r.project, name: r.name }));
  }

  room(project, id) {
    return this.data.rooms.find((r) => r.id === id && r.project === project);
  }

  addRoom(project, id, name) {
    if (this.data.rooms.some((r) => r.id === id)) throw new Error(`a room ${id} exists already`);
    this.data.rooms.push({ id, project, name, apps: [] });
    this.save();
  }

  /**
   * install adds an approved app under the instance id roomrelay assigned.
   * It is idempotent by proposal id (delivery is at least once) and checks
   * the files against the hash the owner approved.
   */
  install(p) {
    const done = this.data.installs[p.proposal_id];
    if (done) return { instance_id: done, repeated: true };
    const room = this.room(p.project, p.room_id);
    if (!room) return { error: "not_found", message: `no room ${p.room_id}` };
    if (p.kind === "snippet" && contentHash(p.files ?? {}) !== p.content_hash) {
      return { error: "hash_mismatch", message: "the files do not hash to the approved content hash" }; // a refusal: the install ends as failed (INSTALL_ANSWERS)
    }
    const instance_id = p.instance_id || `app_${randomBytes(8).toString("hex")}`;
    room.apps.push({
      instance_id,
      name: p.name,
      source: p.kind === "repo" ? "repo" : "snippet",
      files: p.files ?? {},
      repository_id: p.repository_id,
      version_id: p.version_id,
      content_hash: p.content_hash,
      proposal_id: p.proposal_id,
      reviewed_at: p.approved_at ?? new Date().toISOString(),
      launcher: { state: "active", position: room.apps.length },
    });
    this.data.installs[p.proposal_id] = instance_id;
    this.save();
    return { instance_id, repeated: false };
  }

  app(project, roomId, instanceId) {
    return this.room(project, roomId)?.apps.find((a) => a.instance_id === instanceId);
  }
}
