package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestDirectoryFromAHostileDevice: a device can place rooms only in the
// projects the hub enrolled it for, well-formed and bounded; rooms_changed
// replaces its directory; an agent without a directory leaves it alone;
// revoking the device removes its rooms.
func TestDirectoryFromAHostileDevice(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	ctx := context.Background()
	dev, tok := th.enroll("p1")

	hello := helloFor(dev)
	hello.Rooms = []relay.RoomEntry{
		{Project: "p1", RoomID: "room-1", Name: "Standup"},
		{Project: "p2", RoomID: "room-x", Name: "not enrolled for p2"},
		{Project: "p1", RoomID: "../bad id", Name: "malformed"},
		{Project: "p1", RoomID: "room-long", Name: strings.Repeat("é", 300)},
	}
	for i := range relay.MaxDirectoryRooms + 10 {
		hello.Rooms = append(hello.Rooms, relay.RoomEntry{Project: "p1", RoomID: "bulk-" + strconv.Itoa(i), Name: "b"})
	}
	conn, _, err := dialRaw(th.wsURL(), tok, []string{relay.Subprotocol})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.WriteMessage(websocket.TextMessage, mustEncode(t, hello)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := conn.ReadMessage(); err != nil { // welcome
		t.Fatal(err)
	}
	th.waitState(dev, hubapi.StateOnline)

	// Each node reads its mirror of the bucket: it follows the writes.
	var p1 []hubapi.DirectoryRoom
	waitFor(t, "the directory on this node", func() bool {
		var err error
		p1, err = th.Rooms(ctx, "p1")
		return err == nil && len(p1) >= relay.MaxDirectoryRooms
	})
	if len(p1) != relay.MaxDirectoryRooms {
		t.Errorf("p1 has %d rooms, want the bound %d", len(p1), relay.MaxDirectoryRooms)
	}
	for _, r := range p1 {
		if r.RoomID == "../bad id" || len(r.Name) > relay.MaxRoomNameBytes {
			t.Errorf("kept %q (name %d bytes)", r.RoomID, len(r.Name))
		}
	}
	if p2, err := th.Rooms(ctx, "p2"); err != nil || len(p2) != 0 {
		t.Fatalf("p2 (not enrolled): %+v %v", p2, err)
	}
	if d, err := th.ResolveRoom(ctx, "p1", "room-1"); err != nil || d != dev {
		t.Fatalf("resolve room-1: %q %v", d, err)
	}

	// rooms_changed replaces the whole directory.
	data, _ := json.Marshal(relay.RoomsChanged{Rooms: []relay.RoomEntry{{Project: "p1", RoomID: "room-2", Name: "Retro"}}})
	if err := conn.WriteMessage(websocket.TextMessage, mustEncode(t, &relay.Event{Event: relay.EventRoomsChanged, Time: time.Now(), Data: data})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "directory replaced", func() bool {
		rs, err := th.Rooms(ctx, "p1")
		return err == nil && len(rs) == 1 && rs[0].RoomID == "room-2" && rs[0].Name == "Retro"
	})
	if _, e := th.ResolveRoom(ctx, "p1", "room-1"); e == nil || e.Code != relay.CodeNotFound {
		t.Fatalf("room-1 after replace: %v", e)
	}

	// An older agent (no rooms field) reconnecting leaves the directory.
	conn.Close()
	a := dialAgent(t, th.wsURL(), tok, dev) // helloFor sends no rooms
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)
	// The bucket itself (written before presence goes online), not the
	// mirror that follows it.
	if keys, err := th.st.roomKeys(ctx, "*.*."+dev); err != nil || len(keys) != 1 {
		t.Fatalf("an agent without a directory changed it: %v %v", keys, err)
	}

	if _, err := th.Revoke(ctx, dev); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a revoked device's rooms removed", func() bool {
		rs, err := th.Rooms(ctx, "p1")
		return err == nil && len(rs) == 0
	})
}

// TestCommandRefusesOversizedIDs: a room_id or instance_id past the id
// bound is invalid_args at the hub; the device never sees it (so it never
// reaches its audit log), and an unknown command name is refused too.
func TestCommandRefusesOversizedIDs(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	dev, tok := th.enroll("p1")
	a := dialAgent(t, th.wsURL(), tok, dev)
	seen := make(chan string, 10)
	a.serve(func(c *relay.Command) *relay.Result {
		seen <- c.Name
		return &relay.Result{ID: c.ID, OK: true, Result: json.RawMessage(`{}`)}
	})
	th.waitState(dev, hubapi.StateOnline)
	big := strings.Repeat("r", 100<<10)
	for _, args := range []string{`{"room_id":"` + big + `"}`, `{"room_id":"r","instance_id":"` + strings.Repeat("i", 129) + `"}`} {
		res, status := th.command(dev, hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoomAppStatus, Args: json.RawMessage(args)})
		if status != 400 || res.Error == nil || res.Error.Code != relay.CodeInvalidArgs || !strings.Contains(res.Error.Message, "maxLength 128") {
			t.Errorf("oversized id: %d %+v", status, res.Error)
		}
	}
	if res, _ := th.command(dev, hubapi.CommandRequest{ProjectID: "p1", Name: "delete_room"}); res.Error == nil || res.Error.Code != relay.CodeCommandNotAllowed {
		t.Errorf("unknown command: %+v", res.Error)
	}
	// 128 bytes is fine and reaches the device.
	if res, _ := th.command(dev, hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoom, Args: json.RawMessage(`{"room_id":"` + strings.Repeat("r", 128) + `"}`)}); !res.OK {
		t.Fatalf("a 128-byte id: %+v", res.Error)
	}
	select {
	case name := <-seen:
		if name != relay.CmdReadRoom || len(seen) != 0 {
			t.Errorf("the device saw %s and %d more", name, len(seen))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the valid command never reached the device")
	}
}

