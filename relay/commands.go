package relay

import (
	"embed"
	"fmt"
	"slices"
)

// The command names, the seed's Room tools. Only these can ever be allowed.
const (
	CmdReadRoom              = "read_room"
	CmdListRoomApps          = "list_room_apps"
	CmdReadRoomAppStatus     = "read_room_app_status"
	CmdProposeRoomSnippetApp = "propose_room_snippet_app"
	CmdProposeRoomRepoApp    = "propose_room_repo_app"
	CmdSmokeRunRoomApp       = "smoke_run_room_app"
)

// CommandSpec is everything about one device command but its handler, which
// the device registers under Name (agent/daemon). The validator, the
// daemon's handler registry, the hub and the MCP front (a tool per command:
// its annotations, description, inputSchema and outputSchema, the text
// beside a result) all read this table, so adding a command is a row here,
// its two schema files and its handler.
//
// The schemas are files beside this one: schemas/NAME.json for the
// arguments (draft 2020-12, what ValidateArgs enforces and the MCP
// inputSchema publishes) and schemas/NAME.result.json for the result's
// shape (the MCP outputSchema; tests validate real results against it).
type CommandSpec struct {
	Name string
	// ReadOnly: it changes nothing on the device (a read token may call it,
	// its audit line is group-committed).
	ReadOnly bool
	// Proposal: it creates a proposal that waits for the owner's review
	// (the hub records the id it returns for wait_for_review).
	Proposal bool
	// Destructive is MCP's destructiveHint for a command that is not
	// ReadOnly: whether what it changes may replace what the owner has.
	Destructive bool
	// Description is what a model reads about the command (the tool's
	// description).
	Description string
	// Summary is the one line of text beside a result's structuredContent;
	// it reads the result as decoded JSON.
	Summary func(result map[string]any) string
}

// offline is what every device tool says about reach, as the seed advises.
const offline = " The Room lives on one laptop: while it is offline the call fails with device_offline, and while its desktop app is closed with app_not_running; tell the user instead of retrying."

// commands is the table, in documentation order: the reads first.
var commands = []CommandSpec{
	{
		Name: CmdReadRoom, ReadOnly: true,
		Description: "Read one local Room: id, name, app count, pending proposals. Never files, config, logs, secrets or app storage." + offline,
		Summary: func(r map[string]any) string {
			return fmt.Sprintf("Room %q (%v): %v apps, %v pending proposals.", r["name"], r["id"], r["app_count"], r["pending_proposals"])
		},
	},
	{
		Name: CmdListRoomApps, ReadOnly: true,
		Description: "List the apps in a local Room's launcher, a page at a time (next_cursor). Pending proposals are not apps until the owner approves them." + offline,
		Summary: func(r map[string]any) string {
			items, _ := r["items"].([]any)
			more := ""
			if c, _ := r["next_cursor"].(string); c != "" {
				more = " More: pass next_cursor."
			}
			return fmt.Sprintf("%d apps.%s", len(items), more)
		},
	},
	{
		Name: CmdReadRoomAppStatus, ReadOnly: true,
		Description: "The launcher, review and local build (smoke-run) state of one app in a local Room; no config, files, logs or secrets." + offline,
		Summary: func(r map[string]any) string {
			state := func(k string) any {
				m, _ := r[k].(map[string]any)
				return m["state"]
			}
			return fmt.Sprintf("App %q: launcher %v, review %v, build %v.", r["name"], state("launcher"), state("review"), state("build"))
		},
	},
	{
		Name: CmdProposeRoomSnippetApp, Proposal: true, Destructive: true,
		Description: "Propose a snippet app (src/App.tsx required; a handful of files, tens of KiB) for a local Room. Nothing reaches its launcher before the owner reviews the full code and approves it on their laptop (`roomrelay review`). " +
			"Derive idempotency_key from the content, e.g. \"snip-\" + sha256(room_id, name, files): a retry returns the same proposal. Then call wait_for_review, or end the turn and tell the user to approve it.",
		Summary: proposalSummary,
	},
	{
		Name: CmdProposeRoomRepoApp, Proposal: true, Destructive: true,
		Description: "Propose a pinned repository version of the same project as an app for a local Room (for apps too big for a snippet). It reaches the launcher only after the owner approves it on their laptop (`roomrelay review`). Derive idempotency_key from the content.",
		Summary:     proposalSummary,
	},
	{
		Name:        CmdSmokeRunRoomApp,
		Description: "Build an approved snippet app on the owner's laptop and smoke-run it in the device's sandbox: phase reached, render summary, error at its TSX file:line:col." + offline,
		Summary: func(r map[string]any) string {
			return fmt.Sprintf("Smoke-run ok: phase %v in %v ms.", r["phase"], r["duration_ms"])
		},
	},
}

