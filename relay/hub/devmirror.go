package hub

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// deviceMirror is this node's cache of rr_devices records, so an agent's
// connect usually reads its device record from memory: in a reconnect
// storm the record read and its JSON decoding were a sixth of the hub's
// CPU per connect, and a read per connect on the bucket's leader.
//
// It is filled on demand, not loaded whole: it holds the devices whose
// record this node read at a connect or wrote, and every record changed
// since its watch began (followDevices watches updates only). A start, or
// a new watch after a NATS reconnect, therefore costs nothing per enrolled
// device, and a device never seen here costs no memory; the first connect
// of each device after a start reads the bucket once.
//
// The mirror is an optimisation, never the authority on access:
//   - a device it does not hold is read from the bucket (and kept);
//   - once a watch ends the mirror is empty and every connect reads the
//     bucket, as before; a new watch starts from an empty mirror, and the
//     devices with a session here are read again (a revoke missed while
//     cut off from NATS closes their sessions then);
//   - a record read from the bucket is kept only if no newer revision is
//     held and no watch began since the read (gen), so a read that raced a
//     change the watch already delivered cannot put an older record back;
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
	mu   sync.RWMutex
	live bool   // a watch follows the bucket
	gen  uint64 // counts clears: a bucket read begun before one is not kept
	recs map[string]mirroredDevice
}

type mirroredDevice struct {
	rec *deviceRec // never modified once stored: readers get a copy
	rev uint64
}

// maxMirroredDevices bounds the mirror (~0.5 KB a device:
// BenchmarkDeviceMirrorMemory); devices past it are read from the bucket at
// every connect.
const maxMirroredDevices = 1 << 18

func newDeviceMirror() *deviceMirror {
	return &deviceMirror{recs: map[string]mirroredDevice{}, gen: 1}
}

// generation is taken before a bucket read whose record fill may keep.
func (m *deviceMirror) generation() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.gen
}

// fill keeps a record read from (or written to) the bucket at rev, unless
// the mirror was cleared since gen was taken (a watch began or ended: the
// record may predate a change no watch delivered) or no watch follows it.
func (m *deviceMirror) fill(rec *deviceRec, rev, gen uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.live && m.gen == gen {
		m.putLocked(rec, rev)
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

// put stores rec at rev unless the mirror holds a newer revision (the
// watch's deliveries). It reports whether the stored record went from not
// revoked (or absent) to revoked.
func (m *deviceMirror) put(rec *deviceRec, rev uint64) (revoked bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.putLocked(rec, rev)
}

func (m *deviceMirror) putLocked(rec *deviceRec, rev uint64) (revoked bool) {
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

// setLive says whether a watch follows the bucket. Each change empties the
// mirror and starts a generation: what was held may miss changes no watch
// delivered.
func (m *deviceMirror) setLive(live bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live = live
	m.gen++
	m.recs = map[string]mirroredDevice{}
}

// followDevices keeps h.devMirror in step with one watch of rr_devices'
// updates (a follower for rewatch; the watch delivers no initial values,
// so it is live at once). After a NATS reconnect (not first) the devices
// with a session here are read again: a revoke written while this node
// was cut off is in no update the new watch delivers.
func (h *Hub) followDevices(ctx context.Context, w jetstream.KeyWatcher, reconnected <-chan struct{}, first bool) bool {
	h.devMirror.setLive(true)
	var recheck sync.WaitGroup
	defer recheck.Wait()
	if first {
		h.metrics.copyLoaded(bucketDevices)
	} else {
		recheck.Go(func() {
			h.recheckLocalDevices(ctx)
			h.metrics.copyLoaded(bucketDevices)
		})
	}
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
			if e == nil {
				continue // no initial values with UpdatesOnly; kept for safety
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
			// A revoked record closes the device's sessions here.
			if h.devMirror.put(rec, e.Revision()) {
				h.closeRevoked(rec.ID)
			}
		}
	}
}

// recheckWorkers bounds the reads of recheckLocalDevices in flight.
const recheckWorkers = 8

// recheckLocalDevices reads the record of each device with a session here
// into the mirror, and closes the sessions of a device found revoked.
func (h *Hub) recheckLocalDevices(ctx context.Context) {
	h.mu.Lock()
	devs := make([]string, 0, len(h.byDev))
	for d := range h.byDev {
		devs = append(devs, d)
	}
	h.mu.Unlock()
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(recheckWorkers, len(devs)) {
		wg.Go(func() {
			for id := range work {
				gen := h.devMirror.generation()
				rctx, cancel := context.WithTimeout(ctx, opTimeout)
				d, rev, err := getJSON[deviceRec](rctx, h.st.devices, id)
				cancel()
				switch {
				case errors.Is(err, jetstream.ErrKeyNotFound):
					// Gone from the bucket: its next connect is refused.
				case err != nil:
					h.log.Warn("read a connected device's record after a NATS reconnect", "device", id, "err", err)
				case d.Revoked:
					h.devMirror.put(d, rev)
					h.closeRevoked(id)
				default:
					h.devMirror.fill(d, rev, gen)
				}
			}
		})
	}
	for _, d := range devs {
		select {
		case work <- d:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
}
