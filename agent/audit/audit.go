// Package audit is the agent's local audit log: one JSON line per command
// that reached the agent, allowed or denied, in an append-only file whose
// lines are hash-chained, so that an edited, removed, reordered or
// truncated line is found by Verify and named by file and line number.
//
// Each line is a JSON object whose last member is "hash": the lowercase hex
// SHA-256 of the line's exact bytes without that member (the object closed
// right after "prev"). "prev" is the hash of the line before, across
// rotated files, so the chain runs through every kept file. A small head
// file records the sequence number and hash of the last line written, which
// is how a removed last line or a cut-off file is noticed. Size-bounded
// rotation keeps a few files; a manifest records the hash the oldest kept
// file chains to (the anchor), so what is kept still verifies.
//
// One process (the agent) appends; others (the CLI) only read, with Query
// and Verify. Appends within that process are serialised by a mutex.
//
// The chain proves order and completeness against accidents and naive
// edits. Someone who can write the files can also recompute every hash; the
// log cannot defend against that on its own.
package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

// File names inside the log directory.
const (
	CurrentFile  = "audit.jsonl"    // the file appended to
	HeadFile     = "audit.head"     // seq and hash of the last line written
	ManifestFile = "audit.manifest" // the anchor of the oldest kept file
	rotatedGlob  = "audit-*.jsonl"  // rotated files, named by their first seq
)

// Decision says whether the agent let a command run.
type Decision string

const (
	Allowed Decision = "allowed" // the command ran (it may still have failed)
	Denied  Decision = "denied"  // the agent refused it before running it
	// Note marks a line the log writes about itself, such as resuming after
	// the file's tail did not match its head record. Verify reports it.
	Note Decision = "note"
)

// Entry is one line of the log. Seq, Prev and Hash are set by Append.
type Entry struct {
	Seq        uint64    `json:"seq"`
	Time       time.Time `json:"time"`
	CommandID  string    `json:"command_id"`
	Project    string    `json:"project"`
	Room       string    `json:"room,omitempty"`
	Command    string    `json:"command"`
	Decision   Decision  `json:"decision"`
	ErrorCode  string    `json:"error_code,omitempty"`
	DurationMS int64     `json:"duration_ms"`
	Detail     string    `json:"detail,omitempty"` // only on Note lines
	Prev       string    `json:"prev"`
	Hash       string    `json:"hash,omitempty"` // must stay last: see package doc
}

// Field bounds: what the protocol allows an id to be (1–128), so that a
// caller sending megabyte ids can neither bloat the log nor push its
// history out through rotation. Longer values keep a prefix and say how
// long they were.
const (
	MaxIDBytes     = 128
	MaxDetailBytes = 1024
)

// clip bounds every field a remote party controls.
func (e *Entry) clip() {
	e.CommandID = clipField(e.CommandID, MaxIDBytes)
	e.Project = clipField(e.Project, MaxIDBytes)
	e.Room = clipField(e.Room, MaxIDBytes)
	e.Command = clipField(e.Command, MaxIDBytes)
	e.ErrorCode = clipField(e.ErrorCode, MaxIDBytes)
	e.Detail = clipField(e.Detail, MaxDetailBytes)
}

// clipField cuts s to at most max bytes of valid UTF-8, ending in
// "…(N bytes)" when it was longer.
func clipField(s string, max int) string {
	if len(s) <= max {
		return s
	}
	tail := fmt.Sprintf("…(%d bytes)", len(s))
	return strings.ToValidUTF8(relay.CutUTF8(s, max-len(tail)), "") + tail
}

// Options tunes a Log. The zero value is usable.
type Options struct {
	Logger *slog.Logger
	// MaxBytes is the size at which the current file is rotated
	// (default 8 MiB).
	MaxBytes int64
	// Keep is how many files are kept, the current one included
	// (default 5, at least 2).
	Keep int
	// NoSync skips the fsync after each append. Lines are still written
	// with one write on an O_APPEND file, so a crash of the process loses
	// nothing; a power loss may lose the last lines.
	NoSync bool
	// Now is the clock for entries without a time (default time.Now).
	Now func() time.Time
	// SyncWindow bounds how long a line appended with AppendGrouped waits
	// for its fsync (default 5 ms): a power loss loses at most the grouped
	// lines of the last window, never a line Append returned.
	SyncWindow time.Duration
}

