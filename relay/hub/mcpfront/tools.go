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

// Descriptions of the tools the front adds; a device command's is its row
// of relay's command table.
var hubDescriptions = map[string]string{
	ToolListLocalRooms: "List the local Rooms this token's project can reach, kept on owners' laptops, with each laptop's presence (online, online with its desktop app closed, sleeping, offline, last seen). Use their room_id in the other tools.",
	ToolWaitForReview:  "Wait for the owner's decision on a proposal; returns as soon as they approve or decline it on their laptop. If it is still pending after timeout_seconds, tell the user to approve it there (`roomrelay review`) and end the turn; do not loop.",
}

// publishedSchema is a relay schema document as a tool's inputSchema or
// outputSchema: the same document without $schema, title and description
// (the tool's own description says it), which only cost a model's context.
func publishedSchema(b []byte, ok bool) (json.RawMessage, error) {
	if !ok {
		return nil, errors.New("no schema")
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	delete(doc, "$schema")
	delete(doc, "title")
	delete(doc, "description")
	return json.Marshal(doc)
}

func ptr[T any](v T) *T { return &v }

// Tool lists every tool the front serves, as tools/list shows it (for the
// generated documentation and the tests).
func (f *Front) Tools() []*mcp.Tool { return slices.Clone(f.toolList) }

func (f *Front) addTool(t *mcp.Tool, h mcp.ToolHandler) {
	f.tools[t.Name] = true
	f.toolList = append(f.toolList, t)
	f.server.AddTool(t, withCallContext(h))
	if t.Name != ToolWaitForReview { // it sends progress on its session
		// Unwrapped: fastCall runs on the guard's request context, which
		// already is the call's context (cancel.go), so the wrapper's
		// child context and its AfterFunc would only repeat it.
		f.fast[t.Name] = h
	}
}

// addTools registers list_local_rooms, one tool per row of relay's command
// table, and wait_for_review.
func (f *Front) addTools() error {
	f.addTool(&mcp.Tool{Name: ToolListLocalRooms, Description: hubDescriptions[ToolListLocalRooms],
		InputSchema: listRoomsInput, OutputSchema: listRoomsOutput,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)}}, f.listRooms)
	for _, spec := range relay.Commands() {
		in, err := publishedSchema(relay.SchemaJSON(spec.Name))
		if err != nil {
			return fmt.Errorf("mcpfront: %s's arguments schema: %w", spec.Name, err)
		}
		out, err := publishedSchema(relay.ResultSchemaJSON(spec.Name))
		if err != nil {
			return fmt.Errorf("mcpfront: %s's result schema: %w", spec.Name, err)
		}
		ann := &mcp.ToolAnnotations{ReadOnlyHint: spec.ReadOnly, OpenWorldHint: ptr(false)}
		if !spec.ReadOnly {
			ann.DestructiveHint = ptr(spec.Destructive)
		}
		f.addTool(&mcp.Tool{Name: spec.Name, Description: spec.Description, InputSchema: in, OutputSchema: out, Annotations: ann},
			f.deviceTool(spec))
	}
	f.addTool(&mcp.Tool{Name: ToolWaitForReview, Description: hubDescriptions[ToolWaitForReview],
		InputSchema: waitInput, OutputSchema: waitOutput,
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
	if !c.client.OAuth { // an OAuth grant's use is recorded as its token is verified (oauth/grantuse.go)
		f.hub.NoteClientUse(context.WithoutCancel(ctx), c.client.TokenID)
	}
	if writeTool(tool) && !c.client.CanWrite() && c.client.OAuth {
		return c, c.fail(relay.Errorf(relay.CodeCommandNotAllowed,
			"this sign-in grants %s only; %s needs %s: re-authorize and choose \"Read, and propose apps\" (in Claude Code: /mcp, roomrelay, Re-authenticate)", hubapi.OAuthScopeRead, tool, hubapi.OAuthScopeWrite))
	}
	if writeTool(tool) && !c.client.CanWrite() {
		return c, c.fail(relay.Errorf(relay.CodeCommandNotAllowed,
			"this token has scope %s only; %s needs %s: ask the hub operator for a write token (`roomrelay hub token create --scope write`)", hubapi.OAuthScopeRead, tool, hubapi.OAuthScopeWrite))
	}
	if ok, wait := f.lim.allow(c.client.TokenID); !ok {
		secs := int((wait + time.Second - 1) / time.Second)
		return c, c.fail(relay.Errorf(relay.CodeRateLimited, "this token sent more than %d messages a minute to this hub; retry in %ds (retry_after_seconds=%d)", f.cfg.TokenRate, secs, secs))
	}
	return c, nil
}

// fail is a tool error: isError, text starting with the code, and no
// structuredContent (an error result must not pretend to match the tool's
// outputSchema).
func (c *call) fail(e *relay.Error) *mcp.CallToolResult {
	c.log(string(e.Code))
	text := string(e.Code) + ": " + strings.TrimSuffix(e.Message, ".") + "."
	if h := e.Code.Hint(); h != "" {
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
func (f *Front) deviceTool(spec relay.CommandSpec) mcp.ToolHandler {
	name := spec.Name
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
		if raw, ok := printableJSON(res.Result); ok && out != nil {
			// Already what visibleResult would make of it: sent as the
			// device wrote it, not encoded again.
			r := c.ok(nil, spec.Summary(out))
			r.StructuredContent = raw
			return r, nil
		}
		return c.ok(out, spec.Summary(out)), nil
	}
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
