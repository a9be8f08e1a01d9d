package rooms

import (
	"sync"
	"sync/atomic"
)

// The read_room summary cache. read_room is the hub's most frequent
// command, and asking SQLite for it (a read transaction, the WAL's shared
// lock, two counts) was about half of the agent's CPU per call in
// bench/roundtrip. A summary only changes when someone commits, so the
// store keeps the summaries it read under a stamp of the database's commit
// state and answers from them while the stamp is unchanged.
//
// The stamp is this store's write generation (bumped after every write
// through it commits) and the wal-index header, which every commit to the
// database rewrites, whoever makes it: this store, another connection, or
// another process (the roomrelay CLI's `rooms create`, `review approve`
// and the demo write the same file beside a running daemon). A summary
// is stored under the stamp read before its query ran, so it is never
// older than its stamp; a commit after that changes the stamp, and the
// next read asks SQLite again.

// walHeader is the wal-index header's first copy (48 bytes).
type walHeader [6]uint64

// changeStamp names the database's commit state as this store sees it.
type changeStamp struct {
	gen uint64
	hdr walHeader
}

// maxCachedRooms bounds the cache. Only rooms that exist are kept (a
// not_found is asked again every time), so this is a bound on rooms, not
// on what callers ask for; past it, summaries are not kept.
const maxCachedRooms = 1024

type roomKey struct{ project, room string }

type roomCache struct {
	gen atomic.Uint64 // the write generation (Store.lockWrite's release bumps it)
	wal *walIndex     // nil or unmapped: the cache is off

	mu    sync.Mutex
	stamp changeStamp // what m was read under
	m     map[roomKey]RoomSummary
}

// current returns the stamp now, and false when the cache is off.
func (c *roomCache) current() (changeStamp, bool) {
	if !c.wal.mapped() {
		return changeStamp{}, false
	}
	// The generation first: a write through this store bumps it after
	// its commit, so a stamp taken after the bump also has the new header.
	g := c.gen.Load()
	return changeStamp{gen: g, hdr: c.wal.header()}, true
}

// get returns the summary kept under st, if any.
func (c *roomCache) get(st changeStamp, k roomKey) (RoomSummary, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stamp != st {
		return RoomSummary{}, false
	}
	r, ok := c.m[k]
	return r, ok
}

// put keeps r, read by a query that began after st was taken. A put under
// an older stamp than the kept one replaces them all: that only costs the
// next reads a query, never serves a summary older than its stamp.
func (c *roomCache) put(st changeStamp, k roomKey, r RoomSummary) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[roomKey]RoomSummary)
	}
	if c.stamp != st {
		c.stamp = st
		clear(c.m)
	}
	if len(c.m) < maxCachedRooms {
		c.m[k] = r
	}
}

// wrote is called after each write through the store committed (or
// failed): the next read_room asks SQLite.
func (c *roomCache) wrote() { c.gen.Add(1) }
