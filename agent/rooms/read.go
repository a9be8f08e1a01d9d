package rooms

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

// Rooms is what the agent's read commands need from a local Room store. The
// SQLite Store implements it; a desktop app that keeps Rooms in its own
// database can implement it instead. Every call is scoped to a project: a
// Room of another project is not_found, exactly as if it did not exist.
//
// Implementations must return only the fields of the result types, and never
// file contents, config, logs, secrets or SDK storage.
type Rooms interface {
	ReadRoom(ctx context.Context, projectID, roomID string) (RoomSummary, error)
	ListRoomApps(ctx context.Context, projectID, roomID string, limit int, cursor string) (AppPage, error)
	ReadRoomAppStatus(ctx context.Context, projectID, roomID, instanceID string) (AppStatus, error)
}

// Source says where an app's code comes from.
type Source string

const (
	SourceSnippet Source = "snippet" // files proposed and reviewed as a snippet
	SourceRepo    Source = "repo"    // a pinned repository version
)

// Launcher states of an app.
const (
	LauncherActive = "active" // a tab in the Room's launcher
	LauncherHidden = "hidden" // kept, but taken out of the launcher by the owner
	// LauncherNotInstalled: approved, but the desktop app has not installed
	// it (yet, or it refused: see the install state).
	LauncherNotInstalled = "not_installed"
)

// Review states of an app. A proposal that has not been approved is not an
// app at all, so there is no "pending" here.
const (
	ReviewApproved   = "approved"    // the owner approved a proposal with this content
	ReviewOwnerAdded = "owner_added" // the owner added it on the device directly
)

// Build states of an app's local smoke-run.
const (
	BuildNone   = "none"   // never smoke-run on this device
	BuildOK     = "ok"     // the last smoke-run passed
	BuildFailed = "failed" // the last smoke-run failed (see phase and summary)
)

// Limits of ListRoomApps.
const (
	MinListLimit = 1
	MaxListLimit = 50
)

// RoomSummary is the result of read_room.
type RoomSummary struct {
	ID               string `json:"id"`
	Name             string `json:"name"`
	Project          string `json:"project"`
	Kind             string `json:"kind"` // always "local"
	AppCount         int    `json:"app_count"`
	PendingProposals int    `json:"pending_proposals"`
}

// AppItem is one entry of list_room_apps.
type AppItem struct {
	InstanceID string   `json:"instance_id"`
	Name       string   `json:"name"`
	Source     Source   `json:"source"`
	Launcher   Launcher `json:"launcher"`
}

// Launcher is an app's place in its Room's launcher.
type Launcher struct {
	State    string `json:"state"`
	Position int    `json:"position"`
}

// AppPage is the result of list_room_apps. NextCursor is empty on the last
// page.
type AppPage struct {
	Items      []AppItem `json:"items"`
	NextCursor string    `json:"next_cursor"`
}

// AppStatus is the result of read_room_app_status.
type AppStatus struct {
	RoomID     string   `json:"room_id"`
	InstanceID string   `json:"instance_id"`
	Name       string   `json:"name"`
	Source     Source   `json:"source"`
	Launcher   Launcher `json:"launcher"`
	Review     Review   `json:"review"`
	Build      Build    `json:"build"`
	// InstallState is set for an app an approval created: pending until
	// the desktop app acknowledged it (installed), or failed if it refused.
	InstallState string `json:"install_state,omitempty"`
}

// Review is an app's review state and when it was reached.
type Review struct {
	State      string    `json:"state"`
	ReviewedAt time.Time `json:"reviewed_at,omitzero"`
}

// Build is the state of an app's last local smoke-run. Summary is a short
// line written by the smoke-runner (at most MaxBuildSummary runes), never
// console output or source text.
type Build struct {
	State     string    `json:"state"`
	Phase     string    `json:"phase,omitempty"`
	CheckedAt time.Time `json:"checked_at,omitzero"`
	Summary   string    `json:"summary,omitempty"`
}

// roomNotFound is word for word what the allowlist answers for a room the
// owner did not list, so a caller cannot tell a hidden room from a missing one.
func roomNotFound(roomID string) error {
	return relay.RoomNotFound(roomID)
}

// The read tools' queries, prepared by Open.
const (
	sqlReadRoom = `
		SELECT r.id, r.name, r.project_id,
		       (SELECT count(*) FROM apps a WHERE a.room_id = r.id),
		       (SELECT count(*) FROM proposals p WHERE p.room_id = r.id AND p.state = 'pending')
		FROM rooms r WHERE r.id = ? AND r.project_id = ? AND r.provider = 'builtin'`
	sqlRoomExists = `SELECT 1 FROM rooms WHERE id = ? AND project_id = ? AND provider = 'builtin'`
	sqlListApps   = `
		SELECT seq, instance_id, name, source, launcher_state, position
		FROM apps WHERE room_id = ? AND seq > ? ORDER BY seq LIMIT ?`
	sqlAppStatus = `
		SELECT a.room_id, a.instance_id, a.name, a.source, a.launcher_state, a.position,
		       a.review_state, a.reviewed_at, a.build_state, a.build_phase, a.build_checked_at, a.build_summary
		FROM apps a JOIN rooms r ON r.id = a.room_id
		WHERE a.instance_id = ? AND a.room_id = ? AND r.project_id = ? AND r.provider = 'builtin'`
)

func (s *Store) prepare(ctx context.Context) error {
	for _, p := range []struct {
		st  **sql.Stmt
		sql string
	}{{&s.stReadRoom, sqlReadRoom}, {&s.stRoomExists, sqlRoomExists}, {&s.stListApps, sqlListApps}, {&s.stAppStatus, sqlAppStatus}} {
		var err error
		if *p.st, err = s.db.PrepareContext(ctx, p.sql); err != nil {
			return fmt.Errorf("rooms: prepare: %w", err)
		}
	}
	return nil
}

