package hub

import (
	"math/rand/v2"
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

// othersAlive reports whether another hub node is alive, so a draining node
// has somewhere to send its agents. When this node's own beats are not
// arriving (its watch is behind), it cannot tell and says yes.
func (t *nodeTable) othersAlive(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.hearsSelfLocked(now) {
		return true
	}
	for k, n := range t.m {
		if k != t.self && !n.gone && now.Sub(n.heard) <= nodeDeadBeats*n.beat {
			return true
		}
	}
	return false
}

// maxDrainAfterMS is the largest delay a drain frame may carry (relay).
const maxDrainAfterMS = int64(time.Hour / time.Millisecond)

// drainAlone ends the sessions of a node with no live peer: a restart of
// the only node, or its end. There is nowhere to move to, so waiting for
// make-before-break would only have every agent retry this node (503)
// until the grace ran out and then come back in one herd. Instead each
// agent is told to come back after DrainGrace (the node's exit and its
// restart) plus its share of DrainSpread, and its socket closes now, so
// the node is gone before the first of them dials again.
func (h *Hub) drainAlone(list []*session) {
	floor, spread := h.cfg.DrainGrace.Milliseconds(), h.cfg.DrainSpread.Milliseconds()
	for _, s := range list {
		after := min(floor+rand.Int64N(spread+1), maxDrainAfterMS)
		s.send(&relay.Drain{AfterMS: after, Reason: "hub node shutting down"})
	}
	for _, s := range list {
		s.closeWith(relay.CloseGoingAway, "hub node shutting down; reconnect after the drain delay")
	}
}