func proposalSummary(r map[string]any) string {
	dup := ""
	if d, _ := r["duplicate"].(bool); d {
		dup = " (an existing proposal with this content; no new card)"
	}
	if r["state"] == "pending_review" {
		return fmt.Sprintf("Proposal %v is pending review%s: the owner approves it on their laptop (`roomrelay review`). Call wait_for_review or end the turn.", r["proposal_id"], dup)
	}
	return fmt.Sprintf("Proposal %v is %v%s.", r["proposal_id"], r["state"], dup)
}

// Arguments of each command, as a handler reads them after DecodeArgs; the
// schema files say the same in JSON Schema.
type (
	ReadRoomArgs struct {
		RoomID string `json:"room_id"`
	}
	ListRoomAppsArgs struct {
		RoomID string `json:"room_id"`
		Limit  int    `json:"limit,omitempty"` // 0: the handler's default page size
		Cursor string `json:"cursor,omitempty"`
	}
	ReadRoomAppStatusArgs struct {
		RoomID     string `json:"room_id"`
		InstanceID string `json:"instance_id"`
	}
	ProposeSnippetArgs struct {
		RoomID         string            `json:"room_id"`
		Name           string            `json:"name"`
		Files          map[string]string `json:"files"`
		IdempotencyKey string            `json:"idempotency_key"`
	}
	ProposeRepoArgs struct {
		RoomID         string `json:"room_id"`
		Name           string `json:"name"`
		RepositoryID   string `json:"repository_id"`
		VersionID      string `json:"version_id"`
		IdempotencyKey string `json:"idempotency_key"`
	}
	SmokeRunArgs struct {
		RoomID     string `json:"room_id"`
		InstanceID string `json:"instance_id"`
	}
)

// commandNames is the table's names, in its order.
var commandNames = func() []string {
	out := make([]string, len(commands))
	for i, c := range commands {
		out[i] = c.Name
	}
	return out
}()

// Commands returns the table, reads first.
func Commands() []CommandSpec { return slices.Clone(commands) }

// Spec returns the row of a command.
func Spec(name string) (CommandSpec, bool) {
	i := slices.IndexFunc(commands, func(c CommandSpec) bool { return c.Name == name })
	if i < 0 {
		return CommandSpec{}, false
	}
	return commands[i], true
}

// CommandNames lists every command a device can serve, reads first.
func CommandNames() []string { return slices.Clone(commandNames) }

// KnownCommand reports whether name is one of CommandNames.
func KnownCommand(name string) bool { return slices.Contains(commandNames, name) }

// ReadOnlyCommand reports whether name is a read (it changes nothing on the
// device); the proposals and the smoke-run are not.
func ReadOnlyCommand(name string) bool { s, ok := Spec(name); return ok && s.ReadOnly }

// ProposalCommand reports whether name creates a proposal.
func ProposalCommand(name string) bool { s, ok := Spec(name); return ok && s.Proposal }

// The JSON Schemas (draft 2020-12) of each command's arguments and result,
// named after it. propose_room_snippet_app.json is the seed's inputSchema.
//
//go:embed schemas/*.json
var schemaFS embed.FS

// SchemaJSON returns the JSON Schema document for a command's arguments, as
// published (for example as an MCP tool's inputSchema).
func SchemaJSON(command string) ([]byte, bool) {
	if !KnownCommand(command) {
		return nil, false
	}
	b, err := schemaFS.ReadFile("schemas/" + command + ".json")
	return b, err == nil
}

// ResultSchemaJSON returns the JSON Schema document for a command's result
// (an MCP tool's outputSchema). It requires what every device sends and
// allows more: a result grows by adding fields.
func ResultSchemaJSON(command string) ([]byte, bool) {
	if !KnownCommand(command) {
		return nil, false
	}
	b, err := schemaFS.ReadFile("schemas/" + command + ".result.json")
	return b, err == nil
}