// TestIDsAndTextFollowRelaysRules: the hub applies relay.ValidID to
// project, room and command ids (its own copy of the pattern refused '@',
// which relay.ValidID, the device's policy and its room store accept) and
// relay.CleanLine to what a device says about itself (its old cleaner kept
// bidi controls, so an OS could read "exe.png" reversed).
func TestIDsAndTextFollowRelaysRules(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	ctx := context.Background()
	const project = "team@corp.example"
	dev, tok := th.enroll(project) // Pair refused the project before
	hello := helloFor(dev)
	hello.OS = "linux\u202egnp.exe"
	hello.AgentVersion = "1.0\u2066-rc\x1b[1m"
	hello.Policy = []relay.ProjectPolicy{{Project: project, Commands: []string{relay.CmdReadRoom}}}
	hello.Rooms = []relay.RoomEntry{{Project: project, RoomID: "room@1", Name: "Standup"}}
	a := dialAgentHello(t, th.wsURL(), tok, hello)
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)

	waitFor(t, "the room in the directory", func() bool {
		rs, err := th.Rooms(ctx, project)
		return err == nil && len(rs) == 1 && rs[0].RoomID == "room@1"
	})
	if d, e := th.ResolveRoom(ctx, project, "room@1"); e != nil || d != dev {
		t.Fatalf("resolve room@1 in %s: %q %v", project, d, e)
	}
	args := json.RawMessage(`{"room_id":"room@1"}`)
	res, status := th.command(dev, hubapi.CommandRequest{ID: "cmd@1", ProjectID: project, Name: relay.CmdReadRoom, Args: args})
	if status != http.StatusOK || !res.OK || string(res.Result) != string(args) {
		t.Fatalf("command cmd@1 to %s: status %d %+v", project, status, res.Error)
	}
	if _, err := th.Rooms(ctx, "bad id"); err == nil || !strings.Contains(err.Error(), relay.IDRule) {
		t.Errorf("a malformed project: %v, want the rule %q named", err, relay.IDRule)
	}

	rec := th.deviceRecord(dev)
	if rec.OS != "linuxgnp.exe" || rec.AgentVersion != "1.0-rc[1m" {
		t.Errorf("device record keeps OS %q and agent version %q, want the hidden runes dropped", rec.OS, rec.AgentVersion)
	}
}

// TestDirectoryMirrorClaims: the mirror's small indexes keep every claim
// of a room through the change from a slice to a map (past
// maxListedClaims devices), a rename replaces a claim, and removals leave
// nothing behind.
func TestDirectoryMirrorClaims(t *testing.T) {
	t.Parallel()
	m := newMirror()
	const n = maxListedClaims + 3
	dev := func(i int) string { return fmt.Sprintf("d-%02d", i) }
	for i := range n {
		m.put(roomRec{Project: "p1", RoomID: "shared", Name: "Shared", Device: dev(i)})
		m.put(roomRec{Project: "p1", RoomID: "own-" + dev(i), Name: "Own", Device: dev(i)})
	}
	m.put(roomRec{Project: "p1", RoomID: "shared", Name: "Renamed", Device: dev(n - 1)})
	claims := m.room("p1", "shared")
	if len(claims) != n {
		t.Fatalf("%d claims of the shared room, want %d", len(claims), n)
	}
	for _, c := range claims {
		if want := map[bool]string{true: "Renamed", false: "Shared"}[c.Device == dev(n-1)]; c.Name != want {
			t.Errorf("claim of %s named %q, want %q", c.Device, c.Name, want)
		}
	}
	if got := len(m.project("p1")); got != n+1 {
		t.Fatalf("project lists %d rooms, want %d", got, n+1)
	}
	if own := m.ofDevice(dev(0)); len(own) != 2 || own[roomKey("p1", "shared", dev(0))] != "Shared" {
		t.Fatalf("device 0's entries: %v", own)
	}
	if !m.sameAs(dev(0), map[string]roomRec{
		roomKey("p1", "shared", dev(0)):      {Name: "Shared"},
		roomKey("p1", "own-"+dev(0), dev(0)): {Name: "Own"},
	}) {
		t.Fatal("sameAs refused the device's own entries")
	}
	for i := range n {
		m.remove(roomKey("p1", "shared", dev(i)))
		m.remove(roomKey("p1", "own-"+dev(i), dev(i)))
	}
	if len(m.rooms) != 0 || len(m.devs) != 0 || m.room("p1", "shared") != nil {
		t.Fatalf("left after every removal: rooms %v devs %v", m.rooms, m.devs)
	}
}

// BenchmarkDirectoryMirrorMemory reports what the room directory's copy
// holds per device with one room (decoded as the watch decodes it), the
// memory every node spends per enrolled device, connected or not:
//
//	go test -run '^$' -bench DirectoryMirrorMemory -benchtime 1x ./relay/hub
func BenchmarkDirectoryMirrorMemory(b *testing.B) {
	const n = 10_000
	now := time.Now().UTC()
	var perDevice float64
	for range b.N {
		m := newMirror()
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.HeapAlloc
		for i := range n {
			raw := mustJSON(roomRec{Project: "p1", RoomID: fmt.Sprintf("room-%d", i), Name: fmt.Sprintf("Room %d", i),
				Device: fmt.Sprintf("dev-%016x", i), UpdatedAt: now})
			var rec roomRec
			if err := json.Unmarshal(raw, &rec); err != nil {
				b.Fatal(err)
			}
			m.put(rec)
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		perDevice = float64(ms.HeapAlloc-before) / n
		runtime.KeepAlive(m)
	}
	b.ReportMetric(perDevice, "B/device")
}
