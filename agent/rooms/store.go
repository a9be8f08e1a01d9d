// Package rooms is the device's local Room store: projects, local Rooms, the
// apps in each Room's launcher, what those apps keep on the device (files,
// config, logs, secrets, SDK storage) and the proposals that wait for the
// owner's review.
//
// The store is embedded SQLite (modernc.org/sqlite, pure Go, no cgo) with
// versioned migrations embedded in the binary. The agent talks to it through
// the Rooms and Proposals interfaces, so a desktop app that keeps its Rooms in
// its own database can plug in an adapter instead.
//
// The reads served to the cloud (ReadRoom, ListRoomApps, ReadRoomAppStatus)
// build their results from dedicated structs that name every field they
// carry: identity, launcher, review and build state. Nothing an app stores
// ever reaches them.
package rooms

import (
	"context"
	"crypto/rand"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver (pure Go, no cgo)
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migration is one numbered schema step.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations returns the embedded migrations in version order. Files are
// named NNNN_description.sql; versions start at 1 and have no gaps, so
// PRAGMA user_version always names the last step applied.
func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("rooms: read migrations: %w", err)
	}
	var ms []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("rooms: migration %q: name must start with a positive number and '_'", e.Name())
		}
		b, err := migrationFS.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("rooms: read migration %s: %w", e.Name(), err)
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("rooms: migration %s: want version %d", m.name, i+1)
		}
	}
	return ms, nil
}

// SchemaVersion is the schema version this build migrates to.
func SchemaVersion() int {
	ms, err := loadMigrations()
	if err != nil {
		return 0
	}
	return len(ms)
}

// Store is the SQLite implementation of Rooms and Proposals, plus the
// management calls the CLI, the demo and tests use to set Rooms up.
type Store struct {
	db  *sql.DB
	log *slog.Logger
	now func() time.Time
	// wsem serialises this process's writers. SQLite's busy handler polls
	// and is not fair, so a steady writer could starve another past
	// busy_timeout; queueing here first leaves busy_timeout to arbitrate
	// only between processes.
	wsem chan struct{}
	// The read tools' statements, prepared once (parsing them was about a
	// tenth of a read's CPU).
	stReadRoom, stRoomExists, stListApps, stAppStatus *sql.Stmt

	// rc keeps read_room's summaries while nothing was committed
	// (roomcache.go). pin is a connection held open for the store's
	// life, so SQLite never deletes the wal-index rc maps (it does when
	// its last connection closes); CommitCounter asks it too, under pinMu.
	rc    roomCache
	pinMu sync.Mutex
	pin   *sql.Conn
}

var (
	_ Rooms     = (*Store)(nil)
	_ Proposals = (*Store)(nil)
)

// Open opens (creating if needed) the store at path and brings its schema up
// to date in one transaction. A database written by a newer build (a higher
// schema version than this one knows) is refused rather than guessed at.
func Open(ctx context.Context, path string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// Create the file 0600 before SQLite does (it would use 0644); SQLite
	// gives the -wal and -shm files the mode of the database file.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("rooms: open %s: %w", path, err)
	}
	f.Close()

	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	// FULL: an approval is a person's decision; it must survive power loss,
	// not only a crash of the process.
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(ON)")
	// Writers take the lock when the transaction begins, so two writers
	// queue on busy_timeout instead of failing to upgrade a read lock.
	q.Set("_txlock", "immediate")
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("rooms: open %s: %w", path, err)
	}
	// A few connections: WAL lets reads run beside the single writer. All
	// of them stay open once opened: with fewer idle than open, concurrent
	// reads closed and reopened connections (each open runs the pragmas and
	// prepares every statement again) under load.
	// One more is pinned for the wal-index and CommitCounter (openCache).
	db.SetMaxOpenConns(5)
	db.SetMaxIdleConns(5)
	s := &Store{db: db, log: logger, now: time.Now, wsem: make(chan struct{}, 1)}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.prepare(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.openCache(ctx, path); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// openCache pins a connection and maps the wal-index for the room summary
// cache. Without the map the cache stays off (every read asks SQLite):
// that is logged, not an error.
func (s *Store) openCache(ctx context.Context, path string) error {
	pin, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("rooms: open %s: %w", path, err)
	}
	s.pin = pin
	// The pinned connection is in WAL mode and has the wal-index open
	// once it has read: a query makes sure the file exists before it is
	// mapped.
	var v int
	if err := pin.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("rooms: open %s: %w", path, err)
	}
	w, err := openWALIndex(path)
	s.rc.wal = w // kept even unmapped: Close closes its file after SQLite's
	if err != nil {
		s.log.Debug("rooms: read_room summaries are not cached", "err", err)
	}
	return nil
}

