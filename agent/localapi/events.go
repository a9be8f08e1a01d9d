package localapi

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"
)

// Event types on GET /localapi/v1/events. Clients must ignore types they do
// not know: new ones are added within v1.
const (
	EventStatus           = "status"           // the agent's connection state changed
	EventPolicyChanged    = "policy_changed"   // the policy file was reloaded (API, CLI or a hand edit)
	EventProposalCreated  = "proposal_created" // a proposal waits for review
	EventProposalDecided  = "proposal_decided" // approved or declined, with decided_via
	EventInstallChanged   = "install_changed"  // an approved app's delivery to the provider (pending, installed, failed)
	EventBuildState       = "build_state"      // an approved snippet's smoke-run result
	EventCommandRan       = "command_ran"      // a hub command's outcome, after its audit line; never arguments
	EventProviderChanged  = "provider_changed" // the room provider connected or went away
	EventSnapshot         = "snapshot"         // first line with initial=1, and after a resync
	EventResync           = "resync"           // the stream cannot resume where asked: rebuild from the snapshot
	EventPing             = "ping"             // keepalive on an idle stream
	defaultRingSize       = 1024
	defaultPingEvery      = 30 * time.Second
	maxEventData          = 64 << 10
	eventDataTooLargeNote = `{"dropped":"the event's data was larger than 64 KiB"}`
)

// Publisher is what the daemon and the room provider send events with.
type Publisher interface {
	Publish(typ string, data any)
}

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

// Publish appends an event of type typ whose data is v marshalled to JSON.
// Safe on a nil *Events (nothing happens), so a daemon without a local API
// publishes for free.
func (e *Events) Publish(typ string, v any) {
	if e == nil {
		return
	}
	data, err := json.Marshal(v)
	if err != nil || len(data) > maxEventData {
		data = json.RawMessage(eventDataTooLargeNote)
	}
	if v == nil {
		data = nil
	}
	e.mu.Lock()
	e.last++
	e.ring[(e.last-1)%uint64(len(e.ring))] = Event{Seq: e.last, BootID: e.bootID, Time: e.now().UTC(), Type: typ, Data: data}
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
