-- Build records of apps the desktop app provides: the outcome of roomrelay's
-- own smoke-runs of them (after an approval, from the approved files in this
-- store; and smoke_run_room_app), keyed by the app's instance id and bound
-- to the content hash that ran. An app without the build_state capability
-- keeps no build state, so read_room_app_status reads it from here. Bounded
-- (rooms.MaxAppBuilds, the oldest check goes first).
CREATE TABLE app_builds (
	instance_id  TEXT PRIMARY KEY,
	room_id      TEXT NOT NULL,
	content_hash TEXT NOT NULL,
	state        TEXT NOT NULL CHECK (state IN ('none', 'ok', 'failed')),
	phase        TEXT NOT NULL DEFAULT '',
	summary      TEXT NOT NULL DEFAULT '',
	checked_at   INTEGER NOT NULL
);
CREATE INDEX app_builds_checked ON app_builds (checked_at);
