package rooms

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/roomrelay/roomrelay/relay"
)

// The management calls below are for the device owner's tools (the CLI, the
// demo, tests) and for the agent's own bookkeeping (build state). None of
// them is reachable from the network.

// Project is a project known on this device.
type Project struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// Room is a local Room as the owner sees it.
type Room struct {
	ID        string    `json:"id"`
	Project   string    `json:"project"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`

	provider string // ProviderBuiltin or ProviderApp
	gone     bool   // an app-provided room the app no longer lists
}

// CreateProject records a project (its id comes from enrollment). Creating
// an existing id again is allowed and keeps the first record.
func (s *Store) CreateProject(ctx context.Context, id, name string) (Project, error) {
	unlock, err := s.lockWrite(ctx)
	if err != nil {
		return Project{}, err
	}
	defer unlock()
	if !relay.ValidID(id) {
		return Project{}, relay.Errorf(relay.CodeInvalidArgs, "invalid project id %q: %s", id, relay.IDRule)
	}
	if name == "" {
		name = id
	}
	now := s.now()
	if _, err := s.db.ExecContext(ctx,
		`INSERT INTO projects (id, name, created_at) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING`,
		id, name, ms(now)); err != nil {
		return Project{}, fmt.Errorf("rooms: create project %q: %w", id, err)
	}
	var p Project
	var created int64
	if err := s.db.QueryRowContext(ctx, `SELECT id, name, created_at FROM projects WHERE id = ?`, id).
		Scan(&p.ID, &p.Name, &created); err != nil {
		return Project{}, fmt.Errorf("rooms: create project %q: %w", id, err)
	}
	p.CreatedAt = time.UnixMilli(created).UTC()
	return p, nil
}

// ListProjects returns every project, oldest first.
func (s *Store) ListProjects(ctx context.Context) ([]Project, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, name, created_at FROM projects ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("rooms: list projects: %w", err)
	}
	defer rows.Close()
	var ps []Project
	for rows.Next() {
		var p Project
		var created int64
		if err := rows.Scan(&p.ID, &p.Name, &created); err != nil {
			return nil, fmt.Errorf("rooms: list projects: %w", err)
		}
		p.CreatedAt = time.UnixMilli(created).UTC()
		ps = append(ps, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rooms: list projects: %w", err)
	}
	return ps, nil
}

// NewRoom describes a Room to create. ID is optional (one is generated).
type NewRoom struct {
	ID        string
	ProjectID string
	Name      string
}

// CreateRoom creates a local Room in an existing project.
func (s *Store) CreateRoom(ctx context.Context, nr NewRoom) (Room, error) {
	if nr.Name == "" {
		return Room{}, relay.Errorf(relay.CodeInvalidArgs, "a room needs a name")
	}
	if nr.ID == "" {
		nr.ID = newID("room_")
	}
	if !relay.ValidID(nr.ID) {
		return Room{}, relay.Errorf(relay.CodeInvalidArgs, "invalid room id %q: %s", nr.ID, relay.IDRule)
	}
	unlock, err := s.lockWrite(ctx)
	if err != nil {
		return Room{}, err
	}
	defer unlock()
	now := s.now()
	_, err = s.db.ExecContext(ctx,
		`INSERT INTO rooms (id, project_id, name, created_at)
		 SELECT ?, id, ?, ? FROM projects WHERE id = ?`, nr.ID, nr.Name, ms(now), nr.ProjectID)
	if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed: rooms.id") {
		return Room{}, relay.Errorf(relay.CodeInvalidArgs, "a local room %q already exists; choose another id (or leave --id out for a new one)", nr.ID)
	}
	if err != nil {
		return Room{}, fmt.Errorf("rooms: create room %q: %w", nr.ID, err)
	}
	r, err := s.room(ctx, s.db, nr.ID)
	if errors.Is(err, sql.ErrNoRows) {
		return Room{}, relay.Errorf(relay.CodeNotFound, "no project %q on this device: create it first", nr.ProjectID)
	}
	return r, err
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Store) room(ctx context.Context, q queryer, id string) (Room, error) {
	var r Room
	var created int64
	err := q.QueryRowContext(ctx, `SELECT id, project_id, name, created_at, provider, gone FROM rooms WHERE id = ?`, id).
		Scan(&r.ID, &r.Project, &r.Name, &created, &r.provider, &r.gone)
	if errors.Is(err, sql.ErrNoRows) {
		return Room{}, err
	}
	if err != nil {
		return Room{}, fmt.Errorf("rooms: read room %q: %w", id, err)
	}
	r.CreatedAt = time.UnixMilli(created).UTC()
	return r, nil
}