// ReadRoom returns the Room's identity, its number of apps and of proposals
// waiting for review.
// While nothing was committed since a room was read, its summary comes
// from the cache (roomcache.go) without a query.
func (s *Store) ReadRoom(ctx context.Context, projectID, roomID string) (RoomSummary, error) {
	k := roomKey{projectID, roomID}
	st, cached := s.rc.current()
	if cached {
		if r, ok := s.rc.get(st, k); ok {
			return r, nil
		}
	}
	var r RoomSummary
	err := s.stReadRoom.QueryRowContext(ctx, roomID, projectID).
		Scan(&r.ID, &r.Name, &r.Project, &r.AppCount, &r.PendingProposals)
	if errors.Is(err, sql.ErrNoRows) {
		return RoomSummary{}, roomNotFound(roomID)
	}
	if err != nil {
		return RoomSummary{}, fmt.Errorf("rooms: read room %q: %w", roomID, err)
	}
	r.Kind = "local"
	if cached {
		s.rc.put(st, k, r)
	}
	return r, nil
}

// cursorPrefix versions the cursor format.
const cursorPrefix = "v1:"

// encodeCursor makes the opaque cursor for "apps after seq in roomID". The
// room is inside so a cursor cannot be replayed against another Room.
func encodeCursor(roomID string, seq int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorPrefix + strconv.FormatInt(seq, 10) + ":" + roomID))
}

func decodeCursor(roomID, cursor string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || !strings.HasPrefix(string(b), cursorPrefix) {
		return 0, relay.Errorf(relay.CodeInvalidArgs, "cursor is not one list_room_apps returned; start again without a cursor")
	}
	num, room, ok := strings.Cut(strings.TrimPrefix(string(b), cursorPrefix), ":")
	seq, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || seq < 0 {
		return 0, relay.Errorf(relay.CodeInvalidArgs, "cursor is not one list_room_apps returned; start again without a cursor")
	}
	if room != roomID {
		return 0, relay.Errorf(relay.CodeInvalidArgs, "cursor belongs to another room; start again without a cursor")
	}
	return seq, nil
}

// ListRoomApps returns up to limit apps of the Room's launcher after cursor.
//
// Pages follow the order in which apps were added (an immutable key), not
// the launcher position the owner can change, so an app added or moved
// while a caller pages is never skipped or repeated: apps added meanwhile
// show up at the end.
func (s *Store) ListRoomApps(ctx context.Context, projectID, roomID string, limit int, cursor string) (AppPage, error) {
	if limit < MinListLimit || limit > MaxListLimit {
		return AppPage{}, relay.Errorf(relay.CodeInvalidArgs, "limit %d is out of range: use %d to %d", limit, MinListLimit, MaxListLimit)
	}
	var after int64
	if cursor != "" {
		var err error
		if after, err = decodeCursor(roomID, cursor); err != nil {
			return AppPage{}, err
		}
	}
	// One read transaction: the room check and the page see the same snapshot.
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return AppPage{}, fmt.Errorf("rooms: list apps of %q: %w", roomID, err)
	}
	defer tx.Rollback()
	var one int
	err = tx.StmtContext(ctx, s.stRoomExists).QueryRowContext(ctx, roomID, projectID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return AppPage{}, roomNotFound(roomID)
	}
	if err != nil {
		return AppPage{}, fmt.Errorf("rooms: list apps of %q: %w", roomID, err)
	}
	rows, err := tx.StmtContext(ctx, s.stListApps).QueryContext(ctx, roomID, after, limit+1)
	if err != nil {
		return AppPage{}, fmt.Errorf("rooms: list apps of %q: %w", roomID, err)
	}
	defer rows.Close()
	page := AppPage{Items: make([]AppItem, 0, limit)}
	var last int64
	more := false
	for rows.Next() {
		if len(page.Items) == limit {
			more = true
			break
		}
		var it AppItem
		if err := rows.Scan(&last, &it.InstanceID, &it.Name, &it.Source, &it.Launcher.State, &it.Launcher.Position); err != nil {
			return AppPage{}, fmt.Errorf("rooms: list apps of %q: %w", roomID, err)
		}
		page.Items = append(page.Items, it)
	}
	if err := rows.Err(); err != nil {
		return AppPage{}, fmt.Errorf("rooms: list apps of %q: %w", roomID, err)
	}
	if more {
		page.NextCursor = encodeCursor(roomID, last)
	}
	return page, nil
}

// ReadRoomAppStatus returns an app's launcher, review and local build state.
// A pending proposal is not an app: asking for its id is not_found.
func (s *Store) ReadRoomAppStatus(ctx context.Context, projectID, roomID, instanceID string) (AppStatus, error) {
	var st AppStatus
	var reviewed, checked sql.NullInt64
	err := s.stAppStatus.QueryRowContext(ctx, instanceID, roomID, projectID).
		Scan(&st.RoomID, &st.InstanceID, &st.Name, &st.Source, &st.Launcher.State, &st.Launcher.Position,
			&st.Review.State, &reviewed, &st.Build.State, &st.Build.Phase, &checked, &st.Build.Summary)
	if errors.Is(err, sql.ErrNoRows) {
		return AppStatus{}, relay.Errorf(relay.CodeNotFound, "no app %q in local room %q", instanceID, roomID)
	}
	if err != nil {
		return AppStatus{}, fmt.Errorf("rooms: read status of app %q: %w", instanceID, err)
	}
	st.Review.ReviewedAt = fromMS(reviewed)
	st.Build.CheckedAt = fromMS(checked)
	return st, nil
}