// Log is an open audit log. It is safe for concurrent use.
type Log struct {
	dir  string
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	f        *os.File // current file, O_APPEND
	head     *os.File
	size     int64
	firstSeq uint64 // seq of the current file's first line, 0 if empty
	lastSeq  uint64
	lastHash string
	closed   bool

	// Group commit. synced is the last seq known to be on disk; syncMu
	// makes one fsync at a time, which covers every line written before
	// it started, so concurrent appenders share it. The head record is
	// written only for synced lines: after a power loss it never counts a
	// line the disk lost, and Verify reports no missing tail for the
	// grouped lines of the last window.
	syncMu sync.Mutex
	synced atomic.Uint64
	// headSet: a head record exists (found at Open or written since). Until
	// then a grouped line is synced at once, so a verifier never finds
	// lines without any head beside them (which reads as a removed tail).
	headSet  atomic.Bool
	durable  atomic.Pointer[Head] // what the head record holds (Head), nil before the first line
	timer    *time.Timer          // a grouped line waits for a sync (under mu)
	syncErrs atomic.Int64
}

const (
	hashHexLen   = 64
	hashKey      = `,"hash":"`
	hashTailLen  = len(hashKey) + hashHexLen + len(`"}`)
	headFormat   = "roomrelay-audit-head v1 %020d %64s\n"
	headRecLen   = len("roomrelay-audit-head v1 ") + 20 + 1 + hashHexLen + 1
	manifestTemp = ManifestFile + ".tmp"
)

