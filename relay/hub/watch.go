package hub

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A KV watch can stall when the NATS server it goes through restarts: its
// consumer is gone, and the client notices only after missing heartbeats,
// tens of seconds later. The watches that keep a node's copies of a bucket
// (device records, room directory) therefore start over after every NATS
// reconnect. (Node liveness has its own check: a node that stops hearing its
// own beats watches again.)

// broadcast wakes every waiter at once: fire closes the channel waiters
// hold and makes the next one.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func newBroadcast() *broadcast { return &broadcast{ch: make(chan struct{})} }

// wait is closed by the next fire.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

func (b *broadcast) fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.ch)
	b.ch = make(chan struct{})
}

// follower applies one watch's updates until ctx ends (false), the watch
// ends on its own (false, after logging it), or reconnected is closed
// (true: the caller starts a new watch). first is true for the node's
// first watch of the bucket.
type follower func(ctx context.Context, w jetstream.KeyWatcher, reconnected <-chan struct{}, first bool) bool

// rewatch runs follow on w, then on a new watch of kv (with opts, as w
// was made) after each NATS reconnect, until ctx ends. what names the
// bucket in logs.
func (h *Hub) rewatch(ctx context.Context, kv jetstream.KeyValue, what string, w jetstream.KeyWatcher, reconnected <-chan struct{}, follow follower, opts ...jetstream.WatchOpt) {
	first := true
	for {
		again := follow(ctx, w, reconnected, first)
		w.Stop()
		if !again {
			return
		}
		first = false
		for {
			// Taken before the watch starts, so a reconnect meanwhile is
			// not missed.
			reconnected = h.natsBack.wait()
			var err error
			if w, err = kv.WatchAll(ctx, opts...); err == nil {
				break
			}
			h.log.Warn("watch "+what+" again", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}
