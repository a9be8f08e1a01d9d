// Package allowlist is the device's policy: which projects this device
// serves, which commands each may run, in which rooms, within which argument
// bounds and at what rate. Anything the policy does not allow is denied.
//
// The policy lives in one human-readable file in the config dir. Only the
// owner's local tools change it: the CLI and the agent's local API, which
// share one rule set (Enable, Disable, ApplyEnable, SetProject, Save); the
// agent's command path only loads it and decides. Nothing here does network
// I/O, and no frame from the hub reaches an editing method.
//
// # The policy file
//
// A line-oriented text file, UTF-8. Each line is a directive and its fields,
// separated by spaces or tabs; indentation is free. A field starting with
// '#' starts a comment that runs to the end of the line; blank lines are
// ignored. An example, in the form Marshal writes:
//
//	# roomrelay device policy. Anything not listed here is denied.
//	version 1
//
//	project proj-alpha
//	  enabled  yes
//	  commands read_room list_room_apps read_room_app_status
//	  rooms    *
//	  rate     120/min burst 30
//	  max      list_room_apps.limit 20
//
//	project proj-beta
//	  enabled  no
//	  commands read_room
//	  rooms    room-1 room-2
//	  rate     120/min burst 30
//
// Directives:
//
//   - version 1: optional, before the first project; only 1 exists.
//   - in-flight N: optional, before the first project: how many commands the
//     device handles at once, all projects together (1 to MaxInFlight,
//     default DefaultInFlight); a command beyond it is answered busy.
//   - notify on|off: optional, before the first project: whether the running
//     agent shows a desktop notification when a proposal arrives for review
//     (default on). Off, the owner learns of proposals from `roomrelay
//     review` only.
//   - provider builtin|app: optional, before the first project: where the
//     device's Rooms live (default builtin: roomrelay's own store). With app,
//     the desktop app that connects to the local API as room provider
//     (docs/provider-protocol.md) answers reads; while it is closed, reads
//     fail with app_not_running and proposals still wait for review.
//   - project ID: starts a project's block; the directives below belong to
//     it until the next project line. A project appears once.
//   - enabled yes|no: required in every block.
//   - commands NAME...: the commands the project may run, one or more per
//     line; the line may repeat. Only the six names of relay.CommandNames
//     exist; any other is an error naming it. No commands line: none.
//   - rooms ID... | rooms *: the rooms the project's commands may touch.
//     No rooms line, or "*": every room of the project.
//   - rate N/UNIT [burst M]: the token buckets for the project's commands,
//     one for reads and one for writes, each with this rate;
//     UNIT is s, min or h; N and M from 1 to 1000000; M defaults to N or 30,
//     whichever is smaller. No rate line: 120/min burst 30.
//   - max COMMAND.ARG N: tightens an argument bound below the protocol's:
//     list_room_apps.limit (1–50), propose_room_snippet_app.files (at most
//     relay.MaxSnippetFiles files) and propose_room_snippet_app.bytes (at most
//     relay.MaxSnippetTotalBytes bytes of content). May repeat for different
//     bounds, and may name a command the project does not (yet) allow.
//     Two bounds are not arguments but what callers may leave waiting for
//     the owner's review: pending.room (proposals pending in one room,
//     default DefaultPendingPerRoom) and pending.project (in the project,
//     default DefaultPendingPerProject), each 1 to MaxPending; the owner may
//     raise these above their defaults. A proposal beyond either is refused
//     with rate_limited, naming how many already wait.
//
// IDs (projects and rooms) are 1–128 characters from A–Z a–z 0–9 . _ : @ -,
// starting with a letter or digit.
//
// Errors name the line and the directive: "line 7: commands: unknown command
// 'read_rooms'". Marshal writes projects by ID, commands in the order of
// relay.CommandNames and rooms sorted, so Parse(Marshal(p)) equals p.
package allowlist

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

// DefaultCommands are what `roomrelay enable PROJECT` allows without
// --allow: the three reads, which change nothing on the device.
var DefaultCommands = []string{relay.CmdReadRoom, relay.CmdListRoomApps, relay.CmdReadRoomAppStatus}

