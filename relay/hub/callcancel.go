package hub

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// subjCallCancel carries "cancel the requests this key names" to every
// node. The MCP front is stateless: a client's notifications/cancelled
// arrives in a POST of its own, maybe at another node than the tools/call
// it names, and each node knows only its own calls.
const subjCallCancel = "rr.mcp.cancel"

// MaxCallCancelKey bounds a broadcast key (a token id and a JSON-RPC id).
const MaxCallCancelKey = 512

// callCancels holds the function a node runs for each broadcast key.
type callCancels struct {
	fn  atomic.Pointer[func(string)]
	sub *nats.Subscription
}

// OnCallCancel sets the function this node runs for every key any node
// broadcasts with BroadcastCallCancel (the MCP front's registry of running
// calls). It runs on the subscription's goroutine, one key at a time, so
// it must not block.
func (h *Hub) OnCallCancel(fn func(key string)) { h.cancels.fn.Store(&fn) }

// BroadcastCallCancel asks every node of the cluster, this one included,
// to cancel the calls key names (core NATS: nothing stored, a node that is
// down has no calls to cancel).
func (h *Hub) BroadcastCallCancel(key string) error {
	if len(key) > MaxCallCancelKey {
		return fmt.Errorf("hub: a call-cancel key carries at most %d bytes", MaxCallCancelKey)
	}
	select {
	case <-h.ready:
	default:
		return errors.New("hub: not running")
	}
	if err := h.nc.Publish(subjCallCancel, []byte(key)); err != nil {
		return fmt.Errorf("hub: publish a call cancel: %w", err)
	}
	return nil
}

// subscribeCallCancels is Run's: every node hears every key.
func (h *Hub) subscribeCallCancels() error {
	sub, err := h.nc.Subscribe(subjCallCancel, func(m *nats.Msg) {
		if fn := h.cancels.fn.Load(); fn != nil && *fn != nil && len(m.Data) <= MaxCallCancelKey {
			(*fn)(string(m.Data))
		}
	})
	if err != nil {
		return fmt.Errorf("hub: subscribe %s: %w", subjCallCancel, err)
	}
	h.cancels.sub = sub
	return nil
}
