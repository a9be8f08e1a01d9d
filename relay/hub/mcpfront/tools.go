package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// Tool names the front adds to the device commands.
const (
	ToolListLocalRooms = "list_local_rooms"
	ToolWaitForReview  = "wait_for_review"
)

// Wait bounds of wait_for_review: 50 s stays under the 60 s request timeout
// of clients that do not reset it on progress.
const (
	DefaultWaitSeconds = 45
	MaxWaitSeconds     = 50
)

// offline is what every device tool says about reach, as the seed advises.
const offline = " The Room lives on one laptop: while it is offline the call fails with device_offline, and while its desktop app is closed with app_not_running; tell the user instead of retrying."

var descriptions = map[string]string{
	ToolListLocalRooms: "List the local Rooms this token's project can reach, kept on owners' laptops, with each laptop's presence (online, online with its desktop app closed, sleeping, offline, last seen). Use their room_id in the other tools.",
	relay.CmdReadRoom:  "Read one local Room: id, name, app count, pending proposals. Never files, config, logs, secrets or app storage." + offline,
	relay.CmdListRoomApps: "List the apps in a local Room's launcher, a page at a time (next_cursor). Pending proposals are not apps until the owner approves them." +
		offline,
	relay.CmdReadRoomAppStatus: "The launcher, review and local build (smoke-run) state of one app in a local Room; no config, files, logs or secrets." + offline,
	relay.CmdProposeRoomSnippetApp: "Propose a snippet app (src/App.tsx required; a handful of files, tens of KiB) for a local Room. Nothing reaches its launcher before the owner reviews the full code and approves it on their laptop (`roomrelay review`). " +
		"Derive idempotency_key from the content, e.g. \"snip-\" + sha256(room_id, name, files): a retry returns the same proposal. Then call wait_for_review, or end the turn and tell the user to approve it.",
	relay.CmdProposeRoomRepoApp: "Propose a pinned repository version of the same project as an app for a local Room (for apps too big for a snippet). It reaches the launcher only after the owner approves it on their laptop (`roomrelay review`). Derive idempotency_key from the content.",
	relay.CmdSmokeRunRoomApp:    "Build an approved snippet app on the owner's laptop and smoke-run it in the device's sandbox: phase reached, render summary, error at its TSX file:line:col." + offline,
	ToolWaitForReview:           "Wait for the owner's decision on a proposal; returns as soon as they approve or decline it on their laptop. If it is still pending after timeout_seconds, tell the user to approve it there (`roomrelay review`) and end the turn; do not loop.",
}

