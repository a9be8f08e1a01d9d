package daemon

import (
	"context"
	"encoding/json"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/roomrelay/roomrelay/relay"
)

// directory is the room directory the hub is told of: the rooms of every
// enabled project that the policy lets the device serve, ids and names
// only, at most relay.MaxDirectoryRooms. It also remembers what it
// computed, so announceRooms sends only a change.
func (d *Daemon) directory(ctx context.Context) []relay.RoomEntry {
	out := d.computeDirectory(ctx)
	if out != nil {
		d.dirMu.Lock()
		d.lastDir = out
		d.dirMu.Unlock()
	}
	return out
}

// computeDirectory reads the directory; nil when the store could not be read
// (the hub then keeps what it had).
func (d *Daemon) computeDirectory(ctx context.Context) []relay.RoomEntry {
	p := d.policy.Load()
	out := []relay.RoomEntry{}
	for _, pp := range p.Summary() {
		rooms, err := d.store.ListRooms(ctx, pp.Project)
		if err != nil {
			d.log.Warn("reading rooms for the directory failed", "project", pp.Project, "err", err)
			return nil
		}
		for _, r := range rooms {
			if len(out) >= relay.MaxDirectoryRooms {
				d.log.Warn("more rooms than the directory carries; the rest are not listed on the hub", "max", relay.MaxDirectoryRooms)
				return out
			}
			if p.ServesRoom(pp.Project, r.ID) {
				out = append(out, relay.RoomEntry{Project: pp.Project, RoomID: r.ID, Name: clip(r.Name, relay.MaxRoomNameBytes)})
			}
		}
	}
	return out
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// announceRooms sends a rooms_changed event when the directory differs from
// the one last sent (in hello or an earlier event).
func (d *Daemon) announceRooms(ctx context.Context) {
	now := d.computeDirectory(ctx)
	if now == nil {
		return
	}
	d.dirMu.Lock()
	same := d.lastDir != nil && slices.Equal(now, d.lastDir)
	if !same {
		d.lastDir = now
	}
	d.dirMu.Unlock()
	if same {
		return
	}
	data, _ := json.Marshal(relay.RoomsChanged{Rooms: now})
	if err := d.agent.SendEvent(ctx, relay.Event{Event: relay.EventRoomsChanged, Time: time.Now().UTC(), Data: data}); err != nil {
		d.log.Warn("rooms_changed event not queued", "err", err)
		d.dirMu.Lock()
		d.lastDir = nil // try again at the next change or tick
		d.dirMu.Unlock()
		return
	}
	d.log.Info("room directory changed", "rooms", len(now))
}
