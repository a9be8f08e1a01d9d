package daemon

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/relay"
)

// listRooms lists a project's rooms from the selected provider's directory:
// the store's own rooms, or the desktop app's as it last sent them
// (persisted, so a closed app's rooms stay listed and take proposals).
func (d *Daemon) listRooms(ctx context.Context, project string, app bool) ([]rooms.RoomSummary, error) {
	if !app {
		return d.store.ListRooms(ctx, project)
	}
	prs, err := d.store.ListProviderRooms(ctx, project)
	out := make([]rooms.RoomSummary, len(prs))
	for i, r := range prs {
		out[i] = rooms.RoomSummary{ID: r.ID, Name: r.Name, Project: r.Project, Kind: "local"}
	}
	return out, err
}

// directory is the room directory the hub is told of: the rooms of every
// enabled project that the policy lets the device serve, ids and names
// only, at most relay.MaxDirectoryRooms. The agent calls it for each hello.
//
// A hello does not count as "sent" for announceRooms: rooms_changed events
// queued before the connection are delivered after the hello, so the hub
// may end on an older list than the hello's. Forgetting what was sent makes
// the next change check send the directory again, which the hub then ends
// on. dirMu orders this against announceRooms' compute-and-queue.
func (d *Daemon) directory(ctx context.Context) []relay.RoomEntry {
	d.dirMu.Lock()
	defer d.dirMu.Unlock()
	out := d.computeDirectory(ctx)
	d.lastDir = nil
	return out
}

// computeDirectory reads the directory; nil when the store could not be read
// (the hub then keeps what it had).
func (d *Daemon) computeDirectory(ctx context.Context) []relay.RoomEntry {
	p := d.policy.Load()
	out := []relay.RoomEntry{}
	app := p.Provider() == allowlist.ProviderApp
	for _, pp := range p.Summary() {
		rooms, err := d.listRooms(ctx, pp.Project, app)
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
				out = append(out, relay.RoomEntry{Project: pp.Project, RoomID: r.ID, Name: relay.CutUTF8(r.Name, relay.MaxRoomNameBytes)})
			}
		}
	}
	return out
}

// announceRooms sends a rooms_changed event when the directory differs from
// the one last queued. Computing and queueing happen under one lock, so
// events are queued in the order their lists were read.
func (d *Daemon) announceRooms(ctx context.Context) {
	d.dirMu.Lock()
	defer d.dirMu.Unlock()
	now := d.computeDirectory(ctx)
	if now == nil || (d.lastDir != nil && slices.Equal(now, d.lastDir)) {
		return
	}
	data, _ := json.Marshal(relay.RoomsChanged{Rooms: now})
	if err := d.agent.SendEvent(ctx, relay.Event{Event: relay.EventRoomsChanged, Time: time.Now().UTC(), Data: data}); err != nil {
		d.log.Warn("rooms_changed event not queued", "err", err)
		d.lastDir = nil // try again at the next change or tick
		return
	}
	d.lastDir = now
	d.log.Info("room directory changed", "rooms", len(now))
}
