package agent

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

// TestOutboxCoalescesStateEvents: a state event replaces the queued one of
// its kind (latest wins), is never refused by a full queue, and a send of
// the older one does not remove the newer that replaced it meanwhile; the
// queue keeps its order across a restart (#29.6: the full outbox refused
// provider_changed behind a thousand superseded events).
func TestOutboxCoalescesStateEvents(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o, err := loadOutbox(dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	ev := func(kind, data string) relay.Event {
		return relay.Event{Event: kind, Time: time.Unix(1, 0).UTC(), Data: json.RawMessage(data)}
	}
	for i, e := range []relay.Event{
		ev(relay.EventPolicyChanged, `{"n":1}`),
		ev(relay.EventProposalDecided, `{"n":2}`),
		ev(relay.EventPolicyChanged, `{"n":3}`), // replaces n:1
		ev(relay.EventProposalDecided, `{"n":4}`),
		ev(relay.EventProposalDecided, `{"n":5}`), // the queue is full now
		ev(relay.EventProviderChanged, `{"n":6}`), // a state event still fits
	} {
		if err := o.push(e); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	if err := o.push(ev(relay.EventProposalDecided, `{"n":7}`)); !errors.Is(err, ErrOutboxFull) {
		t.Fatalf("a decision into a full queue: %v", err)
	}
	none := func(string) (time.Time, bool) { return time.Time{}, false }
	got, _ := o.ready(32, none)
	var ns []string
	for _, e := range got {
		ns = append(ns, string(e.ev.Data))
	}
	if want := `{"n":3} {"n":2} {"n":4} {"n":5} {"n":6}`; join(ns) != want {
		t.Fatalf("queued %s, want %s", join(ns), want)
	}
	// Sending the policy while a newer one replaces it leaves the newer.
	if err := o.push(ev(relay.EventPolicyChanged, `{"n":8}`)); err != nil {
		t.Fatal(err)
	}
	if err := o.remove([]uint64{got[0].id, got[1].id}); err != nil {
		t.Fatal(err)
	}
	// A paced kind is held back, the rest goes.
	until := time.Unix(100, 0)
	held := func(kind string) (time.Time, bool) { return until, kind == relay.EventPolicyChanged }
	got, next := o.ready(32, held)
	if len(got) != 3 || !next.Equal(until) {
		t.Fatalf("with the policy paced: %d ready, next %v", len(got), next)
	}
	re, err := loadOutbox(dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = re.ready(32, none)
	ns = nil
	for _, e := range got {
		ns = append(ns, string(e.ev.Data))
	}
	if want := `{"n":8} {"n":4} {"n":5} {"n":6}`; join(ns) != want {
		t.Fatalf("after a restart %s, want %s", join(ns), want)
	}
}

func join(s []string) string { return strings.Join(s, " ") }
