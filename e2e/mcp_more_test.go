package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/mcpfront"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestMCPHubRestartMidSession: a connected MCP client keeps working when
// the hub restarts under it (stateless: no session to lose), once the
// device is back.
func TestMCPHubRestartMidSession(t *testing.T) {
	dir, addr := t.TempDir(), freeLoopbackAddr(t)
	h := startHubAt(t, hub.Config{DataDir: dir}, addr)
	dv := enroll(t, h, "proj-a")
	dv.enable(t, "proj-a")
	dv.start(t, h.URL())
	seedRoom(t, dv, "proj-a", "room-1")
	tok := clientToken(t, h, "proj-a", hubapi.ScopeRead)
	cs := mcpSession(t, h, tok.Token, nil)
	eventually(t, "room in the directory", func() bool { return len(listRooms(t, cs)) == 1 })

	h.stop(t)
	h2 := startHubAt(t, hub.Config{DataDir: dir}, addr)
	waitState(t, h2, dv.id, hubapi.StateOnline)
	// The same client session, the same token: both survive the restart.
	eventually(t, "read_room after restart", func() bool {
		return !tool(t, cs, "read_room", map[string]any{"room_id": "room-1"}).IsError
	})
	if r := listRooms(t, cs); len(r) != 1 || r[0].Presence.State != hubapi.StateOnline {
		t.Fatalf("directory after restart: %+v", r)
	}
}

// TestMCPDirectoryFollowsPolicy: disabling a project on the device removes
// its rooms from the directory, enabling it brings them back; a room listed
// by the policy is the only one served.
func TestMCPDirectoryFollowsPolicy(t *testing.T) {
	h := startHub(t, hub.Config{DataDir: t.TempDir()})
	dv := enroll(t, h, "proj-a")
	dv.enable(t, "proj-a")
	dv.start(t, h.URL())
	seedRoom(t, dv, "proj-a", "room-1")
	if _, err := dv.d.Store().CreateRoom(context.Background(), roomsNewRoom("room-2", "proj-a", "Retro")); err != nil {
		t.Fatal(err)
	}
	cs := mcpSession(t, h, clientToken(t, h, "proj-a", hubapi.ScopeRead).Token, nil)
	eventually(t, "two rooms", func() bool { return len(listRooms(t, cs)) == 2 })

	edit := func(fn func(p *allowlist.Policy) error) {
		t.Helper()
		p, err := allowlist.Load(dv.policyPath())
		if err != nil {
			t.Fatal(err)
		}
		if err := fn(p); err != nil {
			t.Fatal(err)
		}
		if err := p.Save(dv.policyPath()); err != nil {
			t.Fatal(err)
		}
	}
	edit(func(p *allowlist.Policy) error { return p.Enable("proj-a", nil, []string{"room-2"}) })
	eventually(t, "only room-2", func() bool {
		r := listRooms(t, cs)
		return len(r) == 1 && r[0].RoomID == "room-2"
	})
	wantCode(t, "a room the policy does not serve", tool(t, cs, "read_room", map[string]any{"room_id": "room-1"}), "not_found")

	edit(func(p *allowlist.Policy) error { return p.Disable("proj-a") })
	eventually(t, "no rooms", func() bool { return len(listRooms(t, cs)) == 0 })
	text := resultText(tool(t, cs, "list_local_rooms", map[string]any{}))
	if !strings.Contains(text, "No local rooms") {
		t.Errorf("empty directory text %q", text)
	}

	edit(func(p *allowlist.Policy) error { return p.Enable("proj-a", nil, nil) })
	eventually(t, "both back", func() bool { return len(listRooms(t, cs)) == 2 })
}