// DefaultRate applies to a project whose block has no rate line.
// 120 a minute with bursts of 30, for reads and writes each: the seed's nine
// validation cases and a model's follow-up reads fit in one burst.
var DefaultRate = Rate{Events: 120, Per: time.Minute, Burst: 30}

// The argument bounds a policy can tighten, and the protocol's own maximum.
const (
	BoundListLimit    = relay.CmdListRoomApps + ".limit"
	BoundSnippetFiles = relay.CmdProposeRoomSnippetApp + ".files"
	BoundSnippetBytes = relay.CmdProposeRoomSnippetApp + ".bytes"
	// What callers may leave pending for review, per room and per project.
	BoundPendingRoom    = "pending.room"
	BoundPendingProject = "pending.project"
)

// The pending bounds' defaults and ceiling. A default project (64 KiB
// snippets) then holds at most ~3 MiB of proposals nobody reviewed yet, and
// a review queue a person can still read.
const (
	DefaultPendingPerRoom    = 10
	DefaultPendingPerProject = 50
	MaxPending               = 1000
)

var boundCeiling = map[string]int{
	BoundListLimit:      50,
	BoundSnippetFiles:   relay.MaxSnippetFiles,
	BoundSnippetBytes:   relay.MaxSnippetTotalBytes,
	BoundPendingRoom:    MaxPending,
	BoundPendingProject: MaxPending,
}

// Rate is a token bucket: Events per Per on average, Burst at once.
type Rate struct {
	Events int
	Per    time.Duration // time.Second, time.Minute or time.Hour
	Burst  int
}

var unitNames = map[time.Duration]string{time.Second: "s", time.Minute: "min", time.Hour: "h"}

// String is the rate as the policy file writes it: "120/min burst 30".
func (r Rate) String() string {
	return fmt.Sprintf("%d/%s burst %d", r.Events, unitNames[r.Per], r.Burst)
}

// Policy is a parsed policy file. The zero value (or New) denies everything.
// Decide, Summary and the other readers may run concurrently; Enable and
// Disable may not run alongside them (the agent swaps in a freshly loaded
// *Policy instead of editing the one it serves from).
type Policy struct {
	projects map[string]*project
	inFlight int    // 0: DefaultInFlight
	notify   string // "on", "off"; "": not set, which is on
	provider string // ProviderBuiltin, ProviderApp; "": not set, which is builtin
}

// DefaultInFlight is the device's concurrent-command bound when the policy
// sets none. Reads are cheap and idempotent, and one busy cloud client (an
// agent fanning out reads, an MCP client retrying) may well send a few dozen
// at once: 64 keeps 50 concurrent callers from being told busy, while still
// bounding what a remote party can make the device hold in memory.
const DefaultInFlight = 64

// MaxInFlight is the highest in-flight bound a policy may set.
const MaxInFlight = 1024

// InFlight is the device's concurrent-command bound.
func (p *Policy) InFlight() int {
	if p == nil || p.inFlight == 0 {
		return DefaultInFlight
	}
	return p.inFlight
}

type project struct {
	enabled  bool
	commands []string // in relay.CommandNames order
	rooms    []string // sorted; nil means every room
	rate     Rate
	max      map[string]int
}

// New returns an empty policy: every project is denied.
func New() *Policy { return &Policy{projects: map[string]*project{}} }

// ProjectInfo is a copy of one project's policy, for display
// (`roomrelay policy show --json`).
type ProjectInfo struct {
	Project  string         `json:"project"`
	Enabled  bool           `json:"enabled"`
	Commands []string       `json:"commands"`
	Rooms    []string       `json:"rooms"` // empty: every room of the project
	Rate     RateInfo       `json:"rate"`
	Max      map[string]int `json:"max,omitempty"`
}

// RateInfo is a Rate in machine values: Events per PerSeconds, Burst at
// once. String gives the policy file's form ("120/min burst 30").
type RateInfo struct {
	Events     int `json:"events"`
	PerSeconds int `json:"per_seconds"`
	Burst      int `json:"burst"`
	r          Rate
}

func (r RateInfo) String() string { return r.r.String() }

