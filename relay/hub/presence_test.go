package hub

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// presenceWrites counts the writes to dev's presence key that w saw, up to
// the key's current revision.
func presenceWrites(t *testing.T, th *testHub, w jetstream.KeyWatcher, dev string, from uint64) int {
	t.Helper()
	e, err := th.Hub.st.presence.Get(context.Background(), dev)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rev := from; rev < e.Revision(); {
		select {
		case u := <-w.Updates():
			if u == nil {
				continue
			}
			n, rev = n+1, u.Revision()
		case <-time.After(30 * time.Second):
			t.Fatalf("the watch delivered %d writes, none up to revision %d", n, e.Revision())
		}
	}
	return n
}

// TestPresenceNotRewrittenEveryHeartbeat: a connected idle device's presence
// record is written at connect and then once per presenceRefresh, not every
// heartbeat (node liveness tells a crashed node's devices apart; the
// per-heartbeat rewrite was most of an idle node's KV writes and garbage),
// and it reads online all along. The test drives the heartbeat ticks itself
// on a fake clock. Checked failing with the per-heartbeat rewrite back
// (refreshDue always true: 48 writes).
func TestPresenceNotRewrittenEveryHeartbeat(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	// The hub's own tick never comes within the test.
	th := startHub(t, Config{Heartbeat: time.Hour, Now: clock})
	dev, tok := th.enroll("p1")
	a := dialAgent(t, th.wsURL(), tok, dev)
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)

	ctx := context.Background()
	e, err := th.Hub.st.presence.Get(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	w, err := th.Hub.st.presence.Watch(ctx, dev, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	const beat = 25 * time.Second // the default heartbeat
	ticks := int(2 * presenceRefresh / beat)
	for i := range ticks {
		now.Add(int64(beat))
		th.Hub.refreshTick(ctx, false)
		if p := th.presence(dev); p.State != hubapi.StateOnline {
			t.Fatalf("after %d heartbeats the connected device reads %s", i+1, p.State)
		}
	}
	if got := presenceWrites(t, th, w, dev, e.Revision()); got != 2 {
		t.Fatalf("%d presence writes over %d heartbeats (%s), want 2 (one per %s)", got, ticks, time.Duration(ticks)*beat, presenceRefresh)
	}
}

// TestFailedOfflineWriteIsRetried: when the offline write at a session's
// end fails (here: the presence stream refuses every message as too
// large), the record still says online; the next heartbeat tick writes it
// again, and the device reads offline. Checked failing without the retry
// (noteOfflineUnwritten a no-op).
func TestFailedOfflineWriteIsRetried(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{Heartbeat: time.Hour})
	dev, tok := th.enroll("p1")
	a := dialAgent(t, th.wsURL(), tok, dev)
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)

	ctx := context.Background()
	stream, err := th.Hub.js.Stream(ctx, "KV_"+bucketPresence)
	if err != nil {
		t.Fatal(err)
	}
	setMaxMsgSize := func(n int32) {
		t.Helper()
		cfg := stream.CachedInfo().Config
		cfg.MaxMsgSize = n
		if _, err := th.Hub.js.UpdateStream(ctx, cfg); err != nil {
			t.Fatalf("set the presence stream's max message size to %d: %v", n, err)
		}
	}
	setMaxMsgSize(16)
	a.conn.Close()
	waitFor(t, "the session ended", func() bool { return len(th.Hub.localSessions(dev)) == 0 })
	if p := th.presence(dev); p.State != hubapi.StateOnline {
		t.Fatalf("with the offline write refused the device reads %s; the test needs the write to fail", p.State)
	}
	setMaxMsgSize(-1)
	th.Hub.refreshTick(ctx, false)
	if p := th.presence(dev); p.State != hubapi.StateOffline || p.LastSeen.IsZero() {
		t.Fatalf("after the next tick the ended session's device reads %+v, want offline with last_seen", p)
	}
	th.Hub.mu.Lock()
	left := len(th.Hub.unwritten)
	th.Hub.mu.Unlock()
	if left != 0 {
		t.Errorf("%d offline writes still waiting after they landed", left)
	}
}

// TestKickMissedWhileCutOffClosesTheSession: node a is cut off from NATS
// while the device connects again through node b, so b's kick never
// reaches a. Once a is back it rewrites its sessions' presence at once, the
// compare-and-set fails, and the superseded session closes with 4001
// (replaced) instead of serving until its record's next refresh, 10 minutes
// on. Checked failing with the rewrite after a reconnect removed.
func TestKickMissedWhileCutOffClosesTheSession(t *testing.T) {
	t.Parallel()
	c := startCutOffPair(t)
	a, b, dev, tok, old := c.a, c.b, c.dev, c.tok, c.agent

	c.cut(t)
	newer := dialAgent(t, b.wsURL(), tok, dev)
	newer.serve(echoHandler)
	waitFor(t, "the newer session online on b", func() bool {
		p := b.presence(dev)
		return p.State == hubapi.StateOnline && p.Session == newer.welcome.SessionID
	})
	select {
	case <-old.done:
		t.Fatal("the old session closed while its node was cut off: the test no longer covers a missed kick")
	default:
	}
	c.heal()
	select {
	case <-old.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the superseded session on a still serves 30 s after a reconnected")
	}
	if code, reason := old.closeCode(); code != relay.CloseReplaced {
		t.Fatalf("the superseded session closed with %d %q, want %d", code, reason, relay.CloseReplaced)
	}
	b.roundTrip(dev)
	a.stop() // while NATS is up: cleanups would stop the server first
	b.stop()
}

// TestRestartedNodesEarlierSessionsReadOffline: node a crashes with a
// device online on it (no offline write) and is started again under its
// name, as a supervisor restarts it, long before the record's 10-minute
// bound. Once the other nodes hear the new run beat, the device, which has
// not come back, reads offline there and on the new run at once: the record
// names the run that wrote it (node_started), and that run is gone.
// Checked failing without the run check (it read online on a's new run).
func TestRestartedNodesEarlierSessionsReadOffline(t *testing.T) {
	t.Parallel()
	url := startExternalNATS(t)
	beat := 100 * time.Millisecond
	a := startHub(t, Config{NATSURL: url, NodeName: "a", NodeBeat: beat})
	b := startHub(t, Config{NATSURL: url, NodeName: "b", NodeBeat: beat})
	dev, tok := a.enroll("p1")
	ag := dialAgent(t, a.wsURL(), tok, dev)
	ag.serve(echoHandler)
	waitFor(t, "online on a as b sees it", func() bool { p := b.presence(dev); return p.State == hubapi.StateOnline && p.Node == "a" })

	// The crash: a's NATS connection ends as a killed process's does, and
	// so does the agent's socket; nothing writes offline.
	a.Hub.nc.Close()
	ag.conn.Close()
	a2 := startHub(t, Config{NATSURL: url, NodeName: "a", NodeBeat: beat})
	for _, th := range []*testHub{b, a2} {
		waitFor(t, "the new run of a beating as "+th.Hub.cfg.NodeName+" hears it", func() bool {
			th.Hub.nodes.mu.Lock()
			n := th.Hub.nodes.m[nodeKey("a")]
			th.Hub.nodes.mu.Unlock()
			return n.started.Equal(a2.Hub.incarnation) && time.Since(n.heard) < 2*beat
		})
		if p := th.presence(dev); p.State != hubapi.StateOffline || p.LastSeen.IsZero() {
			t.Fatalf("on %s the device of a's crashed run reads %+v, want offline with last_seen", th.Hub.cfg.NodeName, p)
		}
	}
}
