package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver (pure Go, no cgo)

	"github.com/roomrelay/roomrelay/relay"
)

// DedupeFile is the name of the dedupe database inside the state directory.
const DedupeFile = "commands.db"

// The dedupe store is SQLite (WAL, synchronous=FULL) rather than an
// append-only file because it gives, without code of our own: a durable
// "started" mark per command in one fsync'd transaction, lookups by id that
// do not hold every stored result in memory, and pruning by age, count and
// size that reuses freed pages, so the file stays bounded without rewrites.
// modernc.org/sqlite is already the project's embedded database.
const dedupeSchema = `
CREATE TABLE IF NOT EXISTS commands (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	project    TEXT NOT NULL,
	state      TEXT NOT NULL CHECK (state IN ('started', 'done')),
	result     BLOB,
	started_at INTEGER NOT NULL, -- unix ms
	done_at    INTEGER
);
CREATE INDEX IF NOT EXISTS commands_started_at ON commands (started_at);
`

const (
	stateStarted = "started"
	stateDone    = "done"
)

// pruneEvery is how many recorded commands pass between two prunes.
const pruneEvery = 256

type dedupeStore struct {
	db       *sql.DB
	clock    Clock
	ttl      time.Duration
	max      int
	maxBytes int64
	inserts  atomic.Int64

	// Prepared once: the hot statements are not re-parsed per command.
	stLookup, stStart, stFinish *sql.Stmt

	// Marks of concurrent writes share one transaction (one fsync): ops
	// go to commitLoop, which runs whatever queued meanwhile together.
	ops      chan *markOp
	cmu      sync.RWMutex // closed vs. senders
	closed   bool
	loopDone chan struct{}
	commits  atomic.Int64 // transactions committed, for tests
	queued   atomic.Int64 // marks handed to the commit loop, for tests
	lookups  atomic.Int64 // lookups that reached SQLite, for tests

	// ids indexes the stored command ids in memory, so a command whose id
	// the store never saw (every read, every fresh write) costs no query
	// on the store's one connection. Only writes are stored, so it holds at
	// most the store's count bound. Added after a started mark commits,
	// removed with the rows prune deletes.
	idsMu sync.Mutex
	ids   map[string]struct{}
}

// markOp is one durable mark: a prepared statement and its arguments.
type markOp struct {
	st   *sql.Stmt
	args []any
	n    int64 // rows affected
	err  error
	done chan struct{}
}

// maxBatch bounds the marks committed in one transaction.
const maxBatch = 64

// dedupeEntry is what the store knows about a command id.
type dedupeEntry struct {
	Name, Project string
	ArgsHash      string // "" for entries stored before the column existed
	State         string
	Result        *relay.Result // nil while started
}

// argsHash identifies a command's arguments, whitespace aside: a reused id
// with other arguments is a conflict, not a redelivery.
func argsHash(args json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, args) != nil {
		b.Reset()
		b.Write(args)
	}
	sum := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(sum[:16])
}

func openDedupe(ctx context.Context, dir string, clock Clock, ttl time.Duration, max int, maxBytes int64) (*dedupeStore, error) {
	path := filepath.Join(dir, DedupeFile)
	// Create the file 0600 before SQLite does (it would use 0644).
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return nil, fmt.Errorf("dedupe store: %w", err)
	} else {
		f.Close()
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	// A small page cache: the store is tiny and the agent's idle memory matters.
	q.Add("_pragma", "cache_size(-256)")
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("dedupe store: open %s: %w", DedupeFile, err)
	}
	// One connection: writes are serialised anyway, and it keeps memory low.
	db.SetMaxOpenConns(1)
	db.SetConnMaxIdleTime(0)
	if _, err := db.ExecContext(ctx, dedupeSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("dedupe store: create schema in %s: %w", DedupeFile, err)
	}
	// Added after the first release: stores from then lack the column.
	if _, err := db.ExecContext(ctx, `ALTER TABLE commands ADD COLUMN args_hash TEXT NOT NULL DEFAULT ''`); err != nil &&
		!strings.Contains(err.Error(), "duplicate column") {
		db.Close()
		return nil, fmt.Errorf("dedupe store: add args_hash to %s: %w", DedupeFile, err)
	}
	s := &dedupeStore{db: db, clock: clock, ttl: ttl, max: max, maxBytes: maxBytes,
		ops: make(chan *markOp, maxBatch), loopDone: make(chan struct{}), ids: map[string]struct{}{}}
	for _, p := range []struct {
		st  **sql.Stmt
		sql string
	}{
		{&s.stLookup, `SELECT name, project, args_hash, state, result FROM commands WHERE id = ?`},
		{&s.stStart, `INSERT INTO commands (id, name, project, args_hash, state, started_at) VALUES (?, ?, ?, ?, 'started', ?)
		 ON CONFLICT (id) DO NOTHING`},
		{&s.stFinish, `INSERT INTO commands (id, name, project, args_hash, state, result, started_at, done_at) VALUES (?, ?, ?, ?, 'done', ?, ?, ?)
		 ON CONFLICT (id) DO UPDATE SET state = 'done', result = excluded.result, done_at = excluded.done_at`},
	} {
		if *p.st, err = db.PrepareContext(ctx, p.sql); err != nil {
			db.Close()
			return nil, fmt.Errorf("dedupe store: prepare: %w", err)
		}
	}
	if err := s.prune(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.loadIDs(ctx); err != nil {
		db.Close()
		return nil, err
	}
	go s.commitLoop()
	return s, nil
}