func rateInfo(r Rate) RateInfo {
	return RateInfo{Events: r.Events, PerSeconds: int(r.Per / time.Second), Burst: r.Burst, r: r}
}

// nonNil makes an empty list encode as [] rather than null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Projects lists every project in the policy, enabled or not, by ID.
func (p *Policy) Projects() []ProjectInfo {
	out := make([]ProjectInfo, 0, len(p.projects))
	for _, name := range slices.Sorted(maps.Keys(p.projects)) {
		info, _ := p.Project(name)
		out = append(out, info)
	}
	return out
}

// Project returns one project's policy.
func (p *Policy) Project(name string) (ProjectInfo, bool) {
	pr, ok := p.projects[name]
	if !ok {
		return ProjectInfo{}, false
	}
	return ProjectInfo{
		Project:  name,
		Enabled:  pr.enabled,
		Commands: slices.Clone(pr.commands),
		Rooms:    nonNil(slices.Clone(pr.rooms)),
		Rate:     rateInfo(pr.rate),
		Max:      maps.Clone(pr.max),
	}, true
}

// Summary is what the hello frame tells the hub: the enabled projects and
// their commands, by project ID. Rooms and bounds stay on the device.
func (p *Policy) Summary() []relay.ProjectPolicy {
	out := []relay.ProjectPolicy{}
	for _, name := range slices.Sorted(maps.Keys(p.projects)) {
		pr := p.projects[name]
		if pr.enabled {
			out = append(out, relay.ProjectPolicy{Project: name, Commands: slices.Clone(pr.commands)})
		}
	}
	return out
}

// ServesRoom reports whether the device serves room in project: the project
// is enabled and the room is listed (or the project lists none). The room
// directory the hub is told of is exactly these rooms.
func (p *Policy) ServesRoom(project, room string) bool {
	pr, ok := p.projects[project]
	if !ok || !pr.enabled {
		return false
	}
	return len(pr.rooms) == 0 || slices.Contains(pr.rooms, room)
}

// RateOf returns the rate of an enabled project.
func (p *Policy) RateOf(project string) (Rate, bool) {
	pr, ok := p.projects[project]
	if !ok || !pr.enabled {
		return Rate{}, false
	}
	return pr.rate, true
}

// Max returns a project's tightened bound (one of the Bound* names), if any.
// A handler uses it to clamp its defaults, e.g. list_room_apps' page size.
func (p *Policy) Max(project, bound string) (int, bool) {
	pr, ok := p.projects[project]
	if !ok {
		return 0, false
	}
	n, ok := pr.max[bound]
	return n, ok
}

// Pending returns how many proposals callers may leave pending for review
// in one room of project and in the whole project: the policy's
// pending.room and pending.project bounds, else the defaults.
func (p *Policy) Pending(project string) (perRoom, perProject int) {
	perRoom, perProject = DefaultPendingPerRoom, DefaultPendingPerProject
	if n, ok := p.Max(project, BoundPendingRoom); ok {
		perRoom = n
	}
	if n, ok := p.Max(project, BoundPendingProject); ok {
		perProject = n
	}
	return perRoom, perProject
}

// Enable allows project with these commands in these rooms. A nil or empty
// commands means DefaultCommands; nil or empty rooms means every room. It
// replaces the project's commands and rooms and keeps its rate and bounds.
func (p *Policy) Enable(projectID string, commands, rooms []string) error {
	if !validID(projectID) {
		return fmt.Errorf("invalid project id %s: %s", quote(projectID), idRule)
	}
	if len(commands) == 0 {
		commands = DefaultCommands
	}
	var cmds []string
	for _, c := range commands {
		if !relay.KnownCommand(c) {
			return fmt.Errorf("unknown command %s (known: %s)", quote(c), strings.Join(relay.CommandNames(), ", "))
		}
		if !slices.Contains(cmds, c) {
			cmds = append(cmds, c)
		}
	}
	var rs []string
	for _, r := range rooms {
		if !validID(r) {
			return fmt.Errorf("invalid room id %s: %s", quote(r), idRule)
		}
		if !slices.Contains(rs, r) {
			rs = append(rs, r)
		}
	}
	if p.projects == nil {
		p.projects = map[string]*project{}
	}
	pr, ok := p.projects[projectID]
	if !ok {
		pr = &project{rate: DefaultRate}
		p.projects[projectID] = pr
	}
	pr.enabled = true
	pr.commands = sortCommands(cmds)
	sort.Strings(rs)
	pr.rooms = rs
	return nil
}

