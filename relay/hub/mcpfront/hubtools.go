package mcpfront

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The tools the front serves itself, without a device: their arguments and
// results are Go types, and their inputSchema and outputSchema are
// generated from those types (the go-sdk's jsonschema.For, as mcp.AddTool
// does). They are registered with Server.AddTool rather than mcp.AddTool:
// AddTool checks the arguments before the handler runs, so a malformed call
// would skip the front's authorisation and per-token limit (begin) and get
// the SDK's wording instead of invalid_args; the handlers decode the same
// types strictly instead (strictArgs).

// ListRoomsArgs are list_local_rooms' arguments: none.
type ListRoomsArgs struct{}

// ListRoomsResult is list_local_rooms' result.
type ListRoomsResult struct {
	Rooms []hubapi.DirectoryRoom `json:"rooms" jsonschema:"the local Rooms of the token's project (of its device, for a grant bound to one), with their laptop's presence"`
}

// WaitArgs are wait_for_review's arguments.
type WaitArgs struct {
	RoomID     string `json:"room_id"`
	ProposalID string `json:"proposal_id" jsonschema:"the proposal_id a propose tool returned"`
	Timeout    *int   `json:"timeout_seconds,omitempty" jsonschema:"how long to wait, 1-50 s (default 45)"`
}

// WaitResult is wait_for_review's result.
type WaitResult struct {
	ProposalID string    `json:"proposal_id"`
	RoomID     string    `json:"room_id"`
	State      string    `json:"state" jsonschema:"pending (still waiting when the time ran out), approved or declined"`
	InstanceID string    `json:"instance_id,omitempty" jsonschema:"the app an approval created"`
	DecidedAt  time.Time `json:"decided_at,omitzero"`
}

// The hub tools' schemas, generated once from the types above. A type the
// generator cannot read is a build defect: the package's tests fail.
var (
	// No arguments; "properties": {} stays (the generator drops an empty
	// map) for clients that require the key.
	listRoomsInput  = json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)
	listRoomsOutput = schemaFor[ListRoomsResult](func(s *jsonschema.Schema) {
		rooms := s.Properties["rooms"]
		rooms.Types, rooms.Type = nil, "array" // never null
		p := rooms.Items.Properties["presence"].Properties
		p["state"].Enum = []any{hubapi.StateOnline, hubapi.StateSleeping, hubapi.StateOffline}
		p["app"].Enum = []any{hubapi.AppOpen, hubapi.AppClosed}
		p["app"].Description = "the desktop app that provides the room, while the laptop is online; absent when roomrelay keeps the room itself"
		p["last_seen"].Format = "date-time"
	})
	waitInput = schemaFor[WaitArgs](func(s *jsonschema.Schema) {
		t := s.Properties["timeout_seconds"]
		t.Types, t.Type = nil, "integer"
		t.Minimum, t.Maximum = ptr(1.0), ptr(float64(MaxWaitSeconds))
	})
	waitOutput = schemaFor[WaitResult](func(s *jsonschema.Schema) {
		s.Properties["state"].Enum = []any{"pending", "approved", "declined"}
		s.Properties["decided_at"].Format = "date-time"
	})
)

func schemaFor[T any](adjust func(*jsonschema.Schema)) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("mcpfront: schema of %T: %v", *new(T), err))
	}
	if adjust != nil {
		adjust(s)
	}
	return s
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
	if rooms == nil {
		rooms = []hubapi.DirectoryRoom{} // the outputSchema's rooms is an array, never null
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
	return c.ok(ListRoomsResult{Rooms: rooms}, text), nil
}

func (f *Front) waitForReview(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c, refused := f.begin(ctx, req, ToolWaitForReview)
	if refused != nil {
		return refused, nil
	}
	var a WaitArgs
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
	out := WaitResult{ProposalID: st.ProposalID, RoomID: a.RoomID, State: st.State, InstanceID: st.InstanceID, DecidedAt: st.DecidedAt}
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
