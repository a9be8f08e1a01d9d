package hub

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The room directory: which device serves which room, as the devices report
// it (hello, rooms_changed). A model names a room, never a device; every
// room tool resolves its device here. Writes go to rr_rooms; every node
// reads its own mirror of the bucket, kept by a KV watch.
//
// One key per (project, room, device) in rr_rooms:
// b64(project) "." b64(room) "." device. Listing a project's rooms, a
// room's devices and a device's rooms are then key filters. A room two
// devices claim has two keys, and ResolveRoom refuses it.
//
// What one device can make the bucket hold is bounded by its directory: a
// value per current entry (history 1, at most MaxDirectoryRooms), and the
// purge markers of entries it removed, which expire after dirMarkerTTL
// (the bucket's LimitMarkerTTL; watches deliver them long before) and of
// which a device may leave at most MaxDirectoryRooms per dirMarkerTTL on
// a node (dirChurn): a directory update that would remove more is
// refused, the directory stays as it was. Renaming churn therefore cannot
// accumulate, nor fill the bucket other projects share.

// errDirectoryChurn: a directory update refused by the churn bound.
var errDirectoryChurn = errors.New("directory churn")

// dirMarkerTTL is how long a removed entry's purge marker stays in rr_rooms.
const dirMarkerTTL = time.Minute

type roomRec struct {
	Project   string    `json:"project"`
	RoomID    string    `json:"room_id"`
	Name      string    `json:"name"`
	Device    string    `json:"device"`
	UpdatedAt time.Time `json:"updated_at"`
}

func enc(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func roomKey(project, room, dev string) string { return enc(project) + "." + enc(room) + "." + dev }

// setDirectory replaces device d's directory with rooms, keeping only
// entries of projects the hub enrolled it for (a device cannot place rooms
// in another project) and well-formed ones, at most MaxDirectoryRooms.
func (h *Hub) setDirectory(ctx context.Context, d *deviceRec, rooms []relay.RoomEntry) error {
	return h.updateDirectory(ctx, d, rooms, true)
}

// updateDirectory is setDirectory; budgeted says the removals count
// against the device's churn bound (not for the hub's own drop of a
// revoked device).
func (h *Hub) updateDirectory(ctx context.Context, d *deviceRec, rooms []relay.RoomEntry, budgeted bool) error {
	want := map[string]roomRec{}
	now := h.cfg.Now().UTC()
	for _, e := range rooms {
		if len(want) >= relay.MaxDirectoryRooms {
			h.log.Warn("device directory over its bound; the rest is ignored", "device", d.ID, "rooms", len(rooms), "max", relay.MaxDirectoryRooms)
			break
		}
		if !d.hasProject(e.Project) || !relay.ValidID(e.RoomID) {
			continue
		}
		want[roomKey(e.Project, e.RoomID, d.ID)] = roomRec{Project: e.Project, RoomID: e.RoomID,
			Name: clipName(e.Name), Device: d.ID, UpdatedAt: now}
	}
	// What the device has is read from this node's mirror, not listed from
	// the bucket: a listing creates a JetStream consumer, per connect. The
	// mirror is written through below, so a second change right after the
	// first does not wait for the watch to see it.
	if err := h.dirReady(ctx); err != nil {
		return fmt.Errorf("room directory not loaded: %w", err)
	}
	if h.dir.sameAs(d.ID, want) {
		return nil // a reconnect: nothing changed, nothing to copy
	}
	have := h.dir.ofDevice(d.ID)
	removed := 0
	for k := range have {
		if _, ok := want[k]; !ok {
			removed++
		}
	}
	if budgeted && removed > 0 {
		if ok, held := h.dirChurn.take(d.ID, removed); !ok {
			return fmt.Errorf("%w: this update removes %d room entries and the device removed %d in the last %s; at most %d per %s (room directory churn bound): the directory stays as it was",
				errDirectoryChurn, removed, held, dirMarkerTTL, relay.MaxDirectoryRooms, dirMarkerTTL)
		}
	}
	var errs []error
	for k := range have {
		if _, ok := want[k]; !ok {
			// The purge's own revision is unknown but later than the key's
			// last one: events up to that one are stale from now on.
			prev := h.dir.rev(k)
			if e, err := h.st.rooms.Get(ctx, k); err == nil {
				prev = max(prev, e.Revision())
			}
			if err := h.st.rooms.Purge(ctx, k, jetstream.PurgeTTL(dirMarkerTTL)); err != nil {
				errs = append(errs, err)
				continue
			}
			h.dir.written(k, prev+1)
			h.dir.remove(k)
		}
	}
	for k, rec := range want {
		if name, ok := have[k]; ok && name == rec.Name {
			continue // unchanged: no write
		}
		rev, err := h.st.rooms.Put(ctx, k, mustJSON(rec))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		h.dir.written(k, rev)
		h.dir.put(rec)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("update directory: %w", err)
	}
	return nil
}

// dropDirectory removes every room of a device (revoked).
func (h *Hub) dropDirectory(ctx context.Context, dev string) error {
	return h.updateDirectory(ctx, &deviceRec{ID: dev}, nil, false)
}

// churnLimiter counts, per device, the room entries it removed in the
// current window on this node.
type churnLimiter struct {
	max    int
	window time.Duration
	now    func() time.Time
	mu     sync.Mutex
	m      map[string]churnWindow
}

type churnWindow struct {
	start time.Time
	n     int
}

func newChurnLimiter(max int, window time.Duration, now func() time.Time) *churnLimiter {
	return &churnLimiter{max: max, window: window, now: now, m: map[string]churnWindow{}}
}

// take counts n removals for dev, or refuses them all when they would
// pass the bound; held is what the window held before.
func (l *churnLimiter) take(dev string, n int) (ok bool, held int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.m[dev]
	if now.Sub(w.start) >= l.window {
		if len(l.m) >= 100_000 { // bounded memory: drop the windows that ended
			for k, x := range l.m {
				if now.Sub(x.start) >= l.window {
					delete(l.m, k)
				}
			}
		}
		w = churnWindow{start: now}
	}
	if w.n+n > l.max {
		return false, w.n
	}
	w.n += n
	l.m[dev] = w
	return true, w.n - n
}

func clipName(s string) string { return relay.CutUTF8(s, relay.MaxRoomNameBytes) }

// roomKeys lists rr_rooms keys matching a filter (an empty bucket is none).
func (s *store) roomKeys(ctx context.Context, filter string) ([]string, error) {
	lister, err := s.rooms.ListKeysFiltered(ctx, filter)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("list rooms: %w", err)
	}
	defer lister.Stop()
	var out []string
	for k := range lister.Keys() {
		out = append(out, k)
	}
	return out, nil
}

