-- provider: whose room a row is. 'builtin' rooms are this store's own; 'app'
-- rows are the directory the desktop app (the room provider) last sent, kept
-- so proposals can be checked and stored while the app is closed. gone: the
-- app no longer lists the room (the row stays while proposals refer to it).
ALTER TABLE rooms ADD COLUMN provider TEXT NOT NULL DEFAULT 'builtin' CHECK (provider IN ('builtin', 'app'));
ALTER TABLE rooms ADD COLUMN gone INTEGER NOT NULL DEFAULT 0;

-- The install queue: an approval commits its decision and its install row in
-- one transaction. A builtin room's app is created in that transaction
-- (installed at once); an app-provided room's is delivered to the desktop
-- app (apps.install) until it acknowledges, or refuses it (failed).
CREATE TABLE installs (
	proposal_id TEXT PRIMARY KEY REFERENCES proposals (id) ON DELETE CASCADE,
	instance_id TEXT NOT NULL UNIQUE,
	state       TEXT NOT NULL CHECK (state IN ('pending', 'installed', 'failed')),
	attempts    INTEGER NOT NULL DEFAULT 0,
	error       TEXT NOT NULL DEFAULT '',
	created_at  INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL
);
CREATE INDEX installs_pending ON installs (state) WHERE state = 'pending';