// TestMCPProjectsAndConflicts: a token sees only its project's rooms (another
// project's room reads exactly like a missing one); a room id two devices
// claim is listed as a conflict and refused, not routed at random.
func TestMCPProjectsAndConflicts(t *testing.T) {
	h := startHub(t, hub.Config{DataDir: t.TempDir()})
	a := enroll(t, h, "proj-a")
	a.enable(t, "proj-a")
	a.start(t, h.URL())
	seedRoom(t, a, "proj-a", "room-1")
	b := enroll(t, h, "proj-b")
	b.enable(t, "proj-b")
	b.start(t, h.URL())
	seedRoom(t, b, "proj-b", "room-b")

	ca := mcpSession(t, h, clientToken(t, h, "proj-a", hubapi.ScopeRead).Token, nil)
	cb := mcpSession(t, h, clientToken(t, h, "proj-b", hubapi.ScopeRead).Token, nil)
	eventually(t, "each project its room", func() bool {
		ra, rb := listRooms(t, ca), listRooms(t, cb)
		return len(ra) == 1 && ra[0].RoomID == "room-1" && len(rb) == 1 && rb[0].RoomID == "room-b"
	})
	other := wantCode(t, "another project's room", tool(t, ca, "read_room", map[string]any{"room_id": "room-b"}), "not_found")
	missing := wantCode(t, "a missing room", tool(t, ca, "read_room", map[string]any{"room_id": "room-z"}), "not_found")
	if strings.ReplaceAll(other, "room-b", "X") != strings.ReplaceAll(missing, "room-z", "X") {
		t.Errorf("another project's room reads %q, a missing one %q", other, missing)
	}

	// A second device of proj-a claims room-1 too.
	c := enroll(t, h, "proj-a")
	c.enable(t, "proj-a")
	c.start(t, h.URL())
	seedRoom(t, c, "proj-a", "room-1")
	eventually(t, "the conflict", func() bool {
		r := listRooms(t, ca)
		return len(r) == 1 && r[0].Conflict && len(r[0].Devices) == 2
	})
	text := wantCode(t, "a room two devices claim", tool(t, ca, "read_room", map[string]any{"room_id": "room-1"}), "not_found")
	if !strings.Contains(text, "2 devices") || !strings.Contains(text, a.id) || !strings.Contains(text, c.id) {
		t.Errorf("conflict text %q", text)
	}
	// The second device leaves the project: the room is routable again.
	c.disable(t, "proj-a")
	eventually(t, "conflict resolved", func() bool {
		return !tool(t, ca, "read_room", map[string]any{"room_id": "room-1"}).IsError
	})
}

// TestMCPTokenRateLimit: the hub's per-token limit answers rate_limited with
// the seconds to wait, per token. Every message counts: a session's
// initialize and notifications/initialized take part of the burst of 5.
func TestMCPTokenRateLimit(t *testing.T) {
	h := startHubFront(t, hub.Config{DataDir: t.TempDir()}, "", mcpfront.Config{TokenRate: 1, TokenBurst: 5})
	one := mcpSession(t, h, clientToken(t, h, "proj-a", hubapi.ScopeRead).Token, nil)
	two := mcpSession(t, h, clientToken(t, h, "proj-a", hubapi.ScopeRead).Token, nil)
	for i := range 3 {
		if r := tool(t, one, "list_local_rooms", map[string]any{}); r.IsError {
			t.Fatalf("call %d within the burst: %s", i, resultText(r))
		}
	}
	// The session's own messages took one or two of the burst.
	r := tool(t, one, "list_local_rooms", map[string]any{})
	if !r.IsError {
		r = tool(t, one, "list_local_rooms", map[string]any{})
	}
	text := wantCode(t, "over the burst", r, "rate_limited")
	if !strings.Contains(text, "retry_after_seconds=") {
		t.Errorf("no retry-after in %q", text)
	}
	if r := tool(t, two, "list_local_rooms", map[string]any{}); r.IsError {
		t.Errorf("another token was limited too: %s", resultText(r))
	}
}

func roomsNewRoom(id, project, name string) rooms.NewRoom {
	return rooms.NewRoom{ID: id, ProjectID: project, Name: name}
}

// disable turns a project off in the owner's policy file.
func (dv *device) disable(t testing.TB, project string) {
	t.Helper()
	p, err := allowlist.Load(dv.policyPath())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Disable(project); err != nil {
		t.Fatal(err)
	}
	if err := p.Save(dv.policyPath()); err != nil {
		t.Fatal(err)
	}
}
