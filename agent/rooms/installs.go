package rooms

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Room providers: whose room a row of the rooms table is.
const (
	ProviderBuiltin = "builtin" // this store's own room
	ProviderApp     = "app"     // the desktop app's, as its directory last said
)

// Install states of an approved proposal.
const (
	InstallPending   = "pending"   // approved; not yet acknowledged by the desktop app
	InstallInstalled = "installed" // the app exists in its room's launcher
	InstallFailed    = "failed"    // the desktop app refused it (room gone, content refused)
)

// ProviderRoom is one entry of the desktop app's directory.
type ProviderRoom struct {
	ID, Project, Name string
}

// SyncProviderRooms replaces the persisted directory of the desktop app:
// the rooms it lists are kept (projects created as needed), the app rooms it
// no longer lists are marked gone. A room id this store already has as a
// builtin room is skipped (returned), never taken over.
func (s *Store) SyncProviderRooms(ctx context.Context, list []ProviderRoom) (skipped []string, err error) {
	unlock, err := s.lockWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("rooms: sync the app's directory: %w", err)
	}
	defer tx.Rollback()
	now := ms(s.now())
	if _, err := tx.ExecContext(ctx, `UPDATE rooms SET gone = 1 WHERE provider = 'app'`); err != nil {
		return nil, fmt.Errorf("rooms: sync the app's directory: %w", err)
	}
	for _, r := range list {
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO projects (id, name, created_at) VALUES (?, ?, ?)`, r.Project, r.Project, now); err != nil {
			return nil, fmt.Errorf("rooms: sync the app's directory: %w", err)
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO rooms (id, project_id, name, created_at, provider, gone) VALUES (?, ?, ?, ?, 'app', 0)
			ON CONFLICT (id) DO UPDATE SET project_id = excluded.project_id, name = excluded.name, gone = 0 WHERE rooms.provider = 'app'`,
			r.ID, r.Project, r.Name, now)
		if err != nil {
			return nil, fmt.Errorf("rooms: sync the app's directory: room %q: %w", r.ID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			skipped = append(skipped, r.ID)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("rooms: sync the app's directory: %w", err)
	}
	return skipped, nil
}

// ListProviderRooms returns the desktop app's rooms of a project (all
// projects if projectID is empty) as it last listed them.
func (s *Store) ListProviderRooms(ctx context.Context, projectID string) ([]ProviderRoom, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, project_id, name FROM rooms
		WHERE provider = 'app' AND gone = 0 AND (? = '' OR project_id = ?) ORDER BY created_at, id`, projectID, projectID)
	if err != nil {
		return nil, fmt.Errorf("rooms: list the app's rooms: %w", err)
	}
	defer rows.Close()
	var out []ProviderRoom
	for rows.Next() {
		var r ProviderRoom
		if err := rows.Scan(&r.ID, &r.Project, &r.Name); err != nil {
			return nil, fmt.Errorf("rooms: list the app's rooms: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// PendingProposals counts the proposals waiting for review in a room.
func (s *Store) PendingProposals(ctx context.Context, roomID string) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM proposals WHERE room_id = ? AND state = 'pending'`, roomID).Scan(&n); err != nil {
		return 0, fmt.Errorf("rooms: count pending proposals of %q: %w", roomID, err)
	}
	return n, nil
}

// InstallJob is an approved proposal for an app-provided room, with what
// apps.install needs.
type InstallJob struct {
	Proposal
	Files    map[string]string
	Attempts int
}

// PendingInstalls returns the installs not yet acknowledged, in approval
// order (rowid breaks a tie within one millisecond).
func (s *Store) PendingInstalls(ctx context.Context) ([]InstallJob, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("rooms: pending installs: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT `+proposalColumns+`, i.attempts
		FROM installs i JOIN proposals p ON p.id = i.proposal_id JOIN rooms r ON r.id = p.room_id
		WHERE i.state = 'pending' ORDER BY i.created_at, i.rowid`)
	if err != nil {
		return nil, fmt.Errorf("rooms: pending installs: %w", err)
	}
	var out []InstallJob
	for rows.Next() {
		var j InstallJob
		var p Proposal
		var created int64
		var decided sql.NullInt64
		if err := rows.Scan(&p.ID, &p.Project, &p.RoomID, &p.Kind, &p.Name, &p.RepositoryID, &p.VersionID,
			&p.IdempotencyKey, &p.ContentHash, &p.State, &created, &decided, &p.InstanceID, &p.ProposedBy, &p.DecidedVia,
			&p.FileCount, &p.TotalBytes, &p.InstallState, &p.InstallError, &j.Attempts); err != nil {
			rows.Close()
			return nil, fmt.Errorf("rooms: pending installs: %w", err)
		}
		p.CreatedAt = time.UnixMilli(created).UTC()
		p.DecidedAt = fromMS(decided)
		j.Proposal = p
		out = append(out, j)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rooms: pending installs: %w", err)
	}
	for i := range out {
		if out[i].Kind != SourceSnippet {
			continue
		}
		if out[i].Files, err = readFiles(ctx, tx, `SELECT path, content FROM proposal_files WHERE proposal_id = ?`, out[i].ID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Install is the install record of an approved proposal.
type Install struct {
	ProposalID string `json:"proposal_id"`
	InstanceID string `json:"instance_id"`
	State      string `json:"install_state"`
	Attempts   int    `json:"attempts"`
	Error      string `json:"error,omitempty"`
}

// ErrNoInstall: no approval made an app with that instance id.
var ErrNoInstall = errors.New("rooms: no install record")

// InstallOf returns the install record of the approval that assigned
// instanceID (ErrNoInstall when none did).
func (s *Store) InstallOf(ctx context.Context, instanceID string) (Install, error) {
	var in Install
	err := s.db.QueryRowContext(ctx, `SELECT proposal_id, instance_id, state, attempts, error FROM installs WHERE instance_id = ?`, instanceID).
		Scan(&in.ProposalID, &in.InstanceID, &in.State, &in.Attempts, &in.Error)
	if errors.Is(err, sql.ErrNoRows) {
		return Install{}, ErrNoInstall
	}
	if err != nil {
		return Install{}, fmt.Errorf("rooms: install of %q: %w", instanceID, err)
	}
	return in, nil
}

// NoteInstallAttempt counts a delivery attempt, before it is made.
func (s *Store) NoteInstallAttempt(ctx context.Context, proposalID string) error {
	return s.execInstall(ctx, `UPDATE installs SET attempts = attempts + 1, updated_at = ? WHERE proposal_id = ?`, ms(s.now()), proposalID)
}

// FinishInstall records the desktop app's final answer: installed, or
// failed with why. Only a pending install changes (an answer to a repeated
// delivery after the first was recorded changes nothing).
func (s *Store) FinishInstall(ctx context.Context, proposalID, state, why string) error {
	if state != InstallInstalled && state != InstallFailed {
		return fmt.Errorf("rooms: finish install %q: state %q", proposalID, state)
	}
	return s.execInstall(ctx, `UPDATE installs SET state = ?, error = ?, updated_at = ? WHERE proposal_id = ? AND state = 'pending'`,
		state, why, ms(s.now()), proposalID)
}

func (s *Store) execInstall(ctx context.Context, q string, args ...any) error {
	unlock, err := s.lockWrite(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := s.db.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("rooms: install: %w", err)
	}
	return nil
}