// Open opens the log in dir (created 0700 if missing), finds the end of the
// chain and repairs a torn last line left by a crash. If the file's tail
// does not match the head record, lines were removed or replaced: Open
// logs it, writes a Note line saying so (which Verify keeps reporting), and
// continues the chain from what the file holds, so auditing never stops.
func Open(dir string, opts Options) (*Log, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 8 << 20
	}
	if opts.Keep < 2 {
		opts.Keep = 5
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SyncWindow <= 0 {
		opts.SyncWindow = 5 * time.Millisecond
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit: create %s: %w", dir, err)
	}
	l := &Log{dir: dir, opts: opts, log: opts.Logger}
	head, headOK, err := readHead(dir)
	if err != nil {
		return nil, err
	}
	note, err := l.recover(head, headOK)
	if err != nil {
		return nil, err
	}
	l.f, err = os.OpenFile(filepath.Join(dir, CurrentFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", CurrentFile, err)
	}
	l.head, err = os.OpenFile(filepath.Join(dir, HeadFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		l.f.Close()
		return nil, fmt.Errorf("audit: open %s: %w", HeadFile, err)
	}
	if note != "" {
		l.log.Error("audit: log tail does not match its head record; resuming the chain and recording it", "detail", note)
		if _, err := l.Append(Entry{Command: "audit.resume", Decision: Note, Detail: note}); err != nil {
			l.Close()
			return nil, err
		}
	} else if l.lastSeq > 0 && (!headOK || head.seq != l.lastSeq) {
		// The head lagged (a crash between the line and the head write, or
		// grouped lines not yet synced): make what the file holds durable,
		// then count it.
		if err := l.f.Sync(); err != nil {
			l.Close()
			return nil, fmt.Errorf("audit: sync: %w", err)
		}
		if err := l.writeHead(l.lastSeq, l.lastHash); err != nil {
			l.Close()
			return nil, err
		}
	}
	l.synced.Store(l.lastSeq)
	if headOK || l.lastSeq > 0 { // > 0: the head was written just above
		l.headSet.Store(true)
	}
	if l.lastSeq > 0 {
		l.durable.Store(&Head{Seq: l.lastSeq, Hash: l.lastHash})
	}
	return l, nil
}

// recover scans the current file (or, if it is empty, the newest rotated
// one) for the end of the chain, cuts a torn last line, and returns a note
// if the file disagrees with the head record.
func (l *Log) recover(head headRec, headOK bool) (string, error) {
	cur := filepath.Join(l.dir, CurrentFile)
	lines, partial, err := readLines(cur)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if partial > 0 {
		// A line that never got its newline was cut by a crash; appending
		// after it would damage the next line too.
		info, err := os.Stat(cur)
		if err != nil {
			return "", fmt.Errorf("audit: %w", err)
		}
		if err := os.Truncate(cur, info.Size()-int64(partial)); err != nil {
			return "", fmt.Errorf("audit: cut torn last line of %s: %w", CurrentFile, err)
		}
		l.log.Warn("audit: removed a torn last line left by a crash", "file", CurrentFile, "bytes", partial)
	}
	for _, ln := range lines {
		l.size += int64(len(ln)) + 1
	}
	// Chain to the last line whose hash can be read.
	seqs := map[uint64]string{}
	for _, ln := range lines {
		if e, _, ok := parseLine(ln); ok {
			if l.firstSeq == 0 {
				l.firstSeq = e.Seq
				seqs[e.Seq-1] = e.Prev
			}
			seqs[e.Seq] = e.Hash
			l.lastSeq, l.lastHash = e.Seq, e.Hash
		}
	}
	if l.lastSeq == 0 {
		// Nothing in the current file: continue from the newest rotated
		// file, or from the manifest's anchor if there is none.
		files, err := rotatedFiles(l.dir)
		if err != nil {
			return "", err
		}
		if len(files) > 0 {
			prev, _, err := readLines(filepath.Join(l.dir, files[len(files)-1].name))
			if err != nil {
				return "", err
			}
			for _, ln := range prev {
				if e, _, ok := parseLine(ln); ok {
					l.lastSeq, l.lastHash = e.Seq, e.Hash
					seqs[e.Seq] = e.Hash
				}
			}
		} else if m, err := readManifest(l.dir); err != nil {
			return "", err
		} else {
			l.lastSeq, l.lastHash = m.AnchorSeq, m.AnchorHash
		}
	}
	if !headOK {
		// Seq 1 without a head is a crash before the first head write.
		if l.lastSeq > 1 {
			return fmt.Sprintf("head record missing or unreadable; the log ends at seq %d", l.lastSeq), nil
		}
		return "", nil
	}
	switch {
	case head.seq > l.lastSeq:
		return fmt.Sprintf("head records seq %d but the log ends at seq %d: %d line(s) removed from the end",
			head.seq, l.lastSeq, head.seq-l.lastSeq), nil
	case seqs[head.seq] != "" && seqs[head.seq] != head.hash:
		return fmt.Sprintf("line with seq %d does not match the head record: it was replaced", head.seq), nil
	}
	return "", nil
}

// Close makes grouped lines durable and closes the log's files.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	target := l.lastSeq
	l.mu.Unlock()
	serr := l.syncTo(target)

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	err := errors.Join(serr, l.f.Close(), l.head.Close())
	if err != nil {
		return fmt.Errorf("audit: close: %w", err)
	}
	return nil
}

// encode returns the line for e (with the trailing newline) and its hash.
func encode(e Entry) ([]byte, string, error) {
	e.Hash = ""
	body, err := json.Marshal(e)
	if err != nil {
		return nil, "", fmt.Errorf("audit: encode entry: %w", err)
	}
	sum := sha256.Sum256(body)
	h := hex.EncodeToString(sum[:])
	line := make([]byte, 0, len(body)+hashTailLen)
	line = append(line, body[:len(body)-1]...)
	line = append(line, hashKey...)
	line = append(line, h...)
	line = append(line, `"}`...)
	line = append(line, '\n')
	return line, h, nil
}

// parseLine checks a line (without its newline) against its own hash.
// ok is false if the line is not a log line at all; hashOK is false if it is
// one whose content does not match its hash (it was edited).
func parseLine(ln []byte) (e Entry, hashOK, ok bool) {
	if len(ln) < hashTailLen+2 {
		return Entry{}, false, false
	}
	tail := ln[len(ln)-hashTailLen:]
	if !bytes.HasPrefix(tail, []byte(hashKey)) || !bytes.HasSuffix(tail, []byte(`"}`)) {
		return Entry{}, false, false
	}
	stored := string(tail[len(hashKey) : len(hashKey)+hashHexLen])
	body := make([]byte, 0, len(ln)-hashTailLen+1)
	body = append(body, ln[:len(ln)-hashTailLen]...)
	body = append(body, '}')
	if err := json.Unmarshal(body, &e); err != nil || e.Seq == 0 {
		return Entry{}, false, false
	}
	sum := sha256.Sum256(body)
	e.Hash = stored
	return e, hex.EncodeToString(sum[:]) == stored, true
}

// Append writes e as the next line and returns it with Seq, Prev, Hash (and
// Time, if it was zero) filled in, once the line is durable: it goes out in
// one write on an O_APPEND file and is fsync'd (unless Options.NoSync),
// sharing the fsync with concurrent appends.
func (l *Log) Append(e Entry) (Entry, error) {
	e, err := l.write(e)
	if err != nil {
		return Entry{}, err
	}
	if err := l.syncTo(e.Seq); err != nil {
		return Entry{}, err
	}
	return e, nil
}

// AppendGrouped writes e like Append but returns before the fsync: the
// line is in the file at once (a crash of the process loses nothing), and
// a group commit makes it durable within Options.SyncWindow, together with
// every line written before. For entries that may be lost to a power cut
// (reads, which change nothing); the chain stays intact either way.
func (l *Log) AppendGrouped(e Entry) (Entry, error) {
	e, err := l.write(e)
	if err != nil {
		return Entry{}, err
	}
	if !l.headSet.Load() {
		// A fresh log: its first line gets a head at once (see headSet).
		if err := l.syncTo(e.Seq); err != nil {
			return Entry{}, err
		}
		return e, nil
	}
	l.mu.Lock()
	if l.timer == nil && !l.closed && !l.opts.NoSync {
		l.timer = time.AfterFunc(l.opts.SyncWindow, l.groupSync)
	}
	l.mu.Unlock()
	return e, nil
}

// groupSync is the group commit's timer: one fsync for everything written
// so far.
func (l *Log) groupSync() {
	l.mu.Lock()
	l.timer = nil
	target, closed := l.lastSeq, l.closed
	l.mu.Unlock()
	if closed {
		return
	}
	if err := l.syncTo(target); err != nil {
		l.syncErrs.Add(1)
		l.log.Error("audit: group sync failed; recent lines may be lost to a power cut", "err", err)
	}
}

// write appends e's line to the file (no fsync) and returns it filled in.
func (l *Log) write(e Entry) (Entry, error) {
	e.clip()
	if e.Time.IsZero() {
		e.Time = l.opts.Now()
	}
	e.Time = e.Time.UTC()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return Entry{}, errors.New("audit: append to a closed log")
	}
	e.Seq = l.lastSeq + 1
	e.Prev = l.lastHash
	line, h, err := encode(e)
	if err != nil {
		return Entry{}, err
	}
	if l.size > 0 && l.size+int64(len(line)) > l.opts.MaxBytes {
		if err := l.rotate(); err != nil {
			return Entry{}, err
		}
	}
	if _, err := l.f.Write(line); err != nil {
		return Entry{}, fmt.Errorf("audit: append: %w", err)
	}
	l.size += int64(len(line))
	if l.firstSeq == 0 {
		l.firstSeq = e.Seq
	}
	l.lastSeq, l.lastHash = e.Seq, h
	e.Hash = h
	if l.opts.NoSync {
		// Nothing is ever fsync'd: the head follows every line.
		l.synced.Store(e.Seq)
		if err := l.writeHead(e.Seq, h); err != nil {
			return Entry{}, err
		}
	}
	return e, nil
}

