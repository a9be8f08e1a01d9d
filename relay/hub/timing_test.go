package hub

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// Socket-free tests of the hub's time-dependent rules, in virtual time:
// node liveness and presence staleness (the newest-session rule has its
// own in dispatch_test.go). The socket tests (hub_test.go, session_test.go,
// e2e) stay the faithful ones.

// TestNodeDiesAfterMissedBeats: a peer is alive while its beats arrive,
// dead after nodeDeadBeats missed ones, gone at once when it said so; and a
// node that does not hear its own beats has no opinion.
func TestNodeDiesAfterMissedBeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tab := &nodeTable{self: nodeKey("a")}
		beat := time.Second
		hear := func(node string) { tab.set(nodeKey(node), nodeSeen{heard: time.Now(), beat: beat}) }
		hear("a")
		hear("b")
		if dead, _ := tab.dead("b", time.Now()); dead {
			t.Fatal("a peer that just beat is dead")
		}
		// b stops; a keeps beating.
		for range nodeDeadBeats {
			time.Sleep(beat)
			hear("a")
		}
		if dead, _ := tab.dead("b", time.Now()); dead {
			t.Fatalf("dead after exactly %d missed beats; the rule is more than that", nodeDeadBeats)
		}
		time.Sleep(beat / 2)
		hear("a")
		dead, at := tab.dead("b", time.Now())
		if !dead || at.IsZero() {
			t.Fatalf("b after %v of silence: dead=%v", time.Duration(nodeDeadBeats)*beat+beat/2, dead)
		}
		// If a stops hearing itself (its watch stalled), it judges nobody.
		time.Sleep(time.Duration(nodeDeadBeats+1) * beat)
		if dead, _ := tab.dead("b", time.Now()); dead {
			t.Error("a node deaf to its own beats declared a peer dead")
		}
		// A node that deleted its record is gone at once.
		hear("a")
		tab.set(nodeKey("c"), nodeSeen{heard: time.Now(), beat: beat, gone: true})
		if dead, _ := tab.dead("c", time.Now()); !dead {
			t.Error("a node that said goodbye is not dead")
		}
		if dead, _ := tab.dead("never-heard", time.Now()); dead {
			t.Error("a node never heard of is dead (it may predate liveness records)")
		}
	})
}

// TestPresenceGoesStale: an online record that stops being refreshed reads
// offline once its staleness bound passes, from its last refresh.
func TestPresenceGoesStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := New(Config{DataDir: t.TempDir(), AdminToken: "rra_t", Heartbeat: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		p := &presenceRec{State: hubapi.StateOnline, Session: "s1", Node: "n1", Since: start, LastSeen: start, Refreshed: start}
		stale := h.staleAfter()
		time.Sleep(stale)
		if got := h.effectivePresence(p); got.State != hubapi.StateOnline {
			t.Fatalf("at the bound (%v) the device reads %s", stale, got.State)
		}
		time.Sleep(time.Millisecond)
		got := h.effectivePresence(p)
		if got.State != hubapi.StateOffline || !got.Since.Equal(start) || !got.LastSeen.Equal(start) {
			t.Fatalf("past the bound: %+v, want offline since the last refresh", got)
		}
		// A record's own bound (an agent with a longer heartbeat) wins.
		p.StaleAfterMS = (2 * stale).Milliseconds()
		if got := h.effectivePresence(p); got.State != hubapi.StateOnline {
			t.Errorf("with its own bound of %v the device reads %s", 2*stale, got.State)
		}
	})
}

// TestDeadNodeDeviceLastSeen: a device whose node died reads offline with
// last_seen at the node's last beat, not at its record's last write (an
// online record is rewritten only every presenceRefresh). Checked failing
// with last_seen taken from the record alone.
func TestDeadNodeDeviceLastSeen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := New(Config{DataDir: t.TempDir(), AdminToken: "rra_t", NodeName: "a"})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		p := &presenceRec{State: hubapi.StateOnline, Session: "s1", Node: "b", Since: start, LastSeen: start, Refreshed: start,
			StaleAfterMS: h.presenceStaleAfter().Milliseconds()}
		beat := time.Second
		hear := func(node string) { h.nodes.set(nodeKey(node), nodeSeen{heard: time.Now(), beat: beat}) }
		for range 300 { // b holds the socket for 5 minutes without rewriting the record
			time.Sleep(beat)
			hear("a")
			hear("b")
		}
		lastBeat := time.Now()
		if got := h.effectivePresence(p); got.State != hubapi.StateOnline {
			t.Fatalf("while b beats the device reads %s", got.State)
		}
		for range nodeDeadBeats + 1 {
			time.Sleep(beat)
			hear("a")
		}
		got := h.effectivePresence(p)
		if got.State != hubapi.StateOffline || !got.Since.Equal(lastBeat) || !got.LastSeen.Equal(lastBeat) {
			t.Fatalf("after b died: %+v, want offline since and last seen at its last beat %s", got, lastBeat)
		}
	})
}
