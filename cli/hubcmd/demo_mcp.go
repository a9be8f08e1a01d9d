package hubcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/cli"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The demo's MCP step: what a coding agent (Claude Code) does through the
// hub's /mcp with a client token, on the same hub, agent and room.

// mcpText is a tool result's text content.
func mcpText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// demoMCP connects a go-sdk client with a new write token and returns a
// call function for tools; close ends the session.
func (d *demo) demoMCP(ctx context.Context, hubURL string, admin *hubclient.Client) (call func(name string, args any) *mcp.CallToolResult, cs *mcp.ClientSession, err error) {
	tok, err := admin.CreateClientToken(ctx, demoProject, hubapi.ScopeWrite, "demo coding agent")
	if err != nil {
		return nil, nil, err
	}
	d.say("hub operator: `roomrelay hub token create --project %s --scope write` → client token %s (shown once)", demoProject, tok.ID)
	d.detail("claude mcp add --transport http roomrelay %s/mcp --header \"Authorization: Bearer rrc_…\"", hubURL)
	c := mcp.NewClient(&mcp.Implementation{Name: "roomrelay-demo", Version: cli.Version}, nil)
	cs, err = c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hubURL + "/mcp", HTTPClient: &http.Client{Transport: hubclient.Bearer{Token: tok.Token}}}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("mcp connect: %w", err)
	}
	call = func(name string, args any) *mcp.CallToolResult {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		r, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "protocol error: " + err.Error()}}}
		}
		return r
	}
	return call, cs, nil
}

// mcpStep lists, reads, proposes and waits for the owner's approval, all
// as MCP tool calls.
// With smoke, the device runs a sandbox and the approved app is smoke-run
// over MCP too.
func (d *demo) mcpStep(ctx context.Context, call func(string, any) *mcp.CallToolResult, cs *mcp.ClientSession, dataDir, roomID string, files map[string]string, smoke bool) {
	lt, err := cs.ListTools(ctx, nil)
	d.expect(err == nil && len(lt.Tools) == 8, "tools/list: %v", err)
	if err == nil {
		names := make([]string, 0, len(lt.Tools))
		for _, t := range lt.Tools {
			names = append(names, t.Name)
		}
		d.say("MCP client: tools/list → %s", strings.Join(names, ", "))
	}
	t0 := time.Now()
	r := call("list_local_rooms", map[string]any{})
	d.expect(!r.IsError && strings.Contains(mcpText(r), roomID), "list_local_rooms: %s", mcpText(r))
	d.say("MCP client: list_local_rooms → %s (%s)", mcpText(r), since(t0))
	t0 = time.Now()
	r = call(relay.CmdReadRoom, map[string]any{"room_id": roomID})
	d.expect(!r.IsError, "read_room over MCP: %s", mcpText(r))
	d.say("MCP client: read_room → %s (%s)", mcpText(r), since(t0))

	name := "Standup timer (from the coding agent)"
	key := relay.SnippetKey(roomID, name, files)
	t0 = time.Now()
	r = call(relay.CmdProposeRoomSnippetApp, map[string]any{"room_id": roomID, "name": name, "files": files, "idempotency_key": key})
	var pr struct {
		ProposalID string `json:"proposal_id"`
		State      string `json:"state"`
	}
	b, _ := json.Marshal(r.StructuredContent)
	_ = json.Unmarshal(b, &pr)
	d.expect(!r.IsError && pr.State == "pending_review", "propose over MCP: %s", mcpText(r))
	d.say("MCP client: propose_room_snippet_app → %s (%s)", mcpText(r), since(t0))
	if pr.ProposalID == "" {
		return
	}

	type waited struct {
		r  *mcp.CallToolResult
		at time.Time
	}
	got := make(chan waited, 1)
	go func() {
		r := call("wait_for_review", map[string]any{"room_id": roomID, "proposal_id": pr.ProposalID, "timeout_seconds": 45})
		got <- waited{r, time.Now()}
	}()
	time.Sleep(200 * time.Millisecond) // the call is in flight before the owner clicks
	store, err := rooms.Open(ctx, filepath.Join(dataDir, daemon.RoomsDB), d.log)
	if err != nil {
		d.expect(false, "open the store: %v", err)
		return
	}
	detail, err := store.GetProposal(ctx, pr.ProposalID)
	clicked := time.Now()
	if err == nil {
		_, err = store.ApproveProposal(ctx, pr.ProposalID, detail.ContentHash)
	}
	store.Close()
	d.expect(err == nil, "approve: %v", err)
	d.say("device owner: `roomrelay review approve %s`", pr.ProposalID)
	w := <-got
	d.expect(!w.r.IsError && strings.HasPrefix(mcpText(w.r), "Approved"), "wait_for_review: %s", mcpText(w.r))
	d.say("MCP client: wait_for_review (one call, in flight while the owner decided) → %s — %s after the click", mcpText(w.r), w.at.Sub(clicked).Round(time.Millisecond))
	var dec struct {
		InstanceID string `json:"instance_id"`
	}
	b, _ = json.Marshal(w.r.StructuredContent)
	_ = json.Unmarshal(b, &dec)
	if smoke && dec.InstanceID != "" {
		t0 = time.Now()
		r = call(relay.CmdSmokeRunRoomApp, map[string]any{"room_id": roomID, "instance_id": dec.InstanceID})
		d.expect(!r.IsError, "smoke_run_room_app over MCP: %s", mcpText(r))
		d.say("MCP client: smoke_run_room_app → %s (%s)", mcpText(r), since(t0))
	}
}
