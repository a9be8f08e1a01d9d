package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/roomrelay/roomrelay/relay"
)

// OutboxFile is the name of the persisted event queue in the state directory.
const OutboxFile = "outbox.json"

// ErrOutboxFull is returned by SendEvent when the agent has been offline so
// long that the bounded event queue filled up.
var ErrOutboxFull = errors.New("agent: event queue is full while the hub is unreachable")

// outbox is the bounded, persisted FIFO of events waiting for the hub. The
// whole queue is rewritten atomically on each change: it is small and events
// are rare, and a rewrite can never leave a torn record behind.
type outbox struct {
	path string
	max  int

	mu     sync.Mutex
	events []relay.Event
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
	if err := json.Unmarshal(b, &o.events); err != nil {
		return nil, fmt.Errorf("event outbox %s is corrupt (move it aside to start empty): %w", OutboxFile, err)
	}
	return o, nil
}

func (o *outbox) push(ev relay.Event) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.events) >= o.max {
		return fmt.Errorf("%w (%d events)", ErrOutboxFull, len(o.events))
	}
	o.events = append(o.events, ev)
	if err := o.saveLocked(); err != nil {
		o.events = o.events[:len(o.events)-1]
		return err
	}
	return nil
}

// peek returns up to n events from the head, without removing them.
func (o *outbox) peek(n int) []relay.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	n = min(n, len(o.events))
	return append([]relay.Event(nil), o.events[:n]...)
}

// drop removes n events from the head once they were sent.
func (o *outbox) drop(n int) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	n = min(n, len(o.events))
	o.events = append([]relay.Event(nil), o.events[n:]...)
	return o.saveLocked()
}

func (o *outbox) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.events)
}

func (o *outbox) saveLocked() error {
	b, err := json.Marshal(o.events)
	if err != nil {
		return fmt.Errorf("event outbox: %w", err)
	}
	if err := writeFileAtomic(o.path, b, true); err != nil {
		return fmt.Errorf("event outbox: %w", err)
	}
	return nil
}
