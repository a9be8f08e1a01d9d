package localapi

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"

	"github.com/roomrelay/roomrelay/agent/events"
)

// The event types and their data are agent/events'; this file is the
// ring the stream reads.
const (
	defaultRingSize       = 1024
	defaultPingEvery      = 30 * time.Second
	maxEventData          = 64 << 10
	eventDataTooLargeNote = `{"dropped":"the event's data was larger than 64 KiB"}`
)

// Event is one line of the stream.
type Event struct {
	Seq    uint64          `json:"seq"`
	BootID string          `json:"boot_id"`
	Time   time.Time       `json:"time"`
	Type   string          `json:"type"`
	Data   json.RawMessage `json:"data,omitempty"`
}

// Events is the bounded ring of recent events and the wake-up of streams
// reading it. Publish never blocks on a reader: a stream that falls more
// than the ring's size behind gets a resync line instead of what it missed.
// Nothing is written to disk.
type Events struct {
	bootID string
	now    func() time.Time

	mu    sync.Mutex
	ring  []Event // ring[(seq-1) % len] holds seq, for the last len seqs
	last  uint64  // the newest seq; 0: none yet
	waits map[chan struct{}]struct{}
}

// NewEvents returns an empty ring of size entries (0: 1024) for the boot
// bootID ("" draws a random one).
func NewEvents(bootID string, size int) *Events {
	if size <= 0 {
		size = defaultRingSize
	}
	if bootID == "" {
		bootID = NewBootID()
	}
	return &Events{bootID: bootID, now: time.Now, ring: make([]Event, size), waits: map[chan struct{}]struct{}{}}
}

// NewBootID draws a boot id: it changes every time the agent starts.
func NewBootID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// BootID is this run's boot id.
func (e *Events) BootID() string { return e.bootID }

// Publish appends p, its data marshalled to JSON (events.Data). Safe on a
// nil *Events (nothing happens), so a daemon without a local API publishes
// for free.
func (e *Events) Publish(p events.Payload) {
	if e == nil || p == nil {
		return
	}
	data, err := events.Data(p)
	if err != nil || len(data) > maxEventData {
		data = json.RawMessage(eventDataTooLargeNote)
	}
	e.mu.Lock()
	e.last++
	e.ring[(e.last-1)%uint64(len(e.ring))] = Event{Seq: e.last, BootID: e.bootID, Time: e.now().UTC(), Type: p.EventType(), Data: data}
	for w := range e.waits {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	e.mu.Unlock()
}

// Last is the newest sequence number (0 before the first event).
func (e *Events) Last() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last
}

// subscribe registers a wake-up channel; the caller reads with since.
func (e *Events) subscribe() (chan struct{}, uint64) {
	w := make(chan struct{}, 1)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.waits[w] = struct{}{}
	return w, e.last
}

func (e *Events) unsubscribe(w chan struct{}) {
	e.mu.Lock()
	delete(e.waits, w)
	e.mu.Unlock()
}

// since returns the events after seq, oldest first, and false when the ring
// no longer holds seq+1 (the reader lost its place).
func (e *Events) since(seq uint64, max int) ([]Event, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if seq > e.last {
		return nil, false // from the future: another boot's seq
	}
	size := uint64(len(e.ring))
	if e.last-seq > size {
		return nil, false
	}
	var out []Event
	for s := seq + 1; s <= e.last && len(out) < max; s++ {
		out = append(out, e.ring[(s-1)%size])
	}
	return out, true
}
