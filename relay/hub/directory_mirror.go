package hub

import (
	"slices"
	"sync"
)

// mirror is this node's copy of rr_rooms, kept by a KV watch (Run's
// watchDirectory), so listing and resolving rooms read memory instead of
// creating a JetStream consumer per call. Indexes: project → room → the
// devices claiming it, and device → key (what setDirectory compares a hello
// with).
//
// Every node holds every room of every enrolled device, connected or not,
// so the indexes are kept small: a room's claims and a device's entries are
// short slices (usually one element), not maps, which cost ~1 KiB each for
// a single entry (a map allocates a group of eight slots). A room claimed
// by more than maxListedClaims devices keeps them in a map.
type mirror struct {
	mu    sync.RWMutex
	ready chan struct{} // closed once the watch delivered the initial values
	rooms map[string]map[string]claims
	devs  map[string][]devEntry // device → its entries
	// revs is the KV revision each key was last set to here, by this
	// node's own write (setDirectory writes through) or by the watch. The
	// watch lags behind this node's writes, and an event older than what
	// was written here must not undo it (a stale delete would hide a room
	// just written, a stale put bring back one just removed). The watch
	// delivers in revision order, so an entry can go once the watch has
	// passed it.
	revs map[string]uint64
}

// devEntry is one directory entry of a device: its key and room name.
type devEntry struct{ key, name string }

// maxListedClaims is how many devices claiming one room are kept in a
// slice (searched linearly); past it they move to a map, so a room id many
// devices share costs no quadratic time.
const maxListedClaims = 8

// claims are the devices claiming one room.
type claims struct {
	few  []roomRec
	many map[string]roomRec // device → its claim, once past maxListedClaims
}

func (c *claims) put(rec roomRec) {
	if c.many != nil {
		c.many[rec.Device] = rec
		return
	}
	if i := slices.IndexFunc(c.few, func(o roomRec) bool { return o.Device == rec.Device }); i >= 0 {
		c.few[i] = rec
		return
	}
	if len(c.few) < maxListedClaims {
		c.few = append(c.few, rec)
		return
	}
	c.many = make(map[string]roomRec, len(c.few)+1)
	for _, o := range c.few {
		c.many[o.Device] = o
	}
	c.many[rec.Device] = rec
	c.few = nil
}

func (c *claims) remove(dev string) {
	if c.many != nil {
		delete(c.many, dev)
		return
	}
	c.few = slices.DeleteFunc(c.few, func(o roomRec) bool { return o.Device == dev })
}

func (c *claims) len() int { return len(c.few) + len(c.many) }

// appendTo appends copies of the claims to out.
func (c *claims) appendTo(out []roomRec) []roomRec {
	out = append(out, c.few...)
	for _, rec := range c.many {
		out = append(out, rec)
	}
	return out
}

func newMirror() *mirror {
	return &mirror{ready: make(chan struct{}), rooms: map[string]map[string]claims{},
		devs: map[string][]devEntry{}, revs: map[string]uint64{}}
}

// written records this node's own write of key at revision rev (a put), or
// a removal after revision rev (a purge, whose own revision is later).
func (m *mirror) written(key string, rev uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rev > m.revs[key] {
		m.revs[key] = rev
	}
}

// fresh reports whether a watch event at rev is not older than what this
// node wrote, and forgets the write record once the watch caught up.
func (m *mirror) fresh(key string, rev uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.revs[key]
	if !ok {
		return true
	}
	if rev < w {
		return false
	}
	delete(m.revs, key)
	return true
}

// rev is the revision this node knows key at (0: none).
func (m *mirror) rev(key string) uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.revs[key]
}

// ofDevice returns one device's entries: key → room name.
func (m *mirror) ofDevice(dev string) map[string]string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	es := m.devs[dev]
	if es == nil {
		return nil
	}
	out := make(map[string]string, len(es))
	for _, e := range es {
		out[e.key] = e.name
	}
	return out
}

// swap takes next's entries (a new watch's initial values, filled by the
// caller's goroutine only) as its own; the record of this node's writes
// stays.
func (m *mirror) swap(next *mirror) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rooms, m.devs = next.rooms, next.devs
}

// sameAs reports whether the device's entries are exactly want's keys with
// want's names.
func (m *mirror) sameAs(dev string, want map[string]roomRec) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	have := m.devs[dev]
	if len(have) != len(want) {
		return false
	}
	for _, e := range have {
		if rec, ok := want[e.key]; !ok || rec.Name != e.name {
			return false
		}
	}
	return true
}

func (m *mirror) put(rec roomRec) {
	m.mu.Lock()
	defer m.mu.Unlock()
	byRoom := m.rooms[rec.Project]
	if byRoom == nil {
		byRoom = map[string]claims{}
		m.rooms[rec.Project] = byRoom
	}
	c := byRoom[rec.RoomID]
	c.put(rec)
	byRoom[rec.RoomID] = c
	key := roomKey(rec.Project, rec.RoomID, rec.Device)
	es := m.devs[rec.Device]
	if i := slices.IndexFunc(es, func(e devEntry) bool { return e.key == key }); i >= 0 {
		es[i].name = rec.Name
		return
	}
	m.devs[rec.Device] = append(es, devEntry{key: key, name: rec.Name})
}

func (m *mirror) remove(key string) {
	project, room, dev, ok := splitRoomKey(key)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if byRoom, ok := m.rooms[project]; ok {
		if c, ok := byRoom[room]; ok {
			c.remove(dev)
			if c.len() == 0 {
				delete(byRoom, room)
			} else {
				byRoom[room] = c
			}
		}
		if len(byRoom) == 0 {
			delete(m.rooms, project)
		}
	}
	if es := slices.DeleteFunc(m.devs[dev], func(e devEntry) bool { return e.key == key }); len(es) > 0 {
		m.devs[dev] = es
	} else {
		delete(m.devs, dev)
	}
}

// project returns a copy of one project's rooms: room → its claims.
func (m *mirror) project(p string) map[string][]roomRec {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make(map[string][]roomRec, len(m.rooms[p]))
	for room, c := range m.rooms[p] {
		out[room] = c.appendTo(nil)
	}
	return out
}

func (m *mirror) room(p, room string) []roomRec {
	m.mu.RLock()
	defer m.mu.RUnlock()
	c := m.rooms[p][room]
	return c.appendTo(nil)
}