// syncTo returns once the line with seq is durable. One fsync at a time
// runs; it covers every line written before it started, so an appender
// that waited for the previous one usually finds its line covered.
func (l *Log) syncTo(seq uint64) error {
	if l.synced.Load() >= seq {
		return nil
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if l.synced.Load() >= seq {
		return nil
	}
	l.mu.Lock()
	f, target, hash, closed := l.f, l.lastSeq, l.lastHash, l.closed
	l.mu.Unlock()
	if closed {
		return errors.New("audit: sync of a closed log")
	}
	if err := f.Sync(); err != nil {
		// A rotation closed f after syncing it: the line is durable.
		if l.synced.Load() >= seq {
			return nil
		}
		return fmt.Errorf("audit: sync: %w", err)
	}
	l.advanceSynced(target)
	// The head counts only synced lines, so it never runs ahead of the disk.
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	return l.writeHead(target, hash)
}

func (l *Log) advanceSynced(seq uint64) {
	for {
		cur := l.synced.Load()
		if cur >= seq || l.synced.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// writeHead overwrites the fixed-size head record in place: one pwrite, no
// rename, so it costs little per append. It is written after the lines it
// counts are durable, so it is at most behind the file, which Open accepts.
func (l *Log) writeHead(seq uint64, hash string) error {
	rec := fmt.Sprintf(headFormat, seq, hash)
	if _, err := l.head.WriteAt([]byte(rec), 0); err != nil {
		return fmt.Errorf("audit: write %s: %w", HeadFile, err)
	}
	l.headSet.Store(true)
	l.durable.Store(&Head{Seq: seq, Hash: hash})
	return nil
}

// Head is where the log's durable lines end, as its head record says,
// without reading the file: what the agent reports to the hub with every
// result. False before the first line.
func (l *Log) Head() (Head, bool) {
	h := l.durable.Load()
	if h == nil {
		return Head{}, false
	}
	return *h, true
}

type headRec struct {
	seq  uint64
	hash string
}

func readHead(dir string) (headRec, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, HeadFile))
	if errors.Is(err, os.ErrNotExist) {
		return headRec{}, false, nil
	}
	if err != nil {
		return headRec{}, false, fmt.Errorf("audit: read %s: %w", HeadFile, err)
	}
	if len(b) < headRecLen {
		return headRec{}, false, nil
	}
	f := strings.Fields(string(b[:headRecLen]))
	if len(f) != 4 || f[0] != "roomrelay-audit-head" || f[1] != "v1" || len(f[3]) != hashHexLen {
		return headRec{}, false, nil
	}
	seq, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return headRec{}, false, nil
	}
	return headRec{seq: seq, hash: f[3]}, true, nil
}

// readLines returns the complete lines of a file (without newlines) and the
// length of a trailing partial line, if any.
func readLines(path string) ([][]byte, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	var lines [][]byte
	for {
		ln, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return lines, len(ln), nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("audit: read %s: %w", filepath.Base(path), err)
		}
		lines = append(lines, ln[:len(ln)-1])
	}
}