func splitRoomKey(key string) (project, room, dev string, ok bool) {
	parts := strings.Split(key, ".")
	if len(parts) != 3 {
		return "", "", "", false
	}
	p, err1 := base64.RawURLEncoding.DecodeString(parts[0])
	r, err2 := base64.RawURLEncoding.DecodeString(parts[1])
	if err1 != nil || err2 != nil {
		return "", "", "", false
	}
	return string(p), string(r), parts[2], true
}

// followDirectory keeps h.dir in step with one watch of rr_rooms (a
// follower for rewatch). The first watch fills h.dir and opens it (ready);
// a later one (after a NATS reconnect) fills a fresh copy while h.dir keeps
// serving the old one, and swaps it in once its initial values are in, so
// entries removed while the old watch stalled go too.
func (h *Hub) followDirectory(ctx context.Context, w jetstream.KeyWatcher, reconnected <-chan struct{}, first bool) bool {
	into := h.dir
	if !first {
		into = newMirror()
	}
	initial := true
	for {
		select {
		case <-ctx.Done():
			return false
		case <-reconnected:
			return true
		case e, ok := <-w.Updates():
			if !ok {
				h.log.Error("room directory watch ended; the directory on this node stops changing")
				return false
			}
			if e == nil {
				if initial {
					initial = false
					h.metrics.copyLoaded(bucketRooms)
					if first {
						close(h.dir.ready)
					} else {
						h.dir.swap(into)
						into = h.dir
					}
				}
				continue
			}
			if !h.dir.fresh(e.Key(), e.Revision()) {
				continue // older than this node's own write of the key
			}
			if e.Operation() != jetstream.KeyValuePut {
				into.remove(e.Key())
				continue
			}
			var rec roomRec
			if err := json.Unmarshal(e.Value(), &rec); err != nil {
				h.log.Warn("unreadable directory entry", "key", e.Key(), "err", err)
				continue
			}
			into.put(rec)
		}
	}
}

// dirReady waits for the mirror's initial values.
func (h *Hub) dirReady(ctx context.Context) error {
	select {
	case <-h.dir.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Rooms lists the directory of a project: every room a device serves, with
// the device's presence, by name then id. A room two devices claim is
// listed once with both in Devices and Conflict set.
func (h *Hub) Rooms(ctx context.Context, project string) ([]hubapi.DirectoryRoom, error) {
	if !relay.ValidID(project) {
		return nil, errInvalid("project must be %s", relay.IDRule)
	}
	if err := h.dirReady(ctx); err != nil {
		return nil, unavailable("read the room directory", err)
	}
	presence := map[string]hubapi.Presence{}
	out := []hubapi.DirectoryRoom{}
	for _, claims := range h.dir.project(project) {
		slices.SortFunc(claims, func(a, b roomRec) int { return strings.Compare(a.Device, b.Device) })
		first := claims[0]
		p, ok := presence[first.Device]
		if !ok {
			var err error
			if p, err = h.Presence(ctx, first.Device); err != nil {
				return nil, err
			}
			presence[first.Device] = p
		}
		r := hubapi.DirectoryRoom{RoomID: first.RoomID, Name: first.Name, Project: first.Project, DeviceID: first.Device,
			Presence: hubapi.RoomPresence{State: p.State, LastSeen: p.LastSeen, App: p.App}}
		if len(claims) > 1 {
			r.Conflict = true
			for _, c := range claims {
				r.Devices = append(r.Devices, c.Device)
			}
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b hubapi.DirectoryRoom) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.RoomID, b.RoomID)
	})
	return out, nil
}

// ResolveRoom returns the device serving room in project. A room no device
// serves is not_found, with the same text whether it does not exist or its
// device does not serve it (the caller learns nothing more); a room two
// devices claim is refused rather than routed at random.
func (h *Hub) ResolveRoom(ctx context.Context, project, room string) (string, *relay.Error) {
	if !relay.ValidID(project) || !relay.ValidID(room) {
		return "", relay.RoomNotFound(clipName(room))
	}
	if err := h.dirReady(ctx); err != nil {
		return "", relay.Errorf(relay.CodeInternal, "the hub's room directory is not loaded yet; retry")
	}
	claims := h.dir.room(project, room)
	switch len(claims) {
	case 0:
		return "", relay.RoomNotFound(room)
	case 1:
		return claims[0].Device, nil
	}
	devs := make([]string, 0, len(claims))
	for _, c := range claims {
		devs = append(devs, c.Device)
	}
	slices.Sort(devs)
	return "", relay.Errorf(relay.CodeNotFound,
		"room %q is served by %d devices (%s); the hub routes a room to exactly one device: its owner should disable the project on all but one (`roomrelay disable PROJECT`)",
		room, len(devs), strings.Join(devs, ", "))
}
