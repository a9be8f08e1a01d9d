-- Local Rooms: projects, rooms, launcher apps and what apps keep on the device.
-- Times are unix milliseconds (UTC).

CREATE TABLE projects (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	created_at INTEGER NOT NULL
);

CREATE TABLE rooms (
	id         TEXT PRIMARY KEY,
	project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
	name       TEXT NOT NULL,
	created_at INTEGER NOT NULL
);
CREATE INDEX rooms_project ON rooms (project_id, created_at);

-- Proposals come before apps so an app can point at the proposal it came from.
CREATE TABLE proposals (
	id              TEXT PRIMARY KEY,
	room_id         TEXT NOT NULL REFERENCES rooms (id) ON DELETE CASCADE,
	kind            TEXT NOT NULL CHECK (kind IN ('snippet', 'repo')),
	name            TEXT NOT NULL,
	repository_id   TEXT NOT NULL DEFAULT '',
	version_id      TEXT NOT NULL DEFAULT '',
	idempotency_key TEXT NOT NULL,
	content_hash    TEXT NOT NULL,
	state           TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'declined')),
	created_at      INTEGER NOT NULL,
	decided_at      INTEGER,
	instance_id     TEXT, -- the launcher app an approval created
	-- A key stays spent in its room whatever became of the proposal.
	UNIQUE (room_id, idempotency_key)
);
CREATE INDEX proposals_room_state ON proposals (room_id, state);

CREATE TABLE proposal_files (
	proposal_id TEXT NOT NULL REFERENCES proposals (id) ON DELETE CASCADE,
	path        TEXT NOT NULL,
	content     TEXT NOT NULL,
	PRIMARY KEY (proposal_id, path)
) WITHOUT ROWID;

CREATE TABLE apps (
	-- seq never changes once assigned and only grows (AUTOINCREMENT never
	-- reuses a value), so it is the keyset for list pagination.
	seq              INTEGER PRIMARY KEY AUTOINCREMENT,
	instance_id      TEXT NOT NULL UNIQUE,
	room_id          TEXT NOT NULL REFERENCES rooms (id) ON DELETE CASCADE,
	name             TEXT NOT NULL,
	source           TEXT NOT NULL CHECK (source IN ('snippet', 'repo')),
	repository_id    TEXT NOT NULL DEFAULT '',
	version_id       TEXT NOT NULL DEFAULT '',
	content_hash     TEXT NOT NULL DEFAULT '',
	position         INTEGER NOT NULL,
	launcher_state   TEXT NOT NULL DEFAULT 'active' CHECK (launcher_state IN ('active', 'hidden')),
	review_state     TEXT NOT NULL CHECK (review_state IN ('approved', 'owner_added')),
	reviewed_at      INTEGER,
	build_state      TEXT NOT NULL DEFAULT 'none' CHECK (build_state IN ('none', 'ok', 'failed')),
	build_phase      TEXT NOT NULL DEFAULT '',
	build_checked_at INTEGER,
	build_summary    TEXT NOT NULL DEFAULT '',
	config           TEXT NOT NULL DEFAULT '{}', -- app config JSON: never read back by a slim read
	proposal_id      TEXT REFERENCES proposals (id),
	created_at       INTEGER NOT NULL,
	CHECK (source = 'snippet' OR (repository_id <> '' AND version_id <> ''))
);
CREATE INDEX apps_room_seq ON apps (room_id, seq);

CREATE TABLE app_files (
	instance_id TEXT NOT NULL REFERENCES apps (instance_id) ON DELETE CASCADE,
	path        TEXT NOT NULL,
	content     TEXT NOT NULL,
	PRIMARY KEY (instance_id, path)
) WITHOUT ROWID;

-- The app's SDK storage: what a snippet keeps on the device of its user.
CREATE TABLE app_storage (
	instance_id TEXT NOT NULL REFERENCES apps (instance_id) ON DELETE CASCADE,
	key         TEXT NOT NULL,
	value       BLOB NOT NULL,
	updated_at  INTEGER NOT NULL,
	PRIMARY KEY (instance_id, key)
) WITHOUT ROWID;

CREATE TABLE app_secrets (
	instance_id TEXT NOT NULL REFERENCES apps (instance_id) ON DELETE CASCADE,
	name        TEXT NOT NULL,
	value       TEXT NOT NULL,
	PRIMARY KEY (instance_id, name)
) WITHOUT ROWID;

CREATE TABLE app_logs (
	id          INTEGER PRIMARY KEY,
	instance_id TEXT NOT NULL REFERENCES apps (instance_id) ON DELETE CASCADE,
	at          INTEGER NOT NULL,
	level       TEXT NOT NULL,
	message     TEXT NOT NULL
);
CREATE INDEX app_logs_instance ON app_logs (instance_id, id);
