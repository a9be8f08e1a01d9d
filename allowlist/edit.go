package allowlist

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

// RuleError is an edit the policy's rules refuse (an unknown command, a
// room id that is not one, '*' mixed with rooms, no command left). The CLI
// answers it as a usage error, the local API as invalid_args.
type RuleError struct{ Msg string }

func (e *RuleError) Error() string { return e.Msg }

func ruleErr(format string, args ...any) error { return &RuleError{Msg: fmt.Sprintf(format, args...)} }

// EnableRequest is what `roomrelay enable` and the local API's enable route
// ask for: commands to add (Allow), to remove (Deny), or the whole list
// (Only, which stands alone); Rooms nil keeps the project's rooms (every
// room for a new project), ["*"] is every room, else the room ids.
type EnableRequest struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	Only  []string `json:"only,omitempty"`
	Rooms []string `json:"rooms,omitempty"`
}

// ApplyEnable enables project with the commands and rooms req works out
// from what the project has (a project new to the policy starts with
// DefaultCommands and every room). It returns the project as it was.
// Both the CLI and the local API call it, so their rules are one.
func (p *Policy) ApplyEnable(project string, req EnableRequest) (before ProjectInfo, existed bool, err error) {
	if len(req.Only) > 0 && (len(req.Allow) > 0 || len(req.Deny) > 0) {
		return before, false, ruleErr("--only replaces the list: give it alone, without --allow or --deny")
	}
	for _, c := range slices.Concat(req.Allow, req.Deny, req.Only) {
		if !relay.KnownCommand(c) {
			return before, false, ruleErr("unknown command %s (known: %s)", quote(c), strings.Join(relay.CommandNames(), ", "))
		}
	}
	before, existed = p.Project(project)
	cmds := slices.Clone(DefaultCommands)
	var rooms []string
	if existed {
		cmds, rooms = slices.Clone(before.Commands), slices.Clone(before.Rooms)
	}
	if len(req.Only) > 0 {
		cmds = slices.Clone(req.Only)
	}
	for _, c := range req.Allow {
		if !slices.Contains(cmds, c) {
			cmds = append(cmds, c)
		}
	}
	cmds = slices.DeleteFunc(cmds, func(c string) bool { return slices.Contains(req.Deny, c) })
	if len(cmds) == 0 {
		return before, existed, ruleErr("that leaves no command allowed; to stop serving the project, run `roomrelay disable PROJECT`")
	}
	if req.Rooms != nil {
		if rooms, err = roomList(req.Rooms); err != nil {
			return before, existed, err
		}
	}
	if err := p.Enable(project, cmds, rooms); err != nil {
		return before, existed, &RuleError{Msg: err.Error()}
	}
	return before, existed, nil
}

// roomList reads a rooms list: ["*"] (or empty) is every room (nil).
func roomList(rs []string) ([]string, error) {
	if slices.Contains(rs, "*") {
		if len(rs) > 1 {
			return nil, ruleErr("'*' (every room) stands alone")
		}
		return nil, nil
	}
	for _, r := range rs {
		if !validID(r) {
			return nil, ruleErr("invalid room id %s: %s", quote(r), idRule)
		}
	}
	return slices.Clone(rs), nil
}

// ProjectSpec is a project's whole policy as the local API's PUT sets it.
type ProjectSpec struct {
	Enabled  bool     `json:"enabled"`
	Commands []string `json:"commands"`
	// Rooms: empty or ["*"] is every room.
	Rooms []string `json:"rooms"`
	// Rate nil keeps the project's (DefaultRate for a new one).
	Rate *RateInfo `json:"rate,omitempty"`
	// Max replaces the project's tightened bounds (nil: none).
	Max map[string]int `json:"max,omitempty"`
}

// SetProject replaces project's policy with spec, under the rules the file
// parser applies (known commands, each once; room ids; '*' alone; rate and
// bounds in range). On an error p is unchanged.
func (p *Policy) SetProject(projectID string, spec ProjectSpec) error {
	if !validID(projectID) {
		return ruleErr("invalid project id %s: %s", quote(projectID), idRule)
	}
	var cmds []string
	for _, c := range spec.Commands {
		if !relay.KnownCommand(c) {
			return ruleErr("unknown command %s (known: %s)", quote(c), strings.Join(relay.CommandNames(), ", "))
		}
		if slices.Contains(cmds, c) {
			return ruleErr("command %s listed twice", quote(c))
		}
		cmds = append(cmds, c)
	}
	if spec.Enabled && len(cmds) == 0 {
		return ruleErr("an enabled project needs at least one command")
	}
	rooms, err := roomList(spec.Rooms)
	if err != nil {
		return err
	}
	for i, r := range rooms {
		if slices.Contains(rooms[:i], r) {
			return ruleErr("room %s listed twice", quote(r))
		}
	}
	rate := DefaultRate
	if cur, ok := p.projects[projectID]; ok {
		rate = cur.rate
	}
	if spec.Rate != nil {
		unit, ok := unitNames[time.Duration(spec.Rate.PerSeconds)*time.Second]
		if !ok {
			return ruleErr("rate: per_seconds must be 1, 60 or 3600, not %d", spec.Rate.PerSeconds)
		}
		r, err := parseRate([]string{strconv.Itoa(spec.Rate.Events) + "/" + unit, "burst", strconv.Itoa(spec.Rate.Burst)})
		if err != nil {
			return ruleErr("rate: %v", err)
		}
		rate = r
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Max)) {
		ceiling, ok := boundCeiling[k]
		if !ok {
			return ruleErr("unknown bound %s (known: %s, %s, %s)", quote(k), BoundListLimit, BoundSnippetFiles, BoundSnippetBytes)
		}
		if v := spec.Max[k]; v < 1 || v > ceiling {
			return ruleErr("%s must be a whole number from 1 to %d, not %d", k, ceiling, v)
		}
	}
	if p.projects == nil {
		p.projects = map[string]*project{}
	}
	slices.Sort(rooms)
	var max map[string]int
	if len(spec.Max) > 0 {
		max = maps.Clone(spec.Max)
	}
	p.projects[projectID] = &project{enabled: spec.Enabled, commands: sortCommands(cmds), rooms: rooms, rate: rate, max: max}
	return nil
}
