package rooms

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// MaxAppBuilds bounds the build records kept for apps the desktop app
// provides; past it the record checked longest ago is dropped.
const MaxAppBuilds = 10_000

// appBuildBound is MaxAppBuilds; a test lowers it.
var appBuildBound = MaxAppBuilds

// AppBuild is roomrelay's record of its last smoke-run of an app the
// desktop app provides: the outcome and the content hash of the files that
// ran.
type AppBuild struct {
	Build
	RoomID      string
	ContentHash string
}

// RecordAppBuild keeps the outcome of a smoke-run of instanceID (an app of
// the desktop app's room roomID) whose files hash to contentHash, replacing
// the one before. A zero CheckedAt means now; the summary is cut as
// SetBuildState cuts it.
func (s *Store) RecordAppBuild(ctx context.Context, instanceID, roomID, contentHash string, b Build) error {
	if err := s.normalizeBuild(&b); err != nil {
		return err
	}
	unlock, err := s.lockWrite(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("rooms: record build of %q: %w", instanceID, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO app_builds (instance_id, room_id, content_hash, state, phase, summary, checked_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (instance_id) DO UPDATE SET room_id = excluded.room_id, content_hash = excluded.content_hash,
			state = excluded.state, phase = excluded.phase, summary = excluded.summary, checked_at = excluded.checked_at`,
		instanceID, roomID, contentHash, b.State, b.Phase, b.Summary, ms(b.CheckedAt)); err != nil {
		return fmt.Errorf("rooms: record build of %q: %w", instanceID, err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM app_builds WHERE instance_id IN (
		SELECT instance_id FROM app_builds ORDER BY checked_at DESC, instance_id LIMIT -1 OFFSET ?)`, appBuildBound); err != nil {
		return fmt.Errorf("rooms: record build of %q: bound: %w", instanceID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("rooms: record build of %q: %w", instanceID, err)
	}
	return nil
}

// AppBuildOf returns roomrelay's build record of instanceID; false when it
// has none.
func (s *Store) AppBuildOf(ctx context.Context, instanceID string) (AppBuild, bool, error) {
	var b AppBuild
	var checked int64
	err := s.db.QueryRowContext(ctx, `SELECT room_id, content_hash, state, phase, summary, checked_at FROM app_builds WHERE instance_id = ?`, instanceID).
		Scan(&b.RoomID, &b.ContentHash, &b.State, &b.Phase, &b.Summary, &checked)
	if errors.Is(err, sql.ErrNoRows) {
		return AppBuild{}, false, nil
	}
	if err != nil {
		return AppBuild{}, false, fmt.Errorf("rooms: build of %q: %w", instanceID, err)
	}
	b.CheckedAt = fromMS(sql.NullInt64{Int64: checked, Valid: true})
	return b, true, nil
}

// RoomProvider says whose room roomID is: ProviderBuiltin or ProviderApp.
func (s *Store) RoomProvider(ctx context.Context, roomID string) (string, error) {
	r, err := s.room(ctx, s.db, roomID)
	if errors.Is(err, sql.ErrNoRows) {
		return "", roomNotFound(roomID)
	}
	if err != nil {
		return "", err
	}
	return r.provider, nil
}
