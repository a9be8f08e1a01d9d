package allowlist

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/roomrelay/roomrelay/relay"
)

// ParseError is a policy file problem at one line and directive.
type ParseError struct {
	Line      int    // 1-based; 0 for the file as a whole
	Directive string // "commands", "rate", ...; "" when the line has none
	Msg       string
}

func (e *ParseError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Directive != "" {
		b.WriteString(e.Directive + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// maxPolicyBytes keeps a runaway file from being read whole into memory
// line by line; a real policy is a few hundred bytes.
const maxPolicyBytes = 1 << 20

const maxCount = 1000000

// Parse reads a policy file. See the package doc for the format.
func Parse(data []byte) (*Policy, error) {
	if len(data) > maxPolicyBytes {
		return nil, &ParseError{Msg: fmt.Sprintf("file is %d bytes, more than %d", len(data), maxPolicyBytes)}
	}
	if !utf8.Valid(data) {
		return nil, &ParseError{Msg: "file is not valid UTF-8"}
	}
	ps := &parser{pol: New(), seen: map[string]int{}}
	for i, line := range strings.Split(string(data), "\n") {
		if err := ps.line(i+1, line); err != nil {
			return nil, err
		}
	}
	if err := ps.endProject(); err != nil {
		return nil, err
	}
	return ps.pol, nil
}

type parser struct {
	pol      *Policy
	seen     map[string]int // project -> line of its "project" directive
	version  bool
	inFlight bool
	notify   bool
	provider bool

	// the project being read
	name      string
	cur       *project
	line0     int            // its "project" line
	got       map[string]int // directive -> first line, for the once-only ones
	rateLine  int
	roomsStar bool
}

func (ps *parser) line(n int, text string) error {
	fields := strings.FieldsFunc(text, func(r rune) bool { return r == ' ' || r == '\t' || r == '\r' })
	for i, f := range fields {
		if strings.HasPrefix(f, "#") {
			fields = fields[:i]
			break
		}
	}
	if len(fields) == 0 {
		return nil
	}
	dir, args := fields[0], fields[1:]
	fail := func(format string, a ...any) error {
		return &ParseError{Line: n, Directive: dir, Msg: fmt.Sprintf(format, a...)}
	}
	for _, f := range fields {
		for _, r := range f {
			if r < 0x20 || r == 0x7f {
				return fail("control character %U", r)
			}
		}
	}
	switch dir {
	case "version":
		if ps.version || ps.cur != nil || len(ps.seen) > 0 {
			return fail("only once, before the first project")
		}
		if len(args) != 1 || args[0] != "1" {
			return fail("want 'version 1' (the only version)")
		}
		ps.version = true
		return nil
	case "in-flight":
		if ps.inFlight || ps.cur != nil || len(ps.seen) > 0 {
			return fail("only once, before the first project")
		}
		if len(args) != 1 {
			return fail("want 'in-flight N', N a whole number from 1 to %d", MaxInFlight)
		}
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 1 || n > MaxInFlight {
			return fail("want 'in-flight N', N a whole number from 1 to %d", MaxInFlight)
		}
		ps.inFlight = true
		ps.pol.inFlight = n
		return nil
	case "notify":
		if ps.notify || ps.cur != nil || len(ps.seen) > 0 {
			return fail("only once, before the first project")
		}
		if len(args) != 1 || (args[0] != "on" && args[0] != "off") {
			return fail("want 'notify on' or 'notify off'")
		}
		ps.notify = true
		ps.pol.notify = args[0]
		return nil
	case "provider":
		if ps.provider || ps.cur != nil || len(ps.seen) > 0 {
			return fail("only once, before the first project")
		}
		if len(args) != 1 || (args[0] != ProviderBuiltin && args[0] != ProviderApp) {
			return fail("want 'provider builtin' or 'provider app'")
		}
		ps.provider = true
		ps.pol.provider = args[0]
		return nil
	case "project":
		if err := ps.endProject(); err != nil {
			return err
		}
		if len(args) != 1 {
			return fail("want 'project ID'")
		}
		if !validID(args[0]) {
			return fail("invalid project id %s: %s", quote(args[0]), idRule)
		}
		if first, dup := ps.seen[args[0]]; dup {
			return fail("project %s already defined at line %d", quote(args[0]), first)
		}
		ps.seen[args[0]] = n
		ps.name, ps.line0 = args[0], n
		ps.cur = &project{rate: DefaultRate}
		ps.got = map[string]int{}
		ps.rateLine, ps.roomsStar = 0, false
		return nil
	case "enabled", "commands", "rooms", "rate", "max":
		if ps.cur == nil {
			return fail("outside a project block (start one with 'project ID')")
		}
	default:
		dir = "" // not a directive, so not a prefix for the message
		return fail("unknown directive %s (want version, in-flight, notify, provider, project, enabled, commands, rooms, rate, max)", quote(fields[0]))
	}
	pr := ps.cur
	once := func() error {
		if first, dup := ps.got[dir]; dup {
			return fail("given twice in project %s (first at line %d)", quote(ps.name), first)
		}
		ps.got[dir] = n
		return nil
	}
	switch dir {
	case "enabled":
		if err := once(); err != nil {
			return err
		}
		if len(args) != 1 || (args[0] != "yes" && args[0] != "no") {
			return fail("want 'enabled yes' or 'enabled no'")
		}
		pr.enabled = args[0] == "yes"
	case "commands":
		if len(args) == 0 {
			return fail("name at least one command")
		}
		for _, c := range args {
			if !relay.KnownCommand(c) {
				return fail("unknown command %s (known: %s)", quote(c), strings.Join(relay.CommandNames(), ", "))
			}
			if slices.Contains(pr.commands, c) {
				return fail("%s listed twice", quote(c))
			}
			pr.commands = append(pr.commands, c)
		}
	case "rooms":
		if len(args) == 0 {
			return fail("name at least one room, or '*' for every room")
		}
		for _, r := range args {
			if r == "*" {
				if ps.roomsStar || len(pr.rooms) > 0 || len(args) > 1 {
					return fail("'*' (every room) stands alone")
				}
				ps.roomsStar = true
				continue
			}
			if ps.roomsStar {
				return fail("'*' (every room) stands alone")
			}
			if !validID(r) {
				return fail("invalid room id %s: %s", quote(r), idRule)
			}
			if slices.Contains(pr.rooms, r) {
				return fail("room %s listed twice", quote(r))
			}
			pr.rooms = append(pr.rooms, r)
		}
	case "rate":
		if err := once(); err != nil {
			return err
		}
		r, err := parseRate(args)
		if err != nil {
			return fail("%v", err)
		}
		pr.rate = r
	case "max":
		if len(args) != 2 {
			return fail("want 'max COMMAND.ARG N'")
		}
		ceiling, ok := boundCeiling[args[0]]
		if !ok {
			return fail("unknown bound %s (known: %s, %s, %s, %s, %s)", quote(args[0]), BoundListLimit, BoundSnippetFiles, BoundSnippetBytes, BoundPendingRoom, BoundPendingProject)
		}
		if _, dup := pr.max[args[0]]; dup {
			return fail("%s given twice in project %s", args[0], quote(ps.name))
		}
		v, err := strconv.Atoi(args[1])
		if err != nil || v < 1 || v > ceiling {
			return fail("%s must be a whole number from 1 to %d, not %s", args[0], ceiling, quote(args[1]))
		}
		if pr.max == nil {
			pr.max = map[string]int{}
		}
		pr.max[args[0]] = v
	}
	return nil
}

// endProject checks the block just read and adds it to the policy.
func (ps *parser) endProject() error {
	if ps.cur == nil {
		return nil
	}
	if _, ok := ps.got["enabled"]; !ok {
		return &ParseError{Line: ps.line0, Directive: "project",
			Msg: fmt.Sprintf("project %s has no 'enabled yes|no' line", quote(ps.name))}
	}
	ps.cur.commands = sortCommands(ps.cur.commands)
	slices.Sort(ps.cur.rooms)
	ps.pol.projects[ps.name] = ps.cur
	ps.cur = nil
	return nil
}

// parseRate reads "N/UNIT [burst M]".
func parseRate(args []string) (Rate, error) {
	if len(args) != 1 && len(args) != 3 {
		return Rate{}, fmt.Errorf("want 'rate N/UNIT' or 'rate N/UNIT burst M', UNIT one of s, min, h")
	}
	num, unit, ok := strings.Cut(args[0], "/")
	if !ok {
		return Rate{}, fmt.Errorf("want N/UNIT, not %s", quote(args[0]))
	}
	var per time.Duration
	for d, name := range unitNames {
		if name == unit {
			per = d
		}
	}
	if per == 0 {
		return Rate{}, fmt.Errorf("unknown unit %s (want s, min or h)", quote(unit))
	}
	events, err := strconv.Atoi(num)
	if err != nil || events < 1 || events > maxCount {
		return Rate{}, fmt.Errorf("events must be a whole number from 1 to %d, not %s", maxCount, quote(num))
	}
	burst := min(events, DefaultRate.Burst)
	if len(args) == 3 {
		if args[1] != "burst" {
			return Rate{}, fmt.Errorf("want 'burst M' after the rate, not %s", quote(args[1]))
		}
		burst, err = strconv.Atoi(args[2])
		if err != nil || burst < 1 || burst > maxCount {
			return Rate{}, fmt.Errorf("burst must be a whole number from 1 to %d, not %s", maxCount, quote(args[2]))
		}
	}
	return Rate{Events: events, Per: per, Burst: burst}, nil
}