// Close ends the commit loop (after the marks queued before it) and closes
// the database.
func (s *dedupeStore) Close() error {
	s.cmu.Lock()
	if !s.closed {
		s.closed = true
		close(s.ops)
	}
	s.cmu.Unlock()
	<-s.loopDone
	return s.db.Close()
}

// mark runs one durable mark in the next group transaction and returns its
// rows affected once that transaction committed.
func (s *dedupeStore) mark(ctx context.Context, st *sql.Stmt, args ...any) (int64, error) {
	op := &markOp{st: st, args: args, done: make(chan struct{})}
	s.cmu.RLock()
	if s.closed {
		s.cmu.RUnlock()
		return 0, errors.New("dedupe store: closed")
	}
	select {
	case s.ops <- op:
		s.queued.Add(1)
	case <-ctx.Done():
		s.cmu.RUnlock()
		return 0, ctx.Err()
	}
	s.cmu.RUnlock()
	<-op.done // not abandoned on ctx: the commit loop owns it now
	return op.n, op.err
}

// commitLoop commits marks: the first queued op, plus every op that queued
// while the previous transaction ran, in one transaction and one fsync.
func (s *dedupeStore) commitLoop() {
	defer close(s.loopDone)
	for first := range s.ops {
		batch := []*markOp{first}
	more:
		for len(batch) < maxBatch {
			select {
			case op, ok := <-s.ops:
				if !ok {
					break more
				}
				batch = append(batch, op)
			default:
				break more
			}
		}
		s.commit(batch)
		for _, op := range batch {
			close(op.done)
		}
	}
}

// commit runs a batch in one transaction. If any statement fails, the
// transaction is rolled back and each op runs alone, so one bad mark does
// not fail the others.
func (s *dedupeStore) commit(batch []*markOp) {
	ctx := context.Background()
	if len(batch) > 1 {
		if err := s.commitTx(ctx, batch); err == nil {
			return
		}
	}
	for _, op := range batch {
		op.err = s.commitTx(ctx, []*markOp{op})
	}
}

