//go:build unix

package rooms

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// walIndex is a read-only view of the first page of the database's
// wal-index (the -shm file SQLite keeps beside a WAL database). Its first
// 48 bytes are the wal-index header, which every writer of the database, in
// any process, rewrites when it commits (the transaction counter iChange
// and the last frame move): SQLite publishes a commit to readers exactly by
// writing it (https://www.sqlite.org/walformat.html, "The WAL-Index
// Header"). Reading it costs six loads from shared memory where asking
// SQLite (PRAGMA data_version) takes a read transaction and two fcntl
// locks, about as much as the read it would save.
type walIndex struct {
	// f stays open until the store is closed: closing any descriptor of
	// a file drops every POSIX lock this process holds on it, SQLite's
	// locks on the -shm file included.
	f *os.File
	m []byte
}

// walIndexHdrSize is the header and its copy (2 × 48 bytes) plus the
// checkpoint info after them: the part of the file SQLite initialises first.
const walIndexHdrSize = 136

// openWALIndex maps the wal-index of the database at dbPath. The store
// must have the database open (in WAL mode) first, and keep a connection
// open while the map is used: SQLite deletes the file when its last
// connection closes.
func openWALIndex(dbPath string) (*walIndex, error) {
	f, err := os.Open(dbPath + "-shm")
	if err != nil {
		return nil, fmt.Errorf("rooms: open the wal-index: %w", err)
	}
	st, err := f.Stat()
	if err != nil || st.Size() < walIndexHdrSize {
		f.Close() // no SQLite lock can be on a file this short
		return nil, fmt.Errorf("rooms: the wal-index is not initialised (%v)", err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, walIndexHdrSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		// Keep f: SQLite may hold locks on this file now; the store
		// closes it with itself.
		return &walIndex{f: f}, fmt.Errorf("rooms: map the wal-index: %w", err)
	}
	return &walIndex{f: f, m: m}, nil
}

// header returns the wal-index header's first copy, the one SQLite writes
// last. Loads are atomic per word: a writer may be rewriting it, and a
// torn copy only ever differs from the last one seen (a cache miss).
func (w *walIndex) header() (h walHeader) {
	p := unsafe.Pointer(unsafe.SliceData(w.m))
	for i := range h {
		h[i] = atomic.LoadUint64((*uint64)(unsafe.Add(p, 8*i)))
	}
	return h
}

// mapped reports whether header may be called.
func (w *walIndex) mapped() bool { return w != nil && w.m != nil }

// close unmaps the header and closes the file; call it after the database
// is closed.
func (w *walIndex) close() {
	if w == nil {
		return
	}
	if w.m != nil {
		unix.Munmap(w.m)
		w.m = nil
	}
	w.f.Close()
}
