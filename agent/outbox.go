package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

// OutboxFile is the name of the persisted event queue in the state directory.
const OutboxFile = "outbox.json"

// ErrOutboxFull is returned by SendEvent when the agent has been offline so
// long that the bounded event queue filled up.
var ErrOutboxFull = errors.New("agent: event queue is full while the hub is unreachable")

// StateEvents are the event kinds that carry the whole state of their kind
// (the room directory, the policy summary, the provider's presence, the
// audit head): a newer one supersedes every older one, so the outbox keeps
// only the newest of each (latest wins per kind) and sends each kind at
// most once per StatePace. What the agent sends is then bounded by design
// whatever happens locally (a provider re-sending its directory in a loop,
// a thousand policy edits), and such an event is never refused: it replaces
// its predecessor, or takes one of these few extra places in a full queue.
var StateEvents = map[string]bool{
	relay.EventRoomsChanged:    true,
	relay.EventPolicyChanged:   true,
	relay.EventProviderChanged: true,
	relay.EventAuditHead:       true,
}

// StatePace is the least time between two sends of one state event kind:
// with the three kinds local churn moves, at most 60 a minute, half the
// hub's event budget. The first change after a quiet spell goes at once.
const StatePace = 3 * time.Second

// outbox is the bounded, persisted queue of events waiting for the hub. The
// whole queue is rewritten atomically on each change: it is small and events
// are rare, and a rewrite can never leave a torn record behind.
type outbox struct {
	path string
	max  int

	mu      sync.Mutex
	entries []outEntry
	nextID  uint64
}

// outEntry is a queued event with an id that changes when a newer event of
// its kind replaces it, so a send of the older one does not remove the newer.
type outEntry struct {
	id uint64
	ev relay.Event
}

func loadOutbox(dir string, max int) (*outbox, error) {
	o := &outbox{path: filepath.Join(dir, OutboxFile), max: max}
	b, err := os.ReadFile(o.path)
	if errors.Is(err, os.ErrNotExist) {
		return o, nil
	}
	if err != nil {
		return nil, fmt.Errorf("event outbox: %w", err)
	}
	var evs []relay.Event
	if err := json.Unmarshal(b, &evs); err != nil {
		return nil, fmt.Errorf("event outbox %s is corrupt (move it aside to start empty): %w", OutboxFile, err)
	}
	for _, ev := range evs {
		o.addLocked(ev)
	}
	return o, nil
}

// addLocked queues ev, replacing a queued state event of its kind.
func (o *outbox) addLocked(ev relay.Event) {
	o.nextID++
	if StateEvents[ev.Event] {
		for i := range o.entries {
			if o.entries[i].ev.Event == ev.Event {
				o.entries[i] = outEntry{id: o.nextID, ev: ev}
				return
			}
		}
	}
	o.entries = append(o.entries, outEntry{id: o.nextID, ev: ev})
}

func (o *outbox) push(ev relay.Event) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.entries) >= o.max && !StateEvents[ev.Event] {
		return fmt.Errorf("%w (%d events)", ErrOutboxFull, len(o.entries))
	}
	prev := append([]outEntry(nil), o.entries...)
	o.addLocked(ev)
	if err := o.saveLocked(); err != nil {
		o.entries = prev
		return err
	}
	return nil
}

// ready returns, in queue order, up to n events that may be sent now
// (held reports a state event kind still inside its pace), and the
// earliest time a held one may go (zero if none is held).
func (o *outbox) ready(n int, held func(kind string) (until time.Time, ok bool)) ([]outEntry, time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []outEntry
	var next time.Time
	for _, e := range o.entries {
		if len(out) >= n {
			break
		}
		if StateEvents[e.ev.Event] {
			if until, ok := held(e.ev.Event); ok {
				if next.IsZero() || until.Before(next) {
					next = until
				}
				continue
			}
		}
		out = append(out, e)
	}
	return out, next
}

// remove drops the entries with these ids once they were sent; an entry
// replaced meanwhile has another id and stays.
func (o *outbox) remove(ids []uint64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	keep := o.entries[:0:0]
	for _, e := range o.entries {
		sent := false
		for _, id := range ids {
			if e.id == id {
				sent = true
				break
			}
		}
		if !sent {
			keep = append(keep, e)
		}
	}
	o.entries = keep
	return o.saveLocked()
}

func (o *outbox) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.entries)
}

func (o *outbox) saveLocked() error {
	evs := make([]relay.Event, len(o.entries))
	for i, e := range o.entries {
		evs[i] = e.ev
	}
	b, err := json.Marshal(evs)
	if err != nil {
		return fmt.Errorf("event outbox: %w", err)
	}
	if err := writeFileAtomic(o.path, b, true); err != nil {
		return fmt.Errorf("event outbox: %w", err)
	}
	return nil
}
