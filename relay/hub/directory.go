package hub

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The room directory: which device serves which room, as the devices report
// it (hello, rooms_changed). A model names a room, never a device; every
// room tool resolves its device here.
//
// One key per (project, room, device) in rr_rooms:
// b64(project) "." b64(room) "." device. Listing a project's rooms, a
// room's devices and a device's rooms are then key filters. A room two
// devices claim has two keys, and ResolveRoom refuses it.

// roomIDRe is the policy's room id syntax (allowlist: 1–128 of A–Z a–z 0–9
// . _ : @ -, starting with a letter or digit).
var roomIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)

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
	want := map[string]roomRec{}
	now := h.cfg.Now().UTC()
	for _, e := range rooms {
		if len(want) >= relay.MaxDirectoryRooms {
			h.log.Warn("device directory over its bound; the rest is ignored", "device", d.ID, "rooms", len(rooms), "max", relay.MaxDirectoryRooms)
			break
		}
		if !d.hasProject(e.Project) || !roomIDRe.MatchString(e.RoomID) {
			continue
		}
		want[roomKey(e.Project, e.RoomID, d.ID)] = roomRec{Project: e.Project, RoomID: e.RoomID,
			Name: clipName(e.Name), Device: d.ID, UpdatedAt: now}
	}
	have, err := h.st.roomKeys(ctx, "*.*."+d.ID)
	if err != nil {
		return err
	}
	var errs []error
	for _, k := range have {
		if _, ok := want[k]; !ok {
			if err := h.st.rooms.Purge(ctx, k); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for k, rec := range want {
		if old, _, err := getJSON[roomRec](ctx, h.st.rooms, k); err == nil && old.Name == rec.Name {
			continue // unchanged: no write
		}
		if _, err := h.st.rooms.Put(ctx, k, mustJSON(rec)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("update directory: %w", err)
	}
	return nil
}

// dropDirectory removes every room of a device (revoked).
func (h *Hub) dropDirectory(ctx context.Context, dev string) error {
	return h.setDirectory(ctx, &deviceRec{ID: dev}, nil)
}

func clipName(s string) string {
	if len(s) <= relay.MaxRoomNameBytes {
		return s
	}
	s = s[:relay.MaxRoomNameBytes]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

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

// Rooms lists the directory of a project: every room a device serves, with
// the device's presence, by name then id. A room two devices claim is
// listed once with both in Devices and Conflict set.
func (h *Hub) Rooms(ctx context.Context, project string) ([]hubapi.DirectoryRoom, error) {
	if !projectRe.MatchString(project) {
		return nil, errInvalid("project must be 1–128 characters of letters, digits, '.', '_', ':', '-'")
	}
	keys, err := h.st.roomKeys(ctx, enc(project)+".*.*")
	if err != nil {
		return nil, unavailable("read the room directory", err)
	}
	byRoom := map[string]*hubapi.DirectoryRoom{}
	presence := map[string]hubapi.Presence{}
	for _, k := range keys {
		rec, _, err := getJSON[roomRec](ctx, h.st.rooms, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // removed while listing
		}
		if err != nil {
			return nil, unavailable("read the room directory", err)
		}
		p, ok := presence[rec.Device]
		if !ok {
			if p, err = h.Presence(ctx, rec.Device); err != nil {
				return nil, err
			}
			presence[rec.Device] = p
		}
		r := byRoom[rec.RoomID]
		if r == nil {
			r = &hubapi.DirectoryRoom{RoomID: rec.RoomID, Name: rec.Name, Project: rec.Project, DeviceID: rec.Device,
				Presence: hubapi.RoomPresence{State: p.State, LastSeen: p.LastSeen}}
			byRoom[rec.RoomID] = r
		} else {
			r.Conflict = true
		}
		r.Devices = append(r.Devices, rec.Device)
	}
	out := make([]hubapi.DirectoryRoom, 0, len(byRoom))
	for _, r := range byRoom {
		if !r.Conflict {
			r.Devices = nil
		} else {
			slices.Sort(r.Devices)
		}
		out = append(out, *r)
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
	if !projectRe.MatchString(project) || !roomIDRe.MatchString(room) {
		return "", relay.RoomNotFound(clipName(room))
	}
	keys, err := h.st.roomKeys(ctx, enc(project)+"."+enc(room)+".*")
	if err != nil {
		h.log.Error("read the room directory", "err", err)
		return "", relay.Errorf(relay.CodeInternal, "the hub could not read its room directory; retry")
	}
	switch len(keys) {
	case 0:
		return "", relay.RoomNotFound(room)
	case 1:
		return keys[0][strings.LastIndexByte(keys[0], '.')+1:], nil
	}
	devs := make([]string, 0, len(keys))
	for _, k := range keys {
		devs = append(devs, k[strings.LastIndexByte(k, '.')+1:])
	}
	slices.Sort(devs)
	return "", relay.Errorf(relay.CodeNotFound,
		"room %q is served by %d devices (%s); the hub routes a room to exactly one device: its owner should disable the project on all but one (`roomrelay disable PROJECT`)",
		room, len(devs), strings.Join(devs, ", "))
}
