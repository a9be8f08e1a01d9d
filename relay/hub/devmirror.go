package hub

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// deviceMirror is this node's copy of rr_devices, kept by a KV watch
// (followDevices, started over after a NATS reconnect: watch.go), so an agent's connect reads its device record from memory:
// in a reconnect storm the record read and its JSON decoding were a sixth
// of the hub's CPU per connect, and a read per connect on the bucket's
// leader.
//
// The mirror is an optimisation, never the authority on access:
//   - a device it does not hold (enrolled a moment ago, past the bound, or
//     before the initial values arrived) is read from the bucket;
//   - while a watch loads its initial values, and once a watch ends, the
//     mirror is empty and every connect reads the bucket, as before;
//   - a revoke reaches it twice: the revoke message marks the entry revoked
//     (and refuses sessions still setting up, as before), so a stalled watch
//     cannot let the device back in; the watch delivers the revoked record,
//     which closes the device's sessions here, so a lost revoke message no
//     longer leaves a session open. A revoke is final: no later record
//     clears the mark.
//
// Each entry is stored with its KV revision, and only a newer revision
// replaces it, so this node's own write (recordHello writes through) is not
// undone by the watch delivering an older one.
type deviceMirror struct {
	mu     sync.RWMutex
	live   bool          // the watch delivered its initial values and has not ended
	liveCh chan struct{} // closed the first time live is set
	recs   map[string]mirroredDevice
}

type mirroredDevice struct {
	rec *deviceRec // never modified once stored: readers get a copy
	rev uint64
}

// maxMirroredDevices bounds the mirror (~0.5 KB a device:
// BenchmarkDeviceMirrorMemory); devices past it are read from the bucket at
// connect.
const maxMirroredDevices = 1 << 18

func newDeviceMirror() *deviceMirror {
	return &deviceMirror{recs: map[string]mirroredDevice{}, liveCh: make(chan struct{})}
}

// mirrorWait bounds how long Run waits for the mirror before it is ready.
const mirrorWait = 3 * time.Second

// waitLive waits until the initial values are in, ctx ends or d passes.
func (m *deviceMirror) waitLive(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-m.liveCh:
	case <-ctx.Done():
	case <-t.C:
	}
}

// get returns a copy of the device's record and its revision, if held.
func (m *deviceMirror) get(id string) (*deviceRec, uint64, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.live {
		return nil, 0, false
	}
	e, ok := m.recs[id]
	if !ok {
		return nil, 0, false
	}
	return cloneDevice(e.rec), e.rev, true
}

// cloneDevice copies d down to its slices, so no caller can change the
// mirror's record through them.
func cloneDevice(d *deviceRec) *deviceRec {
	c := *d
	c.Projects = slices.Clone(d.Projects)
	c.Policy = slices.Clone(d.Policy)
	for i := range c.Policy {
		c.Policy[i].Commands = slices.Clone(c.Policy[i].Commands)
	}
	return &c
}

// put stores rec at rev unless the mirror holds a newer revision. It
// reports whether the stored record went from not revoked (or absent) to
// revoked.
func (m *deviceMirror) put(rec *deviceRec, rev uint64) (revoked bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.recs[rec.ID]
	if ok && old.rev >= rev {
		return false
	}
	if !ok && len(m.recs) >= maxMirroredDevices {
		return rec.Revoked
	}
	if ok && old.rec.Revoked && !rec.Revoked {
		r := *rec
		r.Revoked, r.RevokedAt = true, old.rec.RevokedAt
		rec = &r
	}
	m.recs[rec.ID] = mirroredDevice{rec: rec, rev: rev}
	return rec.Revoked && (!ok || !old.rec.Revoked)
}

// markRevoked records a revoke this node heard of (the revoke message) in
// the device's entry, so the mirror refuses the device even if its watch
// stalled before the revoked record arrived. A revoke is final (the device
// enrolls again under a new id), so put keeps the mark too.
func (m *deviceMirror) markRevoked(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.recs[id]
	if !ok || e.rec.Revoked {
		return
	}
	r := *e.rec
	r.Revoked = true
	m.recs[id] = mirroredDevice{rec: &r, rev: e.rev}
}

// remove drops the device's entry unless it is newer than rev (a delete's
// revision).
func (m *deviceMirror) remove(id string, rev uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.recs[id]; ok && e.rev < rev {
		delete(m.recs, id)
	}
}

// len is the number of records held (0 after a watch ended, or for no
// mirror: a Hub made by hand in a test).
func (m *deviceMirror) len() int {
	if m == nil {
		return 0
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.recs)
}

func (m *deviceMirror) setLive(live bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if live && !m.live {
		select {
		case <-m.liveCh:
		default:
			close(m.liveCh)
		}
	}
	m.live = live
	if !live {
		m.recs = map[string]mirroredDevice{}
	}
}

// followDevices keeps h.devMirror in step with one watch of rr_devices (a
// follower for rewatch). A new watch empties the mirror first: until its
// initial values are in, connects read the bucket.
func (h *Hub) followDevices(ctx context.Context, w jetstream.KeyWatcher, reconnected <-chan struct{}, _ bool) bool {
	h.devMirror.setLive(false)
	initial := true
	for {
		select {
		case <-ctx.Done():
			h.devMirror.setLive(false)
			return false
		case <-reconnected:
			return true
		case e, ok := <-w.Updates():
			if !ok {
				h.log.Error("device watch ended; connects on this node read device records from the bucket")
				h.devMirror.setLive(false)
				return false
			}
			if e == nil { // the initial values are in
				initial = false
				h.devMirror.setLive(true)
				h.metrics.copyLoaded(bucketDevices)
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				h.devMirror.remove(e.Key(), e.Revision())
				continue
			}
			rec := new(deviceRec)
			if err := json.Unmarshal(e.Value(), rec); err != nil || rec.ID != e.Key() {
				h.log.Warn("unreadable device record; connects read it from the bucket", "key", e.Key(), "err", err)
				h.devMirror.remove(e.Key(), e.Revision()+1)
				continue
			}
			// A revoked record closes the device's sessions here. In a
			// watch's initial values only a device with a session here is
			// looked at: at start there is none, and after a reconnect
			// every revoked device ever would otherwise be noted again.
			if h.devMirror.put(rec, e.Revision()) && (!initial || len(h.localSessions(rec.ID)) > 0) {
				h.closeRevoked(rec.ID)
			}
		}
	}
}
