package hub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roomrelay/roomrelay/relay"
)

// A command request asks the node holding the device's socket for an ack
// (hdrWantAck): an empty message naming that node (hdrAck) before the
// result. While the requester waits it watches that node's liveness, so a
// node that dies with the command in flight fails the command at once
// (device_offline) instead of at its deadline.
const (
	hdrWantAck = "Rr-Want-Ack"
	hdrAck     = "Rr-Ack-Node"
)

// nodeCheckEvery is how often a waiting requester looks at the serving
// node's liveness.
const nodeCheckEvery = 250 * time.Millisecond

// replyMux receives the answers to this node's requests on one wildcard
// subscription (one SUB for the node, not one per command).
type replyMux struct {
	prefix string
	sub    *nats.Subscription
	mu     sync.Mutex
	wait   map[string]chan *nats.Msg
}

func (m *replyMux) start(nc *nats.Conn) error {
	m.prefix = nats.NewInbox() + "."
	m.wait = map[string]chan *nats.Msg{}
	sub, err := nc.Subscribe(m.prefix+"*", func(msg *nats.Msg) {
		m.mu.Lock()
		ch := m.wait[msg.Subject[len(m.prefix):]]
		m.mu.Unlock()
		if ch != nil {
			select {
			case ch <- msg:
			default: // an ack and a result at most: never blocks in practice
			}
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe to command replies: %w", err)
	}
	m.sub = sub
	return nil
}

func (m *replyMux) stop() {
	if m.sub != nil {
		_ = m.sub.Unsubscribe()
	}
}

func (m *replyMux) open() (string, chan *nats.Msg, func()) {
	token := newID("")
	ch := make(chan *nats.Msg, 4)
	m.mu.Lock()
	m.wait[token] = ch
	m.mu.Unlock()
	return m.prefix + token, ch, func() {
		m.mu.Lock()
		delete(m.wait, token)
		m.mu.Unlock()
	}
}

// route sends a command to whichever node holds the device's socket and
// waits for its result, the deadline, the caller leaving, or the serving
// node dying.
func (h *Hub) route(ctx context.Context, dev string, cmd *relay.Command, timeout time.Duration) *relay.Result {
	fail := func(code relay.Code, format string, a ...any) *relay.Result {
		return &relay.Result{ID: cmd.ID, Error: relay.Errorf(code, format, a...)}
	}
	reply, ch, done := h.replies.open()
	defer done()
	msg := &nats.Msg{Subject: cmdSubject(dev), Reply: reply, Data: mustJSON(cmd), Header: nats.Header{hdrWantAck: []string{"1"}}}
	if err := h.nc.PublishMsg(msg); err != nil {
		h.log.Error("route command", "err", err)
		return fail(relay.CodeInternal, "the hub could not route the command: %v", err)
	}
	deadline := time.NewTimer(timeout + requestSlack)
	defer deadline.Stop()
	var check <-chan time.Time // set once a node acked
	var node string
	for {
		select {
		case m := <-ch:
			if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
				return fail(relay.CodeDeviceOffline, "device %s is not connected to the hub", dev)
			}
			if n := m.Header.Get(hdrAck); n != "" && len(m.Data) == 0 {
				if node == "" {
					node = n
					t := time.NewTicker(nodeCheckEvery)
					defer t.Stop()
					check = t.C
				}
				continue
			}
			res, err := decodeReply(m.Data)
			if err != nil {
				return fail(relay.CodeInternal, "the hub got an unreadable result")
			}
			if res.ID == "" {
				res.ID = cmd.ID
			}
			return res
		case <-check:
			if dead, _ := h.nodes.dead(node, time.Now()); dead {
				h.log.Warn("the node serving a command stopped beating", "device", dev, "command", cmd.ID, "serving_node", node)
				return fail(relay.CodeDeviceOffline, "hub node %s, which held device %s's connection, stopped while the command was in flight; it may or may not have run", node, dev)
			}
		case <-deadline.C:
			return fail(relay.CodeExpired, "device %s did not answer within %s", dev, timeout)
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fail(relay.CodeExpired, "device %s did not answer within the caller's deadline", dev)
			}
			// The caller left (or the hub is stopping): tell the device to
			// stop working on a result nobody will read.
			if perr := h.nc.Publish(ctlSubject(dev), mustJSON(ctlMsg{Op: opCancel, Command: cmd.ID})); perr != nil {
				h.log.Warn("publish command cancel", "device", dev, "command", cmd.ID, "err", perr)
			}
			return fail(relay.CodeInternal, "the request was cancelled (client gone or hub shutting down)")
		}
	}
}