// ListRooms returns the Rooms of a project (all projects if projectID is
// empty) with their counts, oldest first.
func (s *Store) ListRooms(ctx context.Context, projectID string) ([]RoomSummary, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT r.id, r.name, r.project_id,
		       (SELECT count(*) FROM apps a WHERE a.room_id = r.id),
		       (SELECT count(*) FROM proposals p WHERE p.room_id = r.id AND p.state = 'pending')
		FROM rooms r WHERE (? = '' OR r.project_id = ?) AND r.provider = 'builtin' ORDER BY r.created_at, r.id`, projectID, projectID)
	if err != nil {
		return nil, fmt.Errorf("rooms: list rooms: %w", err)
	}
	defer rows.Close()
	var out []RoomSummary
	for rows.Next() {
		r := RoomSummary{Kind: "local"}
		if err := rows.Scan(&r.ID, &r.Name, &r.Project, &r.AppCount, &r.PendingProposals); err != nil {
			return nil, fmt.Errorf("rooms: list rooms: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rooms: list rooms: %w", err)
	}
	return out, nil
}

// NewApp describes an app the owner adds to a launcher directly (setup, the
// demo, tests). Apps from the cloud arrive only as proposals.
type NewApp struct {
	ProjectID    string
	RoomID       string
	InstanceID   string // optional; generated if empty
	Name         string
	Source       Source
	Files        map[string]string // snippet
	RepositoryID string            // repo
	VersionID    string            // repo
	Config       json.RawMessage   // optional app config JSON
}

// AddApp puts an app at the end of a Room's launcher and returns its
// instance id.
func (s *Store) AddApp(ctx context.Context, na NewApp) (string, error) {
	if na.InstanceID == "" {
		na.InstanceID = newID("app_")
	}
	if err := checkSource(na.Source, na.Files, na.RepositoryID, na.VersionID); err != nil {
		return "", err
	}
	if na.Name == "" {
		return "", relay.Errorf(relay.CodeInvalidArgs, "an app needs a name")
	}
	config := "{}"
	if len(na.Config) > 0 {
		if !json.Valid(na.Config) {
			return "", relay.Errorf(relay.CodeInvalidArgs, "app config is not valid JSON")
		}
		config = string(na.Config)
	}
	unlock, err := s.lockWrite(ctx)
	if err != nil {
		return "", err
	}
	defer unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("rooms: add app: %w", err)
	}
	defer tx.Rollback()
	r, err := s.room(ctx, tx, na.RoomID)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && r.Project != na.ProjectID) {
		return "", roomNotFound(na.RoomID)
	}
	if err != nil {
		return "", err
	}
	hash := ""
	if na.Source == SourceSnippet {
		hash = relay.ContentHash(na.Files)
	}
	a := appRow{
		instanceID: na.InstanceID, roomID: na.RoomID, name: na.Name, source: na.Source,
		repositoryID: na.RepositoryID, versionID: na.VersionID, contentHash: hash,
		review: ReviewOwnerAdded, config: config,
	}
	if err := s.insertApp(ctx, tx, a, na.Files); err != nil {
		return "", err
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("rooms: add app %q: %w", na.InstanceID, err)
	}
	return na.InstanceID, nil
}

func checkSource(src Source, files map[string]string, repo, version string) error {
	switch src {
	case SourceSnippet:
		if len(files) == 0 {
			return relay.Errorf(relay.CodeInvalidArgs, "a snippet needs files")
		}
		if repo != "" || version != "" {
			return relay.Errorf(relay.CodeInvalidArgs, "a snippet has no repository_id or version_id")
		}
	case SourceRepo:
		if repo == "" || version == "" {
			return relay.Errorf(relay.CodeInvalidArgs, "a repository app needs repository_id and version_id")
		}
		if len(files) != 0 {
			return relay.Errorf(relay.CodeInvalidArgs, "a repository app has no files")
		}
	default:
		return relay.Errorf(relay.CodeInvalidArgs, "unknown source %q: use snippet or repo", src)
	}
	return nil
}

// appRow is what insertApp writes.
type appRow struct {
	instanceID, roomID, name    string
	source                      Source
	repositoryID, versionID     string
	contentHash, review, config string
	reviewedAt                  time.Time
	proposalID                  string
}

// insertApp adds a at the end of its Room's launcher, with its files.
func (s *Store) insertApp(ctx context.Context, tx *sql.Tx, a appRow, files map[string]string) error {
	var reviewed, proposal any
	if !a.reviewedAt.IsZero() {
		reviewed = ms(a.reviewedAt)
	}
	if a.proposalID != "" {
		proposal = a.proposalID
	}
	if a.config == "" {
		a.config = "{}"
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO apps (instance_id, room_id, name, source, repository_id, version_id, content_hash,
		                  position, review_state, reviewed_at, config, proposal_id, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?,
		        (SELECT coalesce(max(position), 0) + 1 FROM apps WHERE room_id = ?),
		        ?, ?, ?, ?, ?)`,
		a.instanceID, a.roomID, a.name, string(a.source), a.repositoryID, a.versionID, a.contentHash,
		a.roomID, a.review, reviewed, a.config, proposal, ms(s.now()))
	if err != nil {
		return fmt.Errorf("rooms: add app %q: %w", a.instanceID, err)
	}
	for p, c := range files {
		if _, err := tx.ExecContext(ctx, `INSERT INTO app_files (instance_id, path, content) VALUES (?, ?, ?)`,
			a.instanceID, p, c); err != nil {
			return fmt.Errorf("rooms: add app %q: file %q: %w", a.instanceID, p, err)
		}
	}
	return nil
}

