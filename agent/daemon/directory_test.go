package daemon

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
)

// TestHelloDoesNotHideALaterChange: a rooms_changed event queued while
// offline is delivered after the next hello, so the hub ends on the
// event's list. When the store changed between the two, the next change
// check must queue the newer list again even though the hello carried it
// (CI caught the hub left on one room of two).
func TestHelloDoesNotHideALaterChange(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	ctx := context.Background()
	pol := "version 1\nproject p\n  enabled yes\n  commands read_room\n"
	if err := os.WriteFile(d.policyPath(), []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	d.poke(ctx, false)
	if _, err := d.store.CreateProject(ctx, "p", "p"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"room-1", "room-2"} {
		if _, err := d.store.CreateRoom(ctx, rooms.NewRoom{ID: id, ProjectID: "p", Name: id}); err != nil {
			t.Fatal(err)
		}
		if id == "room-1" {
			d.announceRooms(ctx) // offline: queued, delivered after the next hello
		}
	}
	if hello := d.directory(ctx); len(hello) != 2 {
		t.Fatalf("hello directory %+v", hello)
	}
	d.announceRooms(ctx) // the settle look after room-2's commit
	last := lastQueuedRooms(t, d)
	if len(last) != 2 {
		t.Fatalf("the hub would end on %+v", last)
	}
	// With nothing changed since, nothing more is queued.
	n := d.Agent().Status().QueuedEvents
	d.announceRooms(ctx)
	if got := d.Agent().Status().QueuedEvents; got != n {
		t.Fatalf("queued events %d → %d without a change", n, got)
	}
}

// lastQueuedRooms reads the outbox file: the last rooms_changed list queued.
func lastQueuedRooms(t *testing.T, d *Daemon) []relay.RoomEntry {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.cfg.StateDir, agent.OutboxFile))
	if err != nil {
		t.Fatal(err)
	}
	var evs []relay.Event
	if err := json.Unmarshal(b, &evs); err != nil {
		t.Fatal(err)
	}
	var last []relay.RoomEntry
	for _, ev := range evs {
		if ev.Event == relay.EventRoomsChanged {
			var rc relay.RoomsChanged
			if err := json.Unmarshal(ev.Data, &rc); err != nil {
				t.Fatal(err)
			}
			last = rc.Rooms
		}
	}
	return last
}

// TestStartLooksAgain: the first look at the store gets the second looks a
// change event gets. A commit in flight while the watch was added wrote
// before the watch (no event) and shows only after the first look; without
// a second look the hub would miss that room until the next change.
func TestStartLooksAgain(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.housekeep(ctx) }()
	defer func() { cancel(); <-done }()
	want := int64(1 + len(settleSteps))
	testutil.Eventually(t, "the looks after start", func() bool { return d.stats.decisionQueries.Load() >= want })
}