func (s *dedupeStore) commitTx(ctx context.Context, batch []*markOp) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	for _, op := range batch {
		r, err := tx.StmtContext(ctx, op.st).ExecContext(ctx, op.args...)
		if err == nil {
			op.n, err = r.RowsAffected()
		}
		if err != nil {
			tx.Rollback()
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.commits.Add(1)
	return nil
}

// loadIDs fills the id index from the store.
func (s *dedupeStore) loadIDs(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM commands`)
	if err != nil {
		return fmt.Errorf("dedupe store: read ids: %w", err)
	}
	defer rows.Close()
	ids := map[string]struct{}{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("dedupe store: read ids: %w", err)
		}
		ids[id] = struct{}{}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("dedupe store: read ids: %w", err)
	}
	s.idsMu.Lock()
	s.ids = ids
	s.idsMu.Unlock()
	return nil
}

// known reports whether the store may hold an entry for id; false means it
// holds none, so lookup would return nil.
func (s *dedupeStore) known(id string) bool {
	s.idsMu.Lock()
	defer s.idsMu.Unlock()
	_, ok := s.ids[id]
	return ok
}

func (s *dedupeStore) indexIDs(add bool, ids ...string) {
	s.idsMu.Lock()
	defer s.idsMu.Unlock()
	for _, id := range ids {
		if add {
			s.ids[id] = struct{}{}
		} else {
			delete(s.ids, id)
		}
	}
}

// lookup returns the entry for id, or nil if the id is unknown. An id the
// index does not hold is answered without a query.
func (s *dedupeStore) lookup(ctx context.Context, id string) (*dedupeEntry, error) {
	if !s.known(id) {
		return nil, nil
	}
	s.lookups.Add(1)
	var e dedupeEntry
	var res []byte
	err := s.stLookup.QueryRowContext(ctx, id).Scan(&e.Name, &e.Project, &e.ArgsHash, &e.State, &res)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dedupe store: look up command %q: %w", id, err)
	}
	if e.State == stateDone && len(res) > 0 {
		e.Result = new(relay.Result)
		if err := json.Unmarshal(res, e.Result); err != nil {
			return nil, fmt.Errorf("dedupe store: stored result of %q: %w", id, err)
		}
	}
	return &e, nil
}

// markStarted durably records that cmd is about to run. It reports false if
// the id was already recorded (another process sharing the state directory
// got there first): the caller must then not run the command.
func (s *dedupeStore) markStarted(ctx context.Context, cmd *relay.Command) (bool, error) {
	n, err := s.mark(ctx, s.stStart, cmd.ID, cmd.Name, cmd.ProjectID, argsHash(cmd.Args), s.clock.Now().UnixMilli())
	if err != nil {
		return false, fmt.Errorf("dedupe store: mark %q started: %w", cmd.ID, err)
	}
	s.indexIDs(true, cmd.ID) // stored now, whether by this mark or an earlier one
	return n == 1, nil
}

// finish stores the result of a started command (or of one found
// interrupted), then prunes now and then.
func (s *dedupeStore) finish(ctx context.Context, cmd *relay.Command, res *relay.Result) error {
	b, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("dedupe store: encode result of %q: %w", cmd.ID, err)
	}
	now := s.clock.Now().UnixMilli()
	if _, err := s.mark(ctx, s.stFinish, cmd.ID, cmd.Name, cmd.ProjectID, argsHash(cmd.Args), b, now, now); err != nil {
		return fmt.Errorf("dedupe store: store result of %q: %w", cmd.ID, err)
	}
	s.indexIDs(true, cmd.ID)
	if s.inserts.Add(1)%pruneEvery == 0 {
		return s.prune(ctx)
	}
	return nil
}

// prune drops entries older than the TTL, then the oldest finished entries
// beyond the count and size limits. Unfinished entries younger than the TTL
// stay: they are what stops an interrupted command from running twice.
func (s *dedupeStore) prune(ctx context.Context) error {
	cutoff := s.clock.Now().Add(-s.ttl).UnixMilli()
	if err := s.deleteIDs(ctx, `DELETE FROM commands WHERE started_at < ? RETURNING id`, cutoff); err != nil {
		return fmt.Errorf("dedupe store: prune by age: %w", err)
	}
	rows, err := s.db.QueryContext(ctx,
		`SELECT started_at, length(result) FROM commands WHERE state = 'done' ORDER BY started_at DESC, id DESC`)
	if err != nil {
		return fmt.Errorf("dedupe store: prune: %w", err)
	}
	var (
		n      int
		total  int64
		oldest int64 = -1 // newest started_at to delete at or below
	)
	for rows.Next() {
		var at int64
		var size sql.NullInt64
		if err := rows.Scan(&at, &size); err != nil {
			rows.Close()
			return fmt.Errorf("dedupe store: prune: %w", err)
		}
		n++
		total += size.Int64
		if n > s.max || total > s.maxBytes {
			oldest = at
			break
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("dedupe store: prune: %w", err)
	}
	if oldest >= 0 {
		if err := s.deleteIDs(ctx, `DELETE FROM commands WHERE state = 'done' AND started_at <= ? RETURNING id`, oldest); err != nil {
			return fmt.Errorf("dedupe store: prune by size: %w", err)
		}
	}
	return nil
}

// deleteIDs runs a DELETE … RETURNING id and drops the ids from the index.
func (s *dedupeStore) deleteIDs(ctx context.Context, query string, args ...any) error {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	var gone []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		gone = append(gone, id)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	s.indexIDs(false, gone...)
	return nil
}

// count returns the number of stored entries (for tests and status).
func (s *dedupeStore) count(ctx context.Context) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM commands`).Scan(&n)
	return n, err
}

// RecordedCommands counts the commands the dedupe store in stateDir holds
// (those of the last day or so, by its pruning), opening it read-only; 0
// when there is no store. `audit verify` uses it to tell "no commands ran"
// from "the audit log was removed".
func RecordedCommands(ctx context.Context, stateDir string) (int, error) {
	path := filepath.Join(stateDir, DedupeFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?mode=ro&_pragma=busy_timeout(5000)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return 0, fmt.Errorf("dedupe store: %w", err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM commands`).Scan(&n); err != nil {
		return 0, fmt.Errorf("dedupe store: count: %w", err)
	}
	return n, nil
}