// Disable stops serving project. Its block stays in the file, marked
// "enabled no", so enabling it again keeps its rate and bounds.
func (p *Policy) Disable(projectID string) error {
	pr, ok := p.projects[projectID]
	if !ok {
		return fmt.Errorf("project %s is not in the policy (see `roomrelay policy show`)", quote(projectID))
	}
	pr.enabled = false
	return nil
}

// Room providers the provider directive selects.
const (
	ProviderBuiltin = "builtin"
	ProviderApp     = "app"
)

// Provider is the room provider the owner selected: ProviderApp or
// ProviderBuiltin (the default).
func (p *Policy) Provider() string {
	if p == nil || p.provider == "" {
		return ProviderBuiltin
	}
	return p.provider
}

// SetProvider selects the room provider (ProviderApp or ProviderBuiltin),
// written as the provider directive; anything else is a *RuleError.
func (p *Policy) SetProvider(kind string) error {
	if kind != ProviderBuiltin && kind != ProviderApp {
		return ruleErr("the room provider is %q or %q, not %q", ProviderBuiltin, ProviderApp, kind)
	}
	p.provider = kind
	return nil
}

// Notifications reports whether the agent notifies the desktop user of a
// proposal waiting for review (the notify directive; on unless "notify off").
func (p *Policy) Notifications() bool {
	return p == nil || p.notify != "off"
}

func sortCommands(cmds []string) []string {
	order := relay.CommandNames()
	slices.SortFunc(cmds, func(a, b string) int { return slices.Index(order, a) - slices.Index(order, b) })
	return cmds
}

const idRule = relay.IDRule

func validID(s string) bool { return relay.ValidID(s) }

// quote shows a value from the file or a caller safely in a message.
func quote(s string) string {
	if r := []rune(s); len(r) > 80 {
		s = string(r[:80]) + "…"
	}
	q := strconv.QuoteToGraphic(s)
	return "'" + strings.ReplaceAll(q[1:len(q)-1], `\"`, `"`) + "'"
}

// Marshal writes the policy in the file format, canonically.
func (p *Policy) Marshal() []byte {
	var b bytes.Buffer
	b.WriteString("# roomrelay device policy. Anything not listed here is denied.\n")
	b.WriteString("# Edit with `roomrelay enable|disable`, or by hand (see `roomrelay policy show`).\n")
	b.WriteString("version 1\n")
	if p.inFlight != 0 {
		fmt.Fprintf(&b, "in-flight %d\n", p.inFlight)
	}
	// An explicit "notify on" is kept: the owner chose it, not the default.
	if p.notify != "" {
		fmt.Fprintf(&b, "notify %s\n", p.notify)
	}
	if p.provider != "" {
		fmt.Fprintf(&b, "provider %s\n", p.provider)
	}
	for _, name := range slices.Sorted(maps.Keys(p.projects)) {
		pr := p.projects[name]
		fmt.Fprintf(&b, "\nproject %s\n", name)
		fmt.Fprintf(&b, "  enabled  %s\n", map[bool]string{true: "yes", false: "no"}[pr.enabled])
		if len(pr.commands) > 0 {
			fmt.Fprintf(&b, "  commands %s\n", strings.Join(pr.commands, " "))
		}
		if len(pr.rooms) == 0 {
			b.WriteString("  rooms    *\n")
		} else {
			fmt.Fprintf(&b, "  rooms    %s\n", strings.Join(pr.rooms, " "))
		}
		fmt.Fprintf(&b, "  rate     %s\n", pr.rate)
		for _, k := range slices.Sorted(maps.Keys(pr.max)) {
			fmt.Fprintf(&b, "  max      %s %d\n", k, pr.max[k])
		}
	}
	return b.Bytes()
}
