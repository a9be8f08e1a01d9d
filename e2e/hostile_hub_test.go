package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
)

// hostileHub speaks the protocol to a real agent but is the attacker: after
// each welcome it sends what script returns for that connection (raw
// frames), and it hands command results back on results.
type hostileHub struct {
	t       *testing.T
	mu      sync.Mutex
	conns   int
	script  func(n int, send func(raw string))
	results chan *relay.Result
}

func (h *hostileHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	up := websocket.Upgrader{Subprotocols: []string{relay.Subprotocol}}
	c, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	if _, _, err := c.ReadMessage(); err != nil { // hello
		return
	}
	h.mu.Lock()
	h.conns++
	n := h.conns
	h.mu.Unlock()
	var wmu sync.Mutex
	send := func(raw string) {
		wmu.Lock()
		defer wmu.Unlock()
		_ = c.WriteMessage(websocket.TextMessage, []byte(raw))
	}
	// A welcome that also claims to set the device's policy.
	send(`{"type":"welcome","session_id":"s` + itoa(n) + `","heartbeat_ms":25000,"server_time":"` + time.Now().UTC().Format(time.RFC3339Nano) +
		`","policy":[{"project":"proj-a","commands":["propose_room_snippet_app","list_room_apps"]}]}`)
	go h.script(n, send)
	for {
		_, data, err := c.ReadMessage()
		if err != nil {
			return
		}
		if f, err := relay.Decode(data, 0); err == nil {
			if res, ok := f.(*relay.Result); ok {
				h.results <- res
			}
		}
	}
}

// TestNetworkCannotWidenPolicy: a hub that is the attacker cannot widen
// what the device allows. It sends the real agent a welcome carrying a
// policy, a policy frame, a hello of its own and a policy_changed event
// (each on its own connection: the agent drops a connection on a frame it
// does not accept), then commands that only a wider policy would run: a
// command not allowed, a room outside the owner's list, another project,
// and args naming another project's room. Only the owner's allowed read
// answers; the policy file and the agent's decisions stay as they were.
func TestNetworkCannotWidenPolicy(t *testing.T) {
	dv := &device{id: "dev-hostile", token: "rrd_hostile", home: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(dv.home, "config"), 0o700); err != nil {
		t.Fatal(err)
	}
	pol := "version 1\nproject proj-a\n  enabled yes\n  commands read_room\n  rooms room-1\n"
	if err := os.WriteFile(dv.policyPath(), []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(dv.policyPath())

	hh := &hostileHub{t: t, results: make(chan *relay.Result, 16)}
	attack := make(chan func(send func(string)), 8)
	hh.script = func(n int, send func(string)) {
		if f, ok := <-attack; ok {
			f(send)
		}
	}
	srv := testutil.Serve(t, "127.0.0.1:0", hh)
	dv.start(t, srv.URL())
	ctx := context.Background()
	s := dv.d.Store()
	for _, p := range []string{"proj-a", "proj-b"} {
		if _, err := s.CreateProject(ctx, p, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []rooms.NewRoom{{ID: "room-1", ProjectID: "proj-a", Name: "Listed"}, {ID: "room-2", ProjectID: "proj-a", Name: "Unlisted"},
		{ID: "room-b", ProjectID: "proj-b", Name: "Other project"}} {
		if _, err := s.CreateRoom(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	conns := func() int { hh.mu.Lock(); defer hh.mu.Unlock(); return hh.conns }

	// Frames that try to set the policy, one connection each: the k-th is
	// taken by connection k+1, which the agent drops, so connection k+2
	// follows.
	for k, raw := range []string{
		`{"type":"policy","policy":[{"project":"proj-a","commands":["propose_room_snippet_app"]}]}`,
		`{"type":"hello","protocol":1,"agent_version":"hub","device_id":"dev-hostile","os":"linux","policy":[{"project":"proj-a","commands":["list_room_apps"]}],"rooms":[]}`,
		`{"type":"event","event":"policy_changed","time":"2026-01-01T00:00:00Z","data":{"policy":[{"project":"proj-b","commands":["read_room"]}]}}`,
	} {
		attack <- func(send func(string)) { send(raw) }
		eventually(t, "the agent drops the connection and comes back", func() bool { return conns() >= k+2 })
	}

	// Commands only a wider policy would run; the first is the control.
	cmd := func(id, project, name, args string) string {
		c := relay.Command{ID: id, ProjectID: project, Name: name, Args: json.RawMessage(args), Deadline: time.Now().Add(10 * time.Second).UTC()}
		b, _ := relay.Encode(&c)
		return string(b)
	}
	cases := []struct {
		id, project, name, args string
		want                    relay.Code
	}{
		{"ok", "proj-a", relay.CmdReadRoom, `{"room_id":"room-1"}`, ""},
		{"not-allowed", "proj-a", relay.CmdListRoomApps, `{"room_id":"room-1"}`, relay.CodeCommandNotAllowed},
		{"propose", "proj-a", relay.CmdProposeRoomSnippetApp, `{"room_id":"room-1","name":"x","files":{"src/App.tsx":"export default () => null"},"idempotency_key":"key-00000001"}`, relay.CodeCommandNotAllowed},
		{"unlisted-room", "proj-a", relay.CmdReadRoom, `{"room_id":"room-2"}`, relay.CodeNotFound},
		{"other-project", "proj-b", relay.CmdReadRoom, `{"room_id":"room-b"}`, relay.CodeProjectNotEnabled},
		{"other-projects-room", "proj-a", relay.CmdReadRoom, `{"room_id":"room-b"}`, relay.CodeNotFound},
	}
	attack <- func(send func(string)) {
		for _, c := range cases {
			send(cmd(c.id, c.project, c.name, c.args))
		}
	}
	got := map[string]*relay.Result{}
	for range cases {
		select {
		case r := <-hh.results:
			got[r.ID] = r
		case <-time.After(30 * time.Second):
			t.Fatalf("results so far: %v", got)
		}
	}
	for _, c := range cases {
		r := got[c.id]
		switch {
		case r == nil:
			t.Errorf("%s: no result", c.id)
		case c.want == "" && !r.OK:
			t.Errorf("%s (the allowed read) failed: %+v", c.id, r.Error)
		case c.want != "" && (r.OK || r.Error.Code != c.want):
			t.Errorf("%s: %+v %s, want %s", c.id, r.Error, r.Result, c.want)
		}
	}
	close(attack)
	after, _ := os.ReadFile(dv.policyPath())
	if !bytes.Equal(before, after) {
		t.Fatalf("policy file changed:\n%s\n---\n%s", before, after)
	}
	p := dv.d.Policy()
	for _, d := range []struct{ project, command, room string }{
		{"proj-a", relay.CmdListRoomApps, "room-1"}, {"proj-a", relay.CmdProposeRoomSnippetApp, "room-1"},
		{"proj-a", relay.CmdReadRoom, "room-2"}, {"proj-b", relay.CmdReadRoom, "room-b"},
	} {
		if err := p.Decide(d.project, d.command, json.RawMessage(`{"room_id":"`+d.room+`"}`)); err == nil {
			t.Errorf("%s %s in %s became allowed", d.project, d.command, d.room)
		}
	}
	if ps := p.Summary(); len(ps) != 1 || len(ps[0].Commands) != 1 {
		t.Errorf("policy summary %+v", ps)
	}
}