var (
	listRoomsSchema = json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)
	waitSchema      = json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"room_id":{"type":"string"},"proposal_id":{"type":"string"},"timeout_seconds":{"type":"integer","minimum":1,"maximum":%d}},"required":["room_id","proposal_id"],"additionalProperties":false}`, MaxWaitSeconds))
)

// publishedSchema is a command's relay schema as a tool's inputSchema: the
// same document without $schema, title and description (the tool's own
// description says it), which only cost a model's context.
func publishedSchema(command string) (json.RawMessage, error) {
	b, ok := relay.SchemaJSON(command)
	if !ok {
		return nil, fmt.Errorf("mcpfront: no schema for %s", command)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("mcpfront: schema %s: %w", command, err)
	}
	delete(doc, "$schema")
	delete(doc, "title")
	delete(doc, "description")
	return json.Marshal(doc)
}

func ptr[T any](v T) *T { return &v }

func (f *Front) addTools() error {
	for _, n := range append(relay.CommandNames(), ToolListLocalRooms, ToolWaitForReview) {
		f.tools[n] = true
	}
	f.server.AddTool(&mcp.Tool{Name: ToolListLocalRooms, Description: descriptions[ToolListLocalRooms], InputSchema: listRoomsSchema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)}}, f.listRooms)
	for _, name := range relay.CommandNames() {
		schema, err := publishedSchema(name)
		if err != nil {
			return err
		}
		ann := &mcp.ToolAnnotations{ReadOnlyHint: relay.ReadOnlyCommand(name), OpenWorldHint: ptr(false)}
		switch name {
		case relay.CmdProposeRoomSnippetApp, relay.CmdProposeRoomRepoApp:
			ann.DestructiveHint = ptr(true)
		case relay.CmdSmokeRunRoomApp:
			ann.DestructiveHint = ptr(false)
		}
		f.server.AddTool(&mcp.Tool{Name: name, Description: descriptions[name], InputSchema: schema, Annotations: ann}, f.deviceTool(name))
	}
	f.server.AddTool(&mcp.Tool{Name: ToolWaitForReview, Description: descriptions[ToolWaitForReview], InputSchema: waitSchema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)}}, f.waitForReview)
	return nil
}

// writeTool reports whether a tool changes a device (needs rooms:write).
func writeTool(name string) bool {
	return relay.KnownCommand(name) && !relay.ReadOnlyCommand(name)
}

// call is what every tool handler starts from: who is calling, checked for
// scope and rate, and a record for the log line.
type call struct {
	f      *Front
	tool   string
	client *hub.Client
	device string
	addr   string // the caller's address (Hub.ClientAddr)
	start  time.Time
}

// begin authorises a tools/call; a non-nil result is the refusal to return.
func (f *Front) begin(ctx context.Context, req *mcp.CallToolRequest, tool string) (*call, *mcp.CallToolResult) {
	c := &call{f: f, tool: tool, start: f.cfg.Now()}
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		c.client, _ = req.Extra.TokenInfo.Extra["client"].(*hub.Client)
		c.addr, _ = req.Extra.TokenInfo.Extra["addr"].(string)
	}
	if c.client == nil { // cannot happen behind authenticate
		return c, c.fail(relay.Errorf(relay.CodeNotEnrolled, "no client token"))
	}
	if !c.client.OAuth { // a grant's use is recorded by its refreshes
		f.hub.NoteClientUse(context.WithoutCancel(ctx), c.client.TokenID)
	}
	if writeTool(tool) && !c.client.CanWrite() && c.client.OAuth {
		return c, c.fail(relay.Errorf(relay.CodeCommandNotAllowed,
			"this sign-in grants %s only; %s needs %s: re-authorize and choose \"Read, and propose apps\" (in Claude Code: /mcp, roomrelay, Re-authenticate)", ScopeRead, tool, ScopeWrite))
	}
	if writeTool(tool) && !c.client.CanWrite() {
		return c, c.fail(relay.Errorf(relay.CodeCommandNotAllowed,
			"this token has scope %s only; %s needs %s: ask the hub operator for a write token (`roomrelay hub token create --scope write`)", ScopeRead, tool, ScopeWrite))
	}
	if ok, wait := f.lim.allow(c.client.TokenID); !ok {
		secs := int((wait + time.Second - 1) / time.Second)
		return c, c.fail(relay.Errorf(relay.CodeRateLimited, "this token sent more than %d messages a minute to this hub; retry in %ds (retry_after_seconds=%d)", f.cfg.TokenRate, secs, secs))
	}
	return c, nil
}

// hints say what a model should do next, per code; the device's message
// says what happened.
var hints = map[relay.Code]string{
	relay.CodeDeviceOffline:       "Tell the user the laptop is offline; do not retry until they say it is back.",
	relay.CodeProjectNotEnabled:   "The owner has not enabled this project on that laptop (`roomrelay enable PROJECT`).",
	relay.CodeCommandNotAllowed:   "Not allowed by the device owner or this token; tell the user.",
	relay.CodeInvalidArgs:         "Fix the arguments as the message says and call again.",
	relay.CodeNotFound:            "Check the id with list_local_rooms or list_room_apps.",
	relay.CodePendingReview:       "It waits for the owner's approval on the laptop (`roomrelay review`).",
	relay.CodeIdempotencyConflict: "This key was used for other content; derive the key from the content.",
	relay.CodeExpired:             "The laptop did not answer in time; retry once.",
	relay.CodeBusy:                "The laptop is busy; retry shortly.",
	relay.CodeRateLimited:         "Wait as the message says before calling again.",
	relay.CodeSandboxFailed:       "Fix the snippet at the location given and propose it again.",
	relay.CodeNotEnrolled:         "The laptop is not enrolled for this project; tell the user.",
	relay.CodeAppNotRunning:       "Tell the user the desktop app is closed on their laptop (the relay is online) and ask them to open it; do not retry until they say it is open.",
	relay.CodeInternal:            "Retry once; if it persists, tell the user.",
}

// fail is a tool error: isError, text starting with the code, and no
// structuredContent (none of these tools declares an outputSchema, and an
// error result must not pretend to be one).
func (c *call) fail(e *relay.Error) *mcp.CallToolResult {
	c.log(string(e.Code))
	text := string(e.Code) + ": " + strings.TrimSuffix(e.Message, ".") + "."
	if h := hints[e.Code]; h != "" {
		text += " " + h
	}
	return visibleResult(&mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}})
}

// ok is a tool result: structuredContent and a one-line text.
func (c *call) ok(structured any, text string) *mcp.CallToolResult {
	c.log("ok")
	return visibleResult(&mcp.CallToolResult{StructuredContent: structured, Content: []mcp.Content{&mcp.TextContent{Text: text}}})
}

func (c *call) log(outcome string) {
	tok := ""
	if c.client != nil {
		tok = c.client.TokenID
	}
	c.f.log.Info("tools/call", "token_id", tok, "client", c.addr, "tool", c.tool, "device", c.device, "outcome", outcome,
		"ms", c.f.cfg.Now().Sub(c.start).Milliseconds())
}

func (f *Front) listRooms(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c, refused := f.begin(ctx, req, ToolListLocalRooms)
	if refused != nil {
		return refused, nil
	}
	if err := strictArgs(req.Params.Arguments, &struct{}{}); err != nil {
		return c.fail(err), nil
	}
	rooms, err := f.hub.Rooms(ctx, c.client.Project)
	if err != nil {
		f.log.Error("list rooms", "err", err)
		return c.fail(relay.Errorf(relay.CodeInternal, "the hub could not read its room directory")), nil
	}
	if d := c.client.Device; d != "" { // a grant bound to one device sees its rooms only
		rooms = slices.DeleteFunc(rooms, func(r hubapi.DirectoryRoom) bool { return r.DeviceID != d })
	}
	parts := make([]string, 0, len(rooms))
	for _, r := range rooms {
		state := r.Presence.State
		if r.Presence.App == hubapi.AppClosed {
			// The laptop is reachable but the desktop app that holds the
			// room is closed: reads answer app_not_running.
			state += ", app closed"
		}
		parts = append(parts, fmt.Sprintf("%s (%s, %s)", r.Name, r.RoomID, state))
	}
	noun := "rooms"
	if len(rooms) == 1 {
		noun = "room"
	}
	text := fmt.Sprintf("%d local %s: %s.", len(rooms), noun, strings.Join(parts, "; "))
	if len(rooms) == 0 {
		text = "No local rooms: no laptop serves this project yet (the owner runs `roomrelay enable PROJECT` there)."
	}
	return c.ok(map[string]any{"rooms": rooms}, text), nil
}

// strictArgs decodes a tool's arguments, refusing unknown fields.
func strictArgs(raw json.RawMessage, v any) *relay.Error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = json.RawMessage(`{}`)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return relay.Errorf(relay.CodeInvalidArgs, "schema: %v", err)
	}
	return nil
}

// deviceTool serves one device command: validate as the device will, find
// the room's device in the directory, send the command, return its result.
func (f *Front) deviceTool(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		c, refused := f.begin(ctx, req, name)
		if refused != nil {
			return refused, nil
		}
		args := req.Params.Arguments
		if len(bytes.TrimSpace(args)) == 0 {
			args = json.RawMessage(`{}`)
		}
		if err := relay.ValidateArgs(name, args); err != nil {
			return c.fail(relay.AsError(err)), nil
		}
		var a struct {
			RoomID string `json:"room_id"`
		}
		_ = json.Unmarshal(args, &a)
		dev, rerr := f.resolve(ctx, c.client, a.RoomID)
		if rerr != nil {
			return c.fail(rerr), nil
		}
		c.device = dev
		res := f.hub.Command(ctx, hub.Call{Device: dev, Project: c.client.Project, Name: name, Args: args, Timeout: f.cfg.CommandTimeout,
			Caller: fmt.Sprintf("MCP client token %q (%s)", c.client.Name, c.client.TokenID)})
		if res.Error != nil || !res.OK {
			e := res.Error
			if e == nil {
				e = relay.Errorf(relay.CodeInternal, "the device answered without a result")
			}
			return c.fail(e), nil
		}
		var out map[string]any
		if err := json.Unmarshal(res.Result, &out); err != nil {
			return c.fail(relay.Errorf(relay.CodeInternal, "the device's result is not a JSON object")), nil
		}
		return c.ok(out, summary(name, out)), nil
	}
}

// summary is the one-line text beside a result's structuredContent.
func summary(name string, r map[string]any) string {
	s := func(k string) any { return r[k] }
	switch name {
	case relay.CmdReadRoom:
		return fmt.Sprintf("Room %q (%v): %v apps, %v pending proposals.", s("name"), s("id"), s("app_count"), s("pending_proposals"))
	case relay.CmdListRoomApps:
		items, _ := r["items"].([]any)
		more := ""
		if c, _ := r["next_cursor"].(string); c != "" {
			more = " More: pass next_cursor."
		}
		return fmt.Sprintf("%d apps.%s", len(items), more)
	case relay.CmdReadRoomAppStatus:
		state := func(k string) any {
			m, _ := r[k].(map[string]any)
			return m["state"]
		}
		return fmt.Sprintf("App %q: launcher %v, review %v, build %v.", s("name"), state("launcher"), state("review"), state("build"))
	case relay.CmdProposeRoomSnippetApp, relay.CmdProposeRoomRepoApp:
		dup := ""
		if d, _ := r["duplicate"].(bool); d {
			dup = " (an existing proposal with this content; no new card)"
		}
		if s("state") == "pending_review" {
			return fmt.Sprintf("Proposal %v is pending review%s: the owner approves it on their laptop (`roomrelay review`). Call wait_for_review or end the turn.", s("proposal_id"), dup)
		}
		return fmt.Sprintf("Proposal %v is %v%s.", s("proposal_id"), s("state"), dup)
	case relay.CmdSmokeRunRoomApp:
		return fmt.Sprintf("Smoke-run ok: phase %v in %v ms.", s("phase"), s("duration_ms"))
	}
	return "ok"
}

func (f *Front) waitForReview(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c, refused := f.begin(ctx, req, ToolWaitForReview)
	if refused != nil {
		return refused, nil
	}
	var a struct {
		RoomID     string `json:"room_id"`
		ProposalID string `json:"proposal_id"`
		Timeout    *int   `json:"timeout_seconds"`
	}
	if err := strictArgs(req.Params.Arguments, &a); err != nil {
		return c.fail(err), nil
	}
	switch {
	case a.RoomID == "":
		return c.fail(relay.Errorf(relay.CodeInvalidArgs, "schema: missing property 'room_id' (required)")), nil
	case a.ProposalID == "":
		return c.fail(relay.Errorf(relay.CodeInvalidArgs, "schema: missing property 'proposal_id' (required)")), nil
	case a.Timeout != nil && (*a.Timeout < 1 || *a.Timeout > MaxWaitSeconds):
		return c.fail(relay.Errorf(relay.CodeInvalidArgs, "schema: timeout_seconds must be 1–%d (timeout_seconds: maximum %d)", MaxWaitSeconds, MaxWaitSeconds)), nil
	}
	wait := DefaultWaitSeconds * time.Second
	if a.Timeout != nil {
		wait = time.Duration(*a.Timeout) * time.Second
	}
	dev, rerr := f.resolve(ctx, c.client, a.RoomID)
	if rerr != nil {
		return c.fail(rerr), nil
	}
	c.device = dev

	// Progress on the request's own stream keeps clients that reset their
	// timeout on progress waiting; one goroutine, ended with the wait.
	var tok any
	if req.Params != nil {
		tok = req.Params.GetProgressToken()
	}
	wctx, stopProgress := context.WithCancel(ctx)
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		if tok == nil || req.Session == nil {
			return
		}
		t := time.NewTicker(f.cfg.ProgressEvery)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				_ = req.Session.NotifyProgress(wctx, &mcp.ProgressNotificationParams{ProgressToken: tok,
					Progress: time.Since(start).Seconds(), Total: wait.Seconds(), Message: "waiting for the owner's review on the laptop"})
			}
		}
	}()
	st, err := f.hub.WaitProposal(wctx, dev, a.ProposalID, wait)
	stopProgress()
	<-progressDone
	if err != nil {
		var he *hub.Error
		if errors.As(err, &he) && he.Code == "not_found" {
			return c.fail(relay.Errorf(relay.CodeNotFound, "%s", he.Message)), nil
		}
		if errors.As(err, &he) && he.Code == "invalid_request" {
			return c.fail(relay.Errorf(relay.CodeInvalidArgs, "%s", he.Message)), nil
		}
		f.log.Error("wait for review", "err", err)
		return c.fail(relay.Errorf(relay.CodeInternal, "the hub could not watch the proposal")), nil
	}
	out := map[string]any{"proposal_id": st.ProposalID, "room_id": a.RoomID, "state": st.State}
	if st.InstanceID != "" {
		out["instance_id"] = st.InstanceID
	}
	if !st.DecidedAt.IsZero() {
		out["decided_at"] = st.DecidedAt
	}
	var text string
	switch st.State {
	case "approved":
		text = fmt.Sprintf("Approved: the app is in the Room's launcher as %s.", st.InstanceID)
	case "declined":
		text = "Declined by the owner: nothing was added. Ask the user before proposing again."
	default:
		text = fmt.Sprintf("Still pending after %ds: tell the user to approve it on their laptop (`roomrelay review`), then end the turn; do not loop.", int(wait.Seconds()))
	}
	return c.ok(out, text), nil
}

// resolve finds a room's device; for a client bound to one device a room
// on another device is not found, the same answer as an unknown room.
func (f *Front) resolve(ctx context.Context, c *hub.Client, room string) (string, *relay.Error) {
	dev, rerr := f.hub.ResolveRoom(ctx, c.Project, room)
	if rerr == nil && c.Device != "" && dev != c.Device {
		return "", relay.RoomNotFound(room)
	}
	return dev, rerr
}
