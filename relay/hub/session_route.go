package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roomrelay/roomrelay/relay"
)

// Commands routed to a session: the node holding a device's socket
// subscribes rr.dev.<id>.cmd; deliveries reach startCommand on the
// dispatcher goroutine, results come back from the reader (deliver).

type pendingCmd struct {
	replies  []*nats.Msg // one per request for this id (a retry joins the first)
	deadline time.Time
}

// ctlMsg is published on rr.dev.<id>.ctl so every node acts on its sockets.
type ctlMsg struct {
	Op      ctlOp  `json:"op"`
	Session string `json:"session,omitempty"`
	Epoch   uint64 `json:"epoch,omitempty"`
	Command string `json:"command,omitempty"` // cancel: the command id
}

// subscribe routes the device's commands to this session. The server has
// it once a later request on the connection is answered (setup's presence
// write).
func (s *session) subscribe() error {
	h := s.h
	// Hold h.mu so the dispatcher cannot see a delivery before bySub knows it.
	h.mu.Lock()
	sub, err := h.nc.ChanQueueSubscribe(cmdSubject(s.dev), "agent", h.cmdCh)
	if err == nil {
		h.bySub[sub] = s
	}
	h.mu.Unlock()
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", cmdSubject(s.dev), err)
	}
	s.mu.Lock()
	s.sub = sub
	s.mu.Unlock()
	return nil
}

// handOver stops routing commands to this session (a newer one on another
// node took over while this node drains); commands already here finish.
// It runs on the dispatcher goroutine, like startCommand: commands sent
// before it precede the drain frame that tells the agent no more will come,
// and deliveries still queued for this session are forwarded to the new one.
func (s *session) handOver() {
	if !s.handedOver.CompareAndSwap(false, true) {
		return
	}
	s.mu.Lock()
	sub := s.sub
	s.mu.Unlock()
	releaseRoute(sub)
	s.send(&relay.Drain{AfterMS: 0, Reason: relay.DrainHandedOver})
	s.log().Info("session handed over to a newer one; the agent closes it once its commands answered")
}

// forward re-publishes a command delivered to a handed-over session, so
// the device's newer session gets it (with the requester's reply subject).
func (s *session) forward(msg *nats.Msg) {
	if err := s.h.nc.PublishMsg(&nats.Msg{Subject: msg.Subject, Reply: msg.Reply, Header: msg.Header, Data: msg.Data}); err != nil {
		s.respond([]*nats.Msg{msg}, &relay.Result{Error: relay.Errorf(relay.CodeDeviceOffline, "the device is moving to another hub node; retry")})
	}
}

// releaseRoute ends a session's command subscription by draining it: a
// command the server routed here before it saw the unsubscribe still
// reaches the dispatcher (which answers or forwards it) instead of being
// dropped by the client and expiring at its caller.
func releaseRoute(sub *nats.Subscription) {
	if sub == nil {
		return
	}
	if err := sub.Drain(); err != nil {
		_ = sub.Unsubscribe()
	}
}

// startCommand forwards a routed command to the agent. It runs on the
// dispatcher goroutine, so it never blocks: a full queue answers busy.
func (s *session) startCommand(msg *nats.Msg) {
	if s.handedOver.Load() {
		s.forward(msg)
		return
	}
	var cmd relay.Command
	if err := json.Unmarshal(msg.Data, &cmd); err != nil || cmd.ID == "" {
		s.respond([]*nats.Msg{msg}, &relay.Result{ID: cmd.ID, Error: relay.Errorf(relay.CodeInternal, "hub sent a malformed command")})
		return
	}
	s.mu.Lock()
	if s.ended || s.closing.Load() {
		s.mu.Unlock()
		s.respond([]*nats.Msg{msg}, &relay.Result{ID: cmd.ID, Error: relay.Errorf(relay.CodeDeviceOffline, "the device is disconnecting; retry")})
		return
	}
	if p := s.pending[cmd.ID]; p != nil {
		// Same id in flight: wait for that run rather than start another.
		p.replies = append(p.replies, msg)
		s.mu.Unlock()
		s.ack(msg)
		return
	}
	if s.pending == nil {
		s.pending = make(map[string]*pendingCmd)
	}
	s.pending[cmd.ID] = &pendingCmd{replies: []*nats.Msg{msg}, deadline: cmd.Deadline}
	s.mu.Unlock()
	s.ack(msg)

	if !s.send(&cmd) {
		code, text := relay.CodeBusy, "the hub's queue to this device is full; retry shortly"
		if s.closing.Load() {
			code, text = relay.CodeDeviceOffline, "the device is disconnecting; retry"
		}
		s.fail(cmd.ID, relay.Errorf(code, "%s", text))
	}
}

// ack tells a requester that asked which node serves its command (see
// route), so it can fail fast if this node dies.
func (s *session) ack(msg *nats.Msg) {
	if msg.Reply == "" || msg.Header.Get(hdrWantAck) == "" {
		return
	}
	if err := msg.RespondMsg(&nats.Msg{Header: nats.Header{hdrAck: []string{s.h.cfg.NodeName}}}); err != nil {
		s.log().Warn("ack command request", "err", err)
	}
}

// cancelCommand tells the agent to stop a command whose only caller left.
// A command that another caller also waits for (same id) keeps running.
func (s *session) cancelCommand(id string) {
	s.mu.Lock()
	p := s.pending[id]
	if p == nil || len(p.replies) != 1 {
		s.mu.Unlock()
		return
	}
	delete(s.pending, id)
	s.mu.Unlock()
	if s.send(&relay.Cancel{ID: id}) {
		s.log().Debug("cancelled a command its caller gave up on", "command", id)
	}
	// Nobody listens any more; answer the request anyway so nothing dangles.
	s.respond(p.replies, &relay.Result{ID: id, Error: relay.Errorf(relay.CodeInternal, "cancelled: the caller left")})
}

func (s *session) fail(id string, e *relay.Error) {
	s.mu.Lock()
	p := s.pending[id]
	delete(s.pending, id)
	s.mu.Unlock()
	if p != nil {
		s.respond(p.replies, &relay.Result{ID: id, Error: e})
	}
}

func (s *session) deliver(res *relay.Result) {
	s.mu.Lock()
	p := s.pending[res.ID]
	delete(s.pending, res.ID)
	s.mu.Unlock()
	head := res.AuditHead
	res.AuditHead = nil // the device's bookkeeping, not the caller's
	if p == nil {
		s.log().Debug("result for no pending command (late or duplicate)", "command", res.ID)
		s.afterAnchor(head, func() {})
		return
	}
	s.afterAnchor(head, func() { s.respond(p.replies, res) })
}

func (s *session) respond(replies []*nats.Msg, res *relay.Result) {
	b := encodeReply(res)
	for _, m := range replies {
		if err := m.Respond(b); err != nil {
			s.log().Warn("reply to command request", "command", res.ID, "err", err)
			if errors.Is(err, nats.ErrMaxPayload) {
				_ = m.Respond(mustJSON(&relay.Result{ID: res.ID, Error: relay.Errorf(relay.CodeInternal,
					"the device's result (%d bytes) exceeds the hub's message limit", len(b))}))
			}
		}
	}
}

// sweepPending forgets commands whose requester has long stopped waiting.
func (s *session) sweepPending() {
	cut := s.h.cfg.Now().Add(-requestSlack - time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, p := range s.pending {
		if p.deadline.Before(cut) {
			delete(s.pending, id)
		}
	}
}
