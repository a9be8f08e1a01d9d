package allowlist

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/roomrelay/roomrelay/internal/keyrate"
	"github.com/roomrelay/roomrelay/relay"
)

// Decide says whether project may run command in roomID with args, and
// returns nil or a *relay.Error. Checks run in this order, so that what a
// denial reveals never goes beyond what the caller was allowed to learn:
//
//  1. project_not_enabled: the project is not in the policy or not enabled;
//  2. command_not_allowed: the command is not listed for it (unknown names
//     included);
//  3. not_found: the project lists rooms and this is not one of them; the
//     error is relay.RoomNotFound, word for word what a missing room gets;
//  4. invalid_args: an argument is over the project's tightened bound.
//
// The room is args' room_id, the one the handler will touch, so the policy
// and the handler cannot be given different rooms. Decide judges only the policy: the arguments' schema
// and rules are relay.ValidateArgs' job, to be run after Decide; rates are
// the Limiter's.
func (p *Policy) Decide(projectID, command string, args json.RawMessage) error {
	pr, ok := p.projects[projectID]
	if !ok || !pr.enabled {
		return relay.Errorf(relay.CodeProjectNotEnabled, "project %s is not enabled on this device", quote(projectID))
	}
	if !slices.Contains(pr.commands, command) {
		return relay.Errorf(relay.CodeCommandNotAllowed, "command %s is not allowed for project %s on this device", quote(command), quote(projectID))
	}
	var fields map[string]json.RawMessage
	if len(bytes.TrimSpace(args)) > 0 {
		if err := json.Unmarshal(args, &fields); err != nil {
			return relay.Errorf(relay.CodeInvalidArgs, "args must be a JSON object")
		}
	}
	var room string
	if raw, ok := fields["room_id"]; ok {
		if err := json.Unmarshal(raw, &room); err != nil {
			return relay.Errorf(relay.CodeInvalidArgs, "room_id must be a string")
		}
	}
	if len(pr.rooms) > 0 && !slices.Contains(pr.rooms, room) {
		return relay.RoomNotFound(room)
	}
	return pr.checkBounds(projectID, command, fields)
}

// checkBounds enforces the "max" lines. Values of the wrong type are left
// for the schema to refuse.
func (pr *project) checkBounds(projectID, command string, fields map[string]json.RawMessage) error {
	switch command {
	case relay.CmdListRoomApps:
		max, ok := pr.max[BoundListLimit]
		var limit float64
		if ok && json.Unmarshal(fields["limit"], &limit) == nil && limit > float64(max) {
			return relay.Errorf(relay.CodeInvalidArgs,
				"limit %v is over this device's maximum of %d for project %s", limit, max, quote(projectID))
		}
	case relay.CmdProposeRoomSnippetApp:
		var files map[string]json.RawMessage
		if json.Unmarshal(fields["files"], &files) != nil {
			return nil
		}
		if max, ok := pr.max[BoundSnippetFiles]; ok && len(files) > max {
			return relay.Errorf(relay.CodeInvalidArgs,
				"too many files (%d, at most %d for project %s on this device): propose a pinned repository version with %s instead",
				len(files), max, quote(projectID), relay.CmdProposeRoomRepoApp)
		}
		if max, ok := pr.max[BoundSnippetBytes]; ok {
			total := 0
			for _, raw := range files {
				var s string
				if json.Unmarshal(raw, &s) == nil {
					total += len(s)
				}
			}
			if total > max {
				return relay.Errorf(relay.CodeInvalidArgs,
					"files too large in total (%d bytes, at most %d for project %s on this device): propose a pinned repository version with %s instead",
					total, max, quote(projectID), relay.CmdProposeRoomRepoApp)
			}
		}
	}
	return nil
}

// Limiter applies each enabled project's rate: a token bucket per project
// and kind (reads, writes),
// filled at Rate.Events per Rate.Per up to Rate.Burst. It is safe for
// concurrent use. The clock is injected so tests need not wait.
type Limiter struct {
	buckets *keyrate.Buckets
}

// NewLimiter returns a Limiter reading time from now (time.Now if nil).
func NewLimiter(now func() time.Time) *Limiter {
	// The keys are the policy's projects (twice) and one for refusals: the
	// policy bounds them.
	return &Limiter{buckets: keyrate.New(0, now)}
}

// Allow takes one token from the bucket of project's reads or of its
// writes (by command) under p's current rate, or returns rate_limited
// saying when to retry. Reads and writes have a bucket each, with the
// project's rate, so a run of proposals never starves reads and the other
// way round. A project p does not
// enable shares one device-wide bucket of refusals at DefaultRate. Call it
// before Decide, so that refused commands count too: a caller cannot send
// refusals (each one audited) faster than allowed ones. A policy reload
// keeps the buckets; a lower burst caps what a bucket holds.
func (l *Limiter) Allow(p *Policy, projectID, command string) error {
	kind := "writes"
	if relay.ReadOnlyCommand(command) {
		kind = "reads"
	}
	key := projectID + "\x00" + kind
	r, served := p.RateOf(projectID)
	if !served {
		// Not enabled here: Decide refuses it; the refusal is still counted.
		// The error names no project, so it reveals nothing about it.
		r, key, kind = DefaultRate, "\x00refused", "commands of projects not served here"
	}
	if ok, wait := l.buckets.Take(key, keyrate.Per(r.Events, r.Per, r.Burst), 1); !ok {
		return refuse(served, projectID, kind, r, wait)
	}
	return nil
}

// refuse is the rate_limited answer, saying when to retry.
func refuse(served bool, projectID, kind string, r Rate, wait time.Duration) error {
	if !served {
		return relay.Errorf(relay.CodeRateLimited, "this device's rate of %s for %s was reached; retry in %s", r, kind, roundUp(wait))
	}
	return relay.Errorf(relay.CodeRateLimited, "project %s is over this device's rate of %s for %s; retry in %s",
		quote(projectID), r, kind, roundUp(wait))
}

// roundUp shows a wait in whole seconds (at least 1s), never promising too early.
func roundUp(d time.Duration) string {
	s := (d + time.Second - 1) / time.Second
	return fmt.Sprintf("%ds", max(s, 1))
}