// execApp runs a statement that must touch exactly one row of an existing
// app; it reports not_found otherwise.
func (s *Store) execApp(ctx context.Context, what, instanceID, query string, args ...any) error {
	unlock, err := s.lockWrite(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	r, err := s.db.ExecContext(ctx, query, args...)
	if err != nil {
		if strings.Contains(err.Error(), "FOREIGN KEY") {
			return relay.Errorf(relay.CodeNotFound, "no app %q", instanceID)
		}
		return fmt.Errorf("rooms: %s of app %q: %w", what, instanceID, err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return fmt.Errorf("rooms: %s of app %q: %w", what, instanceID, err)
	}
	if n == 0 {
		return relay.Errorf(relay.CodeNotFound, "no app %q", instanceID)
	}
	return nil
}

// SetAppStorage sets one key of an app's SDK storage.
func (s *Store) SetAppStorage(ctx context.Context, instanceID, key string, value []byte) error {
	return s.execApp(ctx, "set storage", instanceID, `
		INSERT INTO app_storage (instance_id, key, value, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (instance_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
		instanceID, key, value, ms(s.now()))
}

// AppStorage returns one key of an app's SDK storage, for the app itself on
// this device. It must never be sent to the hub.
func (s *Store) AppStorage(ctx context.Context, instanceID, key string) ([]byte, bool, error) {
	var v []byte
	err := s.db.QueryRowContext(ctx, `SELECT value FROM app_storage WHERE instance_id = ? AND key = ?`, instanceID, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("rooms: storage of app %q: %w", instanceID, err)
	}
	return v, true, nil
}

// SetAppConfig replaces an app's config JSON.
func (s *Store) SetAppConfig(ctx context.Context, instanceID string, config json.RawMessage) error {
	if !json.Valid(config) {
		return relay.Errorf(relay.CodeInvalidArgs, "app config is not valid JSON")
	}
	return s.execApp(ctx, "set config", instanceID,
		`UPDATE apps SET config = ? WHERE instance_id = ?`, string(config), instanceID)
}

// SetAppSecret stores a named secret of an app.
func (s *Store) SetAppSecret(ctx context.Context, instanceID, name, value string) error {
	return s.execApp(ctx, "set secret", instanceID, `
		INSERT INTO app_secrets (instance_id, name, value) VALUES (?, ?, ?)
		ON CONFLICT (instance_id, name) DO UPDATE SET value = excluded.value`,
		instanceID, name, value)
}

// AppendAppLog appends a line to an app's log.
func (s *Store) AppendAppLog(ctx context.Context, instanceID, level, message string) error {
	return s.execApp(ctx, "append log", instanceID,
		`INSERT INTO app_logs (instance_id, at, level, message) VALUES (?, ?, ?, ?)`,
		instanceID, ms(s.now()), level, message)
}

// MaxBuildSummary bounds Build.Summary, in runes.
const MaxBuildSummary = 200

// normalizeBuild refuses an unknown state, dates a zero CheckedAt now and
// cuts a summary longer than MaxBuildSummary runes.
func (s *Store) normalizeBuild(b *Build) error {
	switch b.State {
	case BuildNone, BuildOK, BuildFailed:
	default:
		return relay.Errorf(relay.CodeInvalidArgs, "unknown build state %q", b.State)
	}
	if b.CheckedAt.IsZero() {
		b.CheckedAt = s.now()
	}
	if utf8.RuneCountInString(b.Summary) > MaxBuildSummary {
		b.Summary = string([]rune(b.Summary)[:MaxBuildSummary-1]) + "…"
	}
	return nil
}

// SetBuildState records the outcome of an app's local smoke-run. A zero
// CheckedAt means now; a summary longer than MaxBuildSummary runes is cut.
func (s *Store) SetBuildState(ctx context.Context, instanceID string, b Build) error {
	if err := s.normalizeBuild(&b); err != nil {
		return err
	}
	return s.execApp(ctx, "set build state", instanceID, `
		UPDATE apps SET build_state = ?, build_phase = ?, build_checked_at = ?, build_summary = ?
		WHERE instance_id = ?`, b.State, b.Phase, ms(b.CheckedAt), b.Summary, instanceID)
}

// SetLauncherState shows (LauncherActive) or hides (LauncherHidden) an app
// in its Room's launcher.
func (s *Store) SetLauncherState(ctx context.Context, instanceID, state string) error {
	if state != LauncherActive && state != LauncherHidden {
		return relay.Errorf(relay.CodeInvalidArgs, "unknown launcher state %q", state)
	}
	return s.execApp(ctx, "set launcher state", instanceID,
		`UPDATE apps SET launcher_state = ? WHERE instance_id = ?`, state, instanceID)
}

// AppFiles returns an app's files, for the local smoke-runner. A pending
// proposal is not an app and is not_found here, so it cannot be smoke-run.
// The result must never be sent to the hub.
func (s *Store) AppFiles(ctx context.Context, projectID, roomID, instanceID string) (map[string]string, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("rooms: files of app %q: %w", instanceID, err)
	}
	defer tx.Rollback()
	var src string
	err = tx.QueryRowContext(ctx, `
		SELECT a.source FROM apps a JOIN rooms r ON r.id = a.room_id
		WHERE a.instance_id = ? AND a.room_id = ? AND r.project_id = ? AND r.provider = 'builtin'`, instanceID, roomID, projectID).Scan(&src)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, relay.Errorf(relay.CodeNotFound, "no app %q in local room %q", instanceID, roomID)
	}
	if err != nil {
		return nil, fmt.Errorf("rooms: files of app %q: %w", instanceID, err)
	}
	return readFiles(ctx, tx, `SELECT path, content FROM app_files WHERE instance_id = ?`, instanceID)
}

func readFiles(ctx context.Context, tx *sql.Tx, query, id string) (map[string]string, error) {
	rows, err := tx.QueryContext(ctx, query, id)
	if err != nil {
		return nil, fmt.Errorf("rooms: files of %q: %w", id, err)
	}
	defer rows.Close()
	files := map[string]string{}
	for rows.Next() {
		var p, c string
		if err := rows.Scan(&p, &c); err != nil {
			return nil, fmt.Errorf("rooms: files of %q: %w", id, err)
		}
		files[p] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rooms: files of %q: %w", id, err)
	}
	return files, nil
}
