package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestErrorCodesThroughRelay reaches each policy error code through the real
// hub and agent, and checks the hub returns it unchanged.
func TestErrorCodesThroughRelay(t *testing.T) {
	h := startHub(t, hub.Config{DataDir: t.TempDir()})
	dv := enroll(t, h, "proj-a")
	dv.enrollAlso(t, h, "proj-b") // a second project the owner never enables
	dv.enable(t, "proj-a", relay.CmdReadRoom, relay.CmdListRoomApps)
	dv.start(t, h.URL())
	seedRoom(t, dv, "proj-a", "room-1")
	waitState(t, h, dv.id, hubapi.StateOnline)

	room := map[string]any{"room_id": "room-1"}
	cases := []struct {
		name, project, command string
		args                   any
		code                   relay.Code
	}{
		{"project not enabled", "proj-b", relay.CmdReadRoom, room, relay.CodeProjectNotEnabled},
		{"project not enrolled", "proj-zzz", relay.CmdReadRoom, room, relay.CodeNotEnrolled},
		{"command not allowed", "proj-a", relay.CmdReadRoomAppStatus, map[string]any{"room_id": "room-1", "instance_id": "x"}, relay.CodeCommandNotAllowed},
		{"unknown command", "proj-a", "delete_room", room, relay.CodeCommandNotAllowed},
		{"missing room", "proj-a", relay.CmdReadRoom, map[string]any{"room_id": "room-404"}, relay.CodeNotFound},
		{"limit over 50", "proj-a", relay.CmdListRoomApps, map[string]any{"room_id": "room-1", "limit": 51}, relay.CodeInvalidArgs},
		{"extra field", "proj-a", relay.CmdReadRoom, map[string]any{"room_id": "room-1", "visibility": "public"}, relay.CodeInvalidArgs},
	}
	for _, tc := range cases {
		res, status := call(t, h, dv.id, tc.project, tc.command, tc.args)
		if res.OK || res.Error.Code != tc.code {
			t.Errorf("%s: got %+v, want %s", tc.name, res.Error, tc.code)
			continue
		}
		if status != hub.StatusFor(res) {
			t.Errorf("%s: HTTP %d, want %d", tc.name, status, hub.StatusFor(res))
		}
	}

	// Rate limit: the default is 120/min with a burst of 30 for reads; a
	// burst of 40 must be cut.
	limited := 0
	for range 40 {
		res, _ := call(t, h, dv.id, "proj-a", relay.CmdReadRoom, room)
		if !res.OK && res.Error.Code == relay.CodeRateLimited {
			limited++
		}
	}
	if limited == 0 {
		t.Fatal("40 reads in a burst were never rate_limited")
	}

	// Every command that reached the agent is in the audit log, and the log
	// verifies.
	entries, err := dv.d.Audit().Query(audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	// not_enrolled and the unknown command are refused by the hub: they
	// never reach the device.
	if len(entries) < len(cases)-2+40 {
		t.Fatalf("audit has %d entries", len(entries))
	}
	denied := 0
	for _, e := range entries {
		if e.Decision == audit.Denied {
			denied++
		}
	}
	if denied < len(cases)-2 {
		t.Fatalf("audit shows %d denials, want at least %d", denied, len(cases)-2)
	}
	if rep, err := dv.d.Audit().Verify(); err != nil || !rep.OK() {
		t.Fatalf("audit verify: %+v %v", rep.Problems, err)
	}
}

// TestPolicyHotReload: the owner enables a command while the agent is
// connected; it is served without restart and the hub learns the new
// policy summary.
func TestPolicyHotReload(t *testing.T) {
	h := startHub(t, hub.Config{DataDir: t.TempDir()})
	dv := enroll(t, h, "proj-a")
	dv.enable(t, "proj-a", relay.CmdReadRoom)
	dv.start(t, h.URL())
	seedRoom(t, dv, "proj-a", "room-1")
	waitState(t, h, dv.id, hubapi.StateOnline)

	args := map[string]any{"room_id": "room-1"}
	if res, _ := call(t, h, dv.id, "proj-a", relay.CmdListRoomApps, args); res.OK || res.Error.Code != relay.CodeCommandNotAllowed {
		t.Fatalf("before enable: %+v", res)
	}
	dv.enable(t, "proj-a", relay.CmdReadRoom, relay.CmdListRoomApps)
	eventually(t, "list_room_apps allowed", func() bool {
		res, _ := call(t, h, dv.id, "proj-a", relay.CmdListRoomApps, args)
		return res.OK
	})
	eventually(t, "hub sees the new policy", func() bool {
		d := mustDevice(t, h, dv.id)
		return len(d.Policy) == 1 && len(d.Policy[0].Commands) == 2
	})
	startSession := mustDevice(t, h, dv.id).Presence.Session
	if dv.d.Agent().Status().Reconnects != 0 || startSession == "" {
		t.Fatal("the reload reconnected the agent")
	}
}

// TestRefusalsCountAgainstTheRate: refused commands take from the rate
// limit too, so a caller cannot fill the audit log with refusals faster than
// with allowed commands; commands of a project the device does not serve
// share one bucket whose refusal names no project.
func TestRefusalsCountAgainstTheRate(t *testing.T) {
	h := startHub(t, hub.Config{DataDir: t.TempDir()})
	dv := enroll(t, h, "proj-a")
	dv.enrollAlso(t, h, "proj-b")
	dv.enable(t, "proj-a") // reads only: proposals are refused
	dv.start(t, h.URL())
	seedRoom(t, dv, "proj-a", "room-1")
	waitState(t, h, dv.id, hubapi.StateOnline)
	files := map[string]string{"src/App.tsx": "export default () => null"}
	propose := map[string]any{"room_id": "room-1", "name": "x", "files": files, "idempotency_key": "key-00000001"}
	for _, tc := range []struct {
		project, command string
		args             any
		refusal          relay.Code
	}{
		{"proj-a", relay.CmdProposeRoomSnippetApp, propose, relay.CodeCommandNotAllowed},
		{"proj-b", relay.CmdReadRoom, map[string]any{"room_id": "room-1"}, relay.CodeProjectNotEnabled},
	} {
		counts := map[relay.Code]int{}
		for range 45 {
			res, _ := call(t, h, dv.id, tc.project, tc.command, tc.args)
			if res.OK {
				t.Fatalf("%s %s succeeded", tc.project, tc.command)
			}
			counts[res.Error.Code]++
			if res.Error.Code == relay.CodeRateLimited && strings.Contains(res.Error.Message, "proj-b") {
				t.Errorf("the refusal of a project not served names it: %s", res.Error.Message)
			}
		}
		if counts[tc.refusal] == 0 || counts[relay.CodeRateLimited] == 0 || counts[tc.refusal]+counts[relay.CodeRateLimited] != 45 {
			t.Errorf("%s %s: %v, want %s then rate_limited past the burst", tc.project, tc.command, counts, tc.refusal)
		}
	}
	// Reads of the served project have their own bucket: still answered.
	if res, _ := call(t, h, dv.id, "proj-a", relay.CmdReadRoom, map[string]any{"room_id": "room-1"}); !res.OK {
		t.Fatalf("a read after the refusals: %+v", res.Error)
	}
}

// enrollAlso enrolls the device for one more project with its own token.
func (dv *device) enrollAlso(t testing.TB, h *runningHub, project string) {
	t.Helper()
	pc, err := h.client.Pair(context.Background(), project, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hubclient.New(h.URL(), "").Enroll(context.Background(), pc.Code, "e2e-laptop", "linux", dv.token); err != nil {
		t.Fatal(err)
	}
}
