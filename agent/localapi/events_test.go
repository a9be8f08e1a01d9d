package localapi

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent/events"
)

// countData is a test payload: a counter, published as command_ran unless
// typ says otherwise.
type countData struct {
	N   int `json:"n"`
	typ string
}

func (c countData) EventType() string {
	if c.typ == "" {
		return events.TypeCommandRan
	}
	return c.typ
}

func dataN(t *testing.T, e Event) int {
	t.Helper()
	var d countData
	if err := json.Unmarshal(e.Data, &d); err != nil {
		t.Fatalf("event %+v: %v", e, err)
	}
	return d.N
}

// TestEventResumeWithoutLossOrDuplicates reads part of a stream, drops it,
// publishes more, and resumes with since= the last seq read: every event
// arrives exactly once, in order.
func TestEventResumeWithoutLossOrDuplicates(t *testing.T) {
	t.Parallel()
	ta := startAPI(t, nil)
	ev := ta.srv.Events()
	first := ta.events("?initial=1")
	snap := first.next()
	if snap.Type != events.TypeSnapshot || snap.BootID != ev.BootID() {
		t.Fatalf("first line %+v", snap)
	}
	var s Snapshot
	if err := json.Unmarshal(snap.Data, &s); err != nil || s.Status.State != "online" {
		t.Fatalf("snapshot %s: %v", snap.Data, err)
	}
	for i := 1; i <= 5; i++ {
		ev.Publish(countData{N: i})
	}
	var last uint64
	for i := 1; i <= 3; i++ {
		e := first.nextNonPing()
		if e.Type != events.TypeCommandRan || dataN(t, e) != i {
			t.Fatalf("event %d: %+v", i, e)
		}
		last = e.Seq
	}
	first.close()
	for i := 6; i <= 10; i++ {
		ev.Publish(countData{N: i})
	}
	again := ta.events(fmt.Sprintf("?since=%d&boot_id=%s", last, ev.BootID()))
	for i := 4; i <= 10; i++ {
		e := again.nextNonPing()
		if e.Type != events.TypeCommandRan || dataN(t, e) != i || e.Seq != last+1 {
			t.Fatalf("resumed event want n=%d seq=%d, got %+v", i, last+1, e)
		}
		last = e.Seq
	}
	// Live events keep coming on the resumed stream.
	ev.Publish(events.StatusChanged{Status: events.Status{State: "backoff"}})
	if e := again.nextNonPing(); e.Type != events.TypeStatus || e.Seq != last+1 {
		t.Fatalf("live event %+v", e)
	}
}

func TestEventResync(t *testing.T) {
	t.Parallel()
	ta := startAPI(t, func(c *Config) { c.Events = NewEvents("", 4) })
	ev := ta.srv.Events()
	for i := 1; i <= 10; i++ {
		ev.Publish(countData{N: i})
	}
	// seq 2 is gone from a ring of 4 (it holds 7..10).
	r := ta.events("?since=2")
	if e := r.next(); e.Type != events.TypeResync || e.Seq != 10 {
		t.Fatalf("want resync at 10, got %+v", e)
	}
	if e := r.next(); e.Type != events.TypeSnapshot {
		t.Fatalf("want a snapshot after resync, got %+v", e)
	}
	ev.Publish(countData{N: 11})
	if e := r.nextNonPing(); dataN(t, e) != 11 {
		t.Fatalf("after resync: %+v", e)
	}
	// Still in the ring: no resync.
	ok := ta.events("?since=7")
	if e := ok.next(); e.Type != events.TypeCommandRan || e.Seq != 8 {
		t.Fatalf("since=7: %+v", e)
	}
	// Another boot's seq: resync.
	other := ta.events("?since=8&boot_id=someotherboot")
	if e := other.next(); e.Type != events.TypeResync {
		t.Fatalf("other boot: %+v", e)
	}
	future := ta.events("?since=999")
	if e := future.next(); e.Type != events.TypeResync {
		t.Fatalf("since from the future: %+v", e)
	}
}

func TestEventTypesFilterAndPing(t *testing.T) {
	t.Parallel()
	ta := startAPI(t, func(c *Config) { c.PingEvery = 20 * time.Millisecond })
	ev := ta.srv.Events()
	r := ta.events("?types=proposal_created")
	ev.Publish(countData{N: 1})
	ev.Publish(countData{N: 2, typ: events.TypeProposalCreated})
	if e := r.nextNonPing(); e.Type != events.TypeProposalCreated || dataN(t, e) != 2 {
		t.Fatalf("filtered: %+v", e)
	}
	for {
		if e := r.next(); e.Type == events.TypePing {
			if e.Seq != 2 {
				t.Fatalf("ping seq %d, want the stream's position 2", e.Seq)
			}
			break
		}
	}
}

func TestPublishNeverBlocksAndRingIsBounded(t *testing.T) {
	t.Parallel()
	ev := NewEvents("b", 8)
	w, _ := ev.subscribe() // a reader that never reads
	for i := range 100 {
		ev.Publish(countData{N: i})
	}
	ev.unsubscribe(w)
	if _, ok := ev.since(50, 100); ok {
		t.Fatal("seq 51 should be gone from a ring of 8")
	}
	got, ok := ev.since(92, 100)
	if !ok || len(got) != 8 || got[0].Seq != 93 || got[7].Seq != 100 {
		t.Fatalf("since(92) = %v %v", got, ok)
	}
	var nilEvents *Events
	nilEvents.Publish(events.StatusChanged{}) // a daemon without a local API
}
