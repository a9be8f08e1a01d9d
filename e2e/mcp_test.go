package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestMCPUnauthorized: /mcp without a valid client token is 401 with the
// RFC 9728 pointer, and that URL serves the metadata.
func TestMCPUnauthorized(t *testing.T) {
	h := startHub(t, hub.Config{DataDir: t.TempDir()})
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_room","arguments":{"room_id":"r"}}}`
	for _, tok := range []string{"", "rrc_wrong", "rra_e2e-admin"} {
		req, _ := http.NewRequest(http.MethodPost, h.URL()+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := `Bearer resource_metadata="` + h.URL() + `/.well-known/oauth-protected-resource/mcp"`
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), want) {
			t.Errorf("token %q: %d %q, want 401 %s", tok, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), want)
		}
	}
	resp, err := http.Get(h.URL() + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var meta struct {
		Resource string   `json:"resource"`
		Scopes   []string `json:"scopes_supported"`
		Bearer   []string `json:"bearer_methods_supported"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &meta); err != nil || meta.Resource != h.URL()+"/mcp" ||
		!slices.Equal(meta.Scopes, []string{"rooms:read", "rooms:write"}) || !slices.Equal(meta.Bearer, []string{"header"}) {
		t.Fatalf("metadata %d %s", resp.StatusCode, b)
	}
	// A revoked token stops at once.
	tok := clientToken(t, h, "proj-a", hubapi.ScopeRead)
	mcpSession(t, h, tok.Token, nil)
	if _, err := h.client.RevokeClientToken(context.Background(), tok.ID); err != nil {
		t.Fatal(err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "x", Version: "1"}, nil)
	_, err = c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: h.URL() + "/mcp",
		HTTPClient: &http.Client{Transport: hubclient.Bearer{Token: tok.Token}}}, nil)
	if err == nil {
		t.Fatal("a revoked token connected")
	}
}

// TestMCPFlow is the whole user flow through the go-sdk client, on the
// embedded and on an external NATS: the directory, reads, a proposal and its
// retries, scope refusal, wait_for_review with progress while the owner
// approves, the app in the launcher, a smoke-run request, and the errors.
func TestMCPFlow(t *testing.T) {
	for _, mode := range []string{"embedded", "external"} {
		t.Run(mode, func(t *testing.T) {
			cfg := hub.Config{DataDir: t.TempDir()}
			if mode == "external" {
				cfg.NATSURL = externalNATS(t)
			}
			mcpFlow(t, startHub(t, cfg))
		})
	}
}

func mcpFlow(t *testing.T, h *runningHub) {
	ctx := context.Background()
	dv := enroll(t, h, "proj-a")
	dv.enableFast(t, "proj-a")
	dv.start(t, h.URL())
	seedRoom(t, dv, "proj-a", "room-1") // after start: the directory follows the store
	waitState(t, h, dv.id, hubapi.StateOnline)

	write := clientToken(t, h, "proj-a", hubapi.ScopeWrite)
	read := clientToken(t, h, "proj-a", hubapi.ScopeRead)
	var progress atomic.Int64
	cs := mcpSession(t, h, write.Token, &progress)
	rs := mcpSession(t, h, read.Token, nil)

	// tools/list: the eight tools, with the seed's hints.
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
		switch tl.Name {
		case relay.CmdReadRoom, relay.CmdListRoomApps, relay.CmdReadRoomAppStatus:
			if !tl.Annotations.ReadOnlyHint {
				t.Errorf("%s: readOnlyHint false", tl.Name)
			}
		case relay.CmdProposeRoomSnippetApp, relay.CmdProposeRoomRepoApp:
			if tl.Annotations.DestructiveHint == nil || !*tl.Annotations.DestructiveHint || tl.Annotations.ReadOnlyHint {
				t.Errorf("%s: not destructive", tl.Name)
			}
		}
		if tl.OutputSchema == nil { // #28: every tool publishes its result's shape
			t.Errorf("%s declares no outputSchema", tl.Name)
		}
	}
	slices.Sort(names)
	want := []string{"list_local_rooms", "list_room_apps", "propose_room_repo_app", "propose_room_snippet_app",
		"read_room", "read_room_app_status", "smoke_run_room_app", "wait_for_review"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	// The seed's inputSchema, exactly (less $schema, title, description).
	for _, tl := range lt.Tools {
		if tl.Name != relay.CmdProposeRoomSnippetApp {
			continue
		}
		b, _ := json.Marshal(tl.InputSchema)
		const seed = `{"additionalProperties":false,"properties":{"files":{"additionalProperties":{"type":"string"},"type":"object"},"idempotency_key":{"maxLength":128,"minLength":8,"type":"string"},"name":{"maxLength":200,"type":"string"},"room_id":{"type":"string"}},"required":["room_id","name","files","idempotency_key"],"type":"object"}`
		if string(b) != seed {
			t.Errorf("propose_room_snippet_app inputSchema\n%s\nwant\n%s", b, seed)
		}
	}

	// The directory, once the agent reported the room it serves.
	var dir []directoryRoom
	eventually(t, "room-1 in the directory", func() bool {
		dir = listRooms(t, rs)
		return len(dir) == 1
	})
	if r := dir[0]; r.RoomID != "room-1" || r.Name != "Standup" || r.DeviceID != dv.id || r.Presence.State != hubapi.StateOnline || r.Conflict {
		t.Fatalf("directory %+v", r)
	}

	// Reads.
	room := wantOK[rooms.RoomSummary](t, "read_room", tool(t, rs, "read_room", map[string]any{"room_id": "room-1"}))
	if room.ID != "room-1" || room.AppCount != 1 || room.Kind != "local" {
		t.Fatalf("read_room %+v", room)
	}
	wantCode(t, "missing room", tool(t, rs, "read_room", map[string]any{"room_id": "room-404"}), "not_found")
	wantCode(t, "unsafe room id", tool(t, rs, "read_room", map[string]any{"room_id": strings.Repeat("x", 1<<16)}), "not_found")
	text := wantCode(t, "extra field", tool(t, rs, "read_room", map[string]any{"room_id": "room-1", "visibility": "public"}), "invalid_args")
	if !strings.Contains(text, "visibility") {
		t.Errorf("invalid_args does not name the field: %q", text)
	}
	wantCode(t, "limit 51", tool(t, rs, "list_room_apps", map[string]any{"room_id": "room-1", "limit": 51}), "invalid_args")

	// Propose the standup timer: the seed's validation cases first.
	files := standupTimer(t)
	key := relay.SnippetKey("room-1", "Standup timer", files)
	args := map[string]any{"room_id": "room-1", "name": "Standup timer", "files": files, "idempotency_key": key}
	for _, c := range []struct {
		what string
		args map[string]any
		in   string
	}{
		{"no App.tsx", map[string]any{"room_id": "room-1", "name": "x", "files": map[string]string{"src/styles.css": "a{}"}, "idempotency_key": "key-0001"}, "src/App.tsx"},
		{"absolute path", map[string]any{"room_id": "room-1", "name": "x", "files": map[string]string{"src/App.tsx": "x", "/etc/hosts": "x"}, "idempotency_key": "key-0002"}, "/etc/hosts"},
		{"name 201", map[string]any{"room_id": "room-1", "name": strings.Repeat("n", 201), "files": files, "idempotency_key": "key-0003"}, "maxLength"},
		{"key 7", map[string]any{"room_id": "room-1", "name": "x", "files": files, "idempotency_key": "abcdefg"}, "minLength"},
	} {
		text := wantCode(t, c.what, tool(t, cs, "propose_room_snippet_app", c.args), "invalid_args")
		if !strings.Contains(text, c.in) {
			t.Errorf("%s: %q does not name %q", c.what, text, c.in)
		}
	}
	type proposal struct {
		ProposalID string `json:"proposal_id"`
		State      string `json:"state"`
		Duplicate  bool   `json:"duplicate"`
	}
	first := wantOK[proposal](t, "propose", tool(t, cs, "propose_room_snippet_app", args))
	if first.State != "pending_review" || first.Duplicate {
		t.Fatalf("propose %+v", first)
	}
	if p := wantOK[proposal](t, "retry", tool(t, cs, "propose_room_snippet_app", args)); !p.Duplicate || p.ProposalID != first.ProposalID {
		t.Fatalf("retry with the same key: %+v", p)
	}
	fresh := map[string]any{"room_id": "room-1", "name": "Standup timer", "files": files, "idempotency_key": "random-key-0123456789"}
	if p := wantOK[proposal](t, "retry, new key", tool(t, cs, "propose_room_snippet_app", fresh)); !p.Duplicate || p.ProposalID != first.ProposalID {
		t.Fatalf("retry with a fresh key: %+v (content dedupe)", p)
	}
	other := map[string]string{"src/App.tsx": files["src/App.tsx"] + "\n// changed\n", "src/styles.css": files["src/styles.css"]}
	wantCode(t, "same key, other content", tool(t, cs, "propose_room_snippet_app",
		map[string]any{"room_id": "room-1", "name": "Standup timer", "files": other, "idempotency_key": key}), "idempotency_conflict")
	text = wantCode(t, "read token proposes", tool(t, rs, "propose_room_snippet_app", fresh), "command_not_allowed")
	if !strings.Contains(text, "rooms:write") {
		t.Errorf("scope refusal does not name rooms:write: %q", text)
	}
	wantCode(t, "pending is not an app", tool(t, cs, "smoke_run_room_app", map[string]any{"room_id": "room-1", "instance_id": first.ProposalID}), "not_found")

	// wait_for_review: pending after a short wait, a normal result.
	type decision struct {
		State      string `json:"state"`
		InstanceID string `json:"instance_id"`
	}
	waitArgs := map[string]any{"room_id": "room-1", "proposal_id": first.ProposalID, "timeout_seconds": 1}
	if d := wantOK[decision](t, "wait, pending", tool(t, rs, "wait_for_review", waitArgs)); d.State != "pending" {
		t.Fatalf("short wait: %+v", d)
	}
	wantCode(t, "wait 51", tool(t, rs, "wait_for_review", map[string]any{"room_id": "room-1", "proposal_id": first.ProposalID, "timeout_seconds": 51}), "invalid_args")
	wantCode(t, "wait unknown", tool(t, rs, "wait_for_review", map[string]any{"room_id": "room-1", "proposal_id": "prop_nosuch"}), "not_found")

	// The owner approves on the device while the model waits, with a
	// progress token.
	type waited struct {
		res *mcp.CallToolResult
		err error
		at  time.Time
	}
	got := make(chan waited, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "wait_for_review", Arguments: map[string]any{"room_id": "room-1", "proposal_id": first.ProposalID, "timeout_seconds": 50}}
		p.SetProgressToken("wait-1")
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, p)
		got <- waited{res, err, time.Now()}
	}()
	eventually(t, "a progress notification", func() bool { return progress.Load() > 0 })
	owner, err := rooms.Open(ctx, filepath.Join(dv.home, "data", daemon.RoomsDB), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	detail, err := owner.GetProposal(ctx, first.ProposalID)
	if err != nil {
		t.Fatal(err)
	}
	// The owner sees which client token proposed it.
	if want := fmt.Sprintf("MCP client token %q (%s)", write.Name, write.ID); detail.ProposedBy != want {
		t.Errorf("proposed_by %q, want %q", detail.ProposedBy, want)
	}
	clicked := time.Now()
	approved, err := owner.ApproveProposal(ctx, first.ProposalID, detail.ContentHash)
	if err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w.err != nil {
		t.Fatal(w.err)
	}
	d := wantOK[decision](t, "wait, approved", w.res)
	if d.State != "approved" || d.InstanceID != approved.InstanceID {
		t.Fatalf("wait_for_review %+v, want approved %s", d, approved.InstanceID)
	}
	t.Logf("owner's click → wait_for_review returned: %s; %d progress notifications", w.at.Sub(clicked).Round(time.Millisecond), progress.Load())

	// The app is in the launcher now.
	page := wantOK[rooms.AppPage](t, "list_room_apps", tool(t, rs, "list_room_apps", map[string]any{"room_id": "room-1"}))
	if !slices.ContainsFunc(page.Items, func(i rooms.AppItem) bool { return i.InstanceID == approved.InstanceID }) {
		t.Fatalf("launcher %+v", page)
	}
	st := wantOK[rooms.AppStatus](t, "read_room_app_status", tool(t, rs, "read_room_app_status", map[string]any{"room_id": "room-1", "instance_id": approved.InstanceID}))
	if st.Review.State != "approved" {
		t.Fatalf("status %+v", st)
	}
	// This device runs no sandbox: the smoke-run is refused with the reason.
	wantCode(t, "smoke-run, no sandbox", tool(t, cs, "smoke_run_room_app", map[string]any{"room_id": "room-1", "instance_id": approved.InstanceID}), "sandbox_failed")
	wantCode(t, "smoke-run, read token", tool(t, rs, "smoke_run_room_app", map[string]any{"room_id": "room-1", "instance_id": approved.InstanceID}), "command_not_allowed")

	// Used tokens show their last use.
	ts, err := h.client.ClientTokens(ctx)
	if err != nil || len(ts) != 2 || ts[0].LastUsed.IsZero() || ts[1].LastUsed.IsZero() {
		t.Fatalf("token list %+v %v", ts, err)
	}

	// The laptop goes offline: the room stays listed as offline, and a call
	// says device_offline.
	dv.stop(t)
	waitState(t, h, dv.id, hubapi.StateOffline)
	if dir := listRooms(t, rs); len(dir) != 1 || dir[0].Presence.State != hubapi.StateOffline {
		t.Fatalf("directory while offline: %+v", dir)
	}
	wantCode(t, "offline", tool(t, rs, "read_room", map[string]any{"room_id": "room-1"}), "device_offline")
}