// CommitCounter returns SQLite's data_version as one connection of this
// store sees it: it changes after any other connection (in this process or
// another) committed, and only once that commit is visible to readers, so a
// query made after it changed sees the commit. Reading it costs no query: in
// WAL mode SQLite reads it from the shared-memory index. Watchers of the file
// itself (size, mtime of the WAL) can see a commit's frames before it is
// published; this cannot.
func (s *Store) CommitCounter(ctx context.Context) (int64, error) {
	// The pinned connection never writes, so every commit is another
	// connection's and moves its counter.
	s.pinMu.Lock()
	defer s.pinMu.Unlock()
	var v int64
	if err := s.pin.QueryRowContext(ctx, "PRAGMA data_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("rooms: commit counter: %w", err)
	}
	return v, nil
}

// Close closes the database.
func (s *Store) Close() error {
	s.pinMu.Lock()
	if s.pin != nil {
		s.pin.Close()
	}
	s.pinMu.Unlock()
	err := s.db.Close()
	s.rc.wal.close() // after SQLite let go of the file: see walIndex.f
	if err != nil {
		return fmt.Errorf("rooms: close: %w", err)
	}
	return nil
}

func (s *Store) migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("rooms: begin migration: %w", err)
	}
	defer tx.Rollback()
	// Read the version inside the write transaction: another process opening
	// the same file at the same time waits here and then sees our result.
	var have int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&have); err != nil {
		return fmt.Errorf("rooms: read schema version: %w", err)
	}
	if have > len(ms) {
		return fmt.Errorf("rooms: database schema version %d is newer than this build's %d; upgrade roomrelay", have, len(ms))
	}
	for _, m := range ms[have:] {
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("rooms: apply migration %s: %w", m.name, err)
		}
		s.log.InfoContext(ctx, "rooms: applied schema migration", "migration", m.name, "version", m.version)
	}
	if have == len(ms) {
		return nil
	}
	// PRAGMA takes no bound parameters; the value is our own integer.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(ms))); err != nil {
		return fmt.Errorf("rooms: set schema version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("rooms: commit migration: %w", err)
	}
	return nil
}

// Version reports the schema version of the open database.
func (s *Store) Version(ctx context.Context) (int, error) {
	var v int
	if err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("rooms: read schema version: %w", err)
	}
	return v, nil
}

// ErrCorrupt is returned by IntegrityCheck when SQLite finds damage.
var ErrCorrupt = errors.New("rooms: database failed its integrity check")

// QuickCheck runs PRAGMA quick_check (no index cross-checks: fast enough
// for every agent start) and returns ErrCorrupt with SQLite's findings. A
// database too damaged to query at all is ErrCorrupt too.
func (s *Store) QuickCheck(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, "PRAGMA quick_check")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	defer rows.Close()
	var msgs []string
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		if m != "ok" {
			msgs = append(msgs, m)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if len(msgs) > 0 {
		return fmt.Errorf("%w: %s", ErrCorrupt, strings.Join(msgs, "; "))
	}
	return nil
}

// IntegrityCheck runs PRAGMA integrity_check and a foreign key check and
// returns nil only if both come back clean.
func (s *Store) IntegrityCheck(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return fmt.Errorf("rooms: integrity check: %w", err)
	}
	var msgs []string
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			rows.Close()
			return fmt.Errorf("rooms: integrity check: %w", err)
		}
		if m != "ok" {
			msgs = append(msgs, m)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("rooms: integrity check: %w", err)
	}
	fk, err := s.db.QueryContext(ctx, "PRAGMA foreign_key_check")
	if err != nil {
		return fmt.Errorf("rooms: foreign key check: %w", err)
	}
	for fk.Next() {
		var table, parent string
		var rowid sql.NullInt64
		var idx int
		if err := fk.Scan(&table, &rowid, &parent, &idx); err != nil {
			fk.Close()
			return fmt.Errorf("rooms: foreign key check: %w", err)
		}
		msgs = append(msgs, fmt.Sprintf("%s row %d refers to a missing %s", table, rowid.Int64, parent))
	}
	fk.Close()
	if err := fk.Err(); err != nil {
		return fmt.Errorf("rooms: foreign key check: %w", err)
	}
	if len(msgs) > 0 {
		return fmt.Errorf("%w: %s", ErrCorrupt, strings.Join(msgs, "; "))
	}
	return nil
}

// lockWrite waits for this process's write turn; call the returned func to
// give it up.
func (s *Store) lockWrite(ctx context.Context) (func(), error) {
	select {
	case s.wsem <- struct{}{}:
		// Called after the write committed (or failed): the read_room
		// cache stamps with the generation this bumps.
		return func() { s.rc.wrote(); <-s.wsem }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("rooms: wait to write: %w", ctx.Err())
	}
}

// newID returns prefix followed by 16 random hex digits.
func newID(prefix string) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("rooms: crypto/rand: %v", err)) // never fails on supported platforms
	}
	return prefix + hex.EncodeToString(b[:])
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64).UTC()
}
