package daemon

import (
	"sync"

	"github.com/roomrelay/roomrelay/allowlist"
)

// verdicts remembers the commands the guard's policy and schema checks
// allowed, so the same command again (a caller polling read_room on one
// room) skips them: both decode the arguments with reflection, about a
// fifth of the agent's CPU per read. The two checks depend on nothing but
// the policy, the project, the command name and the argument bytes, so a
// verdict is kept under exactly those: a new policy drops them all (the
// daemon's policy is never edited in place: an edit writes the file, and
// reloadPolicy stores a freshly loaded *Policy). Refusals are not kept (they run the checks
// again, and say why each time), and neither are the rate limit or the
// damaged-store check, which the guard runs for every command.
type verdicts struct {
	mu     sync.Mutex
	policy *allowlist.Policy // what ok was decided under
	ok     map[verdictKey]struct{}
}

type verdictKey struct{ project, command, args string }

// Bounds: the arguments come from the network, so only small ones are
// kept, and at most maxVerdicts of them (past it, none is added until the
// policy changes).
const (
	maxVerdicts    = 256
	maxVerdictArgs = 512
)

// allowed reports whether the command was allowed under p before.
func (v *verdicts) allowed(p *allowlist.Policy, k verdictKey) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.policy != p {
		return false
	}
	_, ok := v.ok[k]
	return ok
}

// remember keeps that the command was allowed under p.
func (v *verdicts) remember(p *allowlist.Policy, k verdictKey) {
	if len(k.args) > maxVerdictArgs {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.policy != p || v.ok == nil {
		v.policy = p
		v.ok = make(map[verdictKey]struct{})
	}
	if len(v.ok) < maxVerdicts {
		v.ok[k] = struct{}{}
	}
}
