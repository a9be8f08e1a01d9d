package audit

import (
	"encoding/json"
	"path/filepath"
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

// Filter selects entries; zero fields match everything.
type Filter struct {
	Project string
	Since   time.Time // entries at or after Since
	Limit   int       // at most this many, the most recent (0: all)
}

// Query returns the entries of the kept log in dir that match f, oldest
// first. Lines that are not audit lines are skipped; Verify reports them.
func Query(dir string, f Filter) ([]Entry, error) {
	m, err := readManifest(dir)
	if err != nil {
		return nil, err
	}
	rot, err := rotatedFiles(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, r := range rot {
		if r.firstSeq > m.AnchorSeq {
			names = append(names, r.name)
		}
	}
	names = append(names, CurrentFile)
	var out []Entry
	for _, name := range names {
		lines, _, err := readLines(filepath.Join(dir, name))
		if err != nil {
			if name == CurrentFile {
				continue // rotated meanwhile or never written
			}
			return nil, err
		}
		for _, ln := range lines {
			e, _, ok := parseLine(ln)
			if !ok || (f.Project != "" && e.Project != f.Project) || e.Time.Before(f.Since) {
				continue
			}
			out = append(out, e)
		}
	}
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[len(out)-f.Limit:]
	}
	return out, nil
}

// Query returns matching entries; see the package-level Query.
func (l *Log) Query(f Filter) ([]Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Query(l.dir, f)
}

// deniedCodes are the errors with which the agent refuses a command before
// running it. Any other outcome means the command was allowed to run.
var deniedCodes = map[relay.Code]bool{
	relay.CodeNotEnrolled:       true,
	relay.CodeProjectNotEnabled: true,
	relay.CodeCommandNotAllowed: true,
	relay.CodeInvalidArgs:       true,
	relay.CodeRateLimited:       true,
	relay.CodeExpired:           true,
	relay.CodeBusy:              true,
}

// FromCommand builds the entry for a command and its result. The room is
// taken from the command's room_id argument, if it has one. A not_found
// from the allowlist's room filter looks like any other not_found here;
// a caller that knows it was a policy refusal sets Decision to Denied.
func FromCommand(cmd *relay.Command, res *relay.Result, dur time.Duration) Entry {
	e := Entry{CommandID: cmd.ID, Project: cmd.ProjectID, Command: cmd.Name, Decision: Allowed,
		DurationMS: dur.Milliseconds()}
	var args struct {
		RoomID string `json:"room_id"`
	}
	if len(cmd.Args) > 0 && json.Unmarshal(cmd.Args, &args) == nil {
		e.Room = args.RoomID
	}
	if res != nil && res.Error != nil {
		e.ErrorCode = string(res.Error.Code)
		if deniedCodes[res.Error.Code] {
			e.Decision = Denied
		}
	}
	return e
}
