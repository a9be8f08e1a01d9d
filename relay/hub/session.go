package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/nats-io/nats.go"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

const (
	writeWait = 10 * time.Second // bound on one write to a slow agent
	closeWait = time.Second      // how long to wait for the peer's close echo
	opTimeout = 5 * time.Second  // bound on one KV operation for a session
	outQueue  = 256              // frames queued for one agent before "busy"
)

// session is one agent websocket on this node. The HTTP handler goroutine
// reads; one writer goroutine writes (gorilla allows one concurrent writer).
type session struct {
	h    *Hub
	id   string
	dev  string
	conn *websocket.Conn
	log  *slog.Logger

	qmu        sync.Mutex
	queue      []outItem     // frames for the writer; nil when idle (no memory)
	wake       chan struct{} // cap 1: the queue has items
	closeOnce  sync.Once
	closing    atomic.Bool // a close frame is queued; the reader only drains now
	stop       chan struct{}
	writerDone chan struct{}

	lastSeen atomic.Int64 // unix nanos of the last frame, ping or pong

	evMu     sync.Mutex // the session's event budget (allowEvent)
	evTokens float64
	evLast   time.Time
	epoch    atomic.Uint64 // presence revision of the connect write; orders sessions

	mu      sync.Mutex
	ended   bool
	sub     *nats.Subscription
	pending map[string]*pendingCmd

	presMu   sync.Mutex
	pres     presenceRec
	presRev  uint64
	presLost bool // a newer session wrote the presence key

	sentClose  atomic.Int32 // the close code this node sent, if it did (metrics)
	handedOver atomic.Bool  // a newer session took over while this node drains
}

type outItem struct {
	data  []byte
	close *closeReq
}

type closeReq struct {
	code   int
	reason string
}

type pendingCmd struct {
	replies  []*nats.Msg // one per request for this id (a retry joins the first)
	deadline time.Time
}

// ctlMsg is published on rr.dev.<id>.ctl so every node acts on its sockets.
type ctlMsg struct {
	Op      string `json:"op"` // "kick", "revoke" or "cancel"
	Session string `json:"session,omitempty"`
	Epoch   uint64 `json:"epoch,omitempty"`
	Command string `json:"command,omitempty"` // cancel: the command id
}

func (h *Hub) handleConnect(w http.ResponseWriter, r *http.Request) {
	if !websocket.IsWebSocketUpgrade(r) {
		w.Header().Set("Upgrade", "websocket")
		writeError(w, http.StatusUpgradeRequired, "websocket_required",
			"this endpoint is a websocket; dial it with subprotocol "+relay.Subprotocol)
		return
	}
	if !hasSubprotocol(r, relay.Subprotocol) {
		w.Header().Set("Upgrade", "websocket")
		writeError(w, http.StatusUpgradeRequired, "subprotocol_required",
			"this hub speaks websocket subprotocol "+relay.Subprotocol+"; send it in Sec-WebSocket-Protocol")
		return
	}
	dev, err := h.authDevice(r.Context(), r)
	if err != nil {
		h.writeAuthError(w, err)
		return
	}
	h.mu.Lock()
	closing := h.closing
	h.mu.Unlock()
	if closing {
		writeError(w, http.StatusServiceUnavailable, "shutting_down", "this hub node is shutting down; reconnect shortly")
		return
	}
	conn, err := h.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered with an HTTP error
	}
	h.serveAgent(conn, dev)
}

func hasSubprotocol(r *http.Request, want string) bool {
	for _, p := range websocket.Subprotocols(r) {
		if p == want {
			return true
		}
	}
	return false
}

// closeNow refuses a connection before it became a session.
func closeNow(conn *websocket.Conn, code int, reason string) {
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(closeWait))
}

func (h *Hub) serveAgent(conn *websocket.Conn, dev *deviceRec) {
	defer conn.Close()
	conn.SetReadLimit(int64(h.cfg.MaxFrame))
	_ = conn.SetReadDeadline(time.Now().Add(h.cfg.HelloTimeout))
	log := h.log.With("device", dev.ID)

	mt, data, err := conn.ReadMessage()
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			closeNow(conn, relay.CloseProtocolError, fmt.Sprintf("no hello within %s", h.cfg.HelloTimeout))
		}
		log.Info("agent left before hello", "err", err) // on ErrReadLimit gorilla already sent 1009
		return
	}
	if mt != websocket.TextMessage {
		closeNow(conn, websocket.CloseUnsupportedData, "binary frames are not part of "+relay.Subprotocol)
		return
	}
	f, err := relay.Decode(data, h.cfg.MaxFrame)
	if err == nil {
		if _, ok := f.(*relay.Hello); !ok {
			err = &relay.ProtocolError{Close: relay.CloseProtocolError, Reason: fmt.Sprintf("expected hello first, got %s", f.FrameType())}
		}
	}
	if err == nil {
		err = relay.CheckVersion(f.(*relay.Hello))
	}
	if err != nil {
		var pe *relay.ProtocolError
		if errors.As(err, &pe) {
			log.Info("refusing agent", "close", pe.Close, "reason", pe.Reason)
			closeNow(conn, pe.Close, pe.Reason)
		}
		return
	}
	hello := f.(*relay.Hello)
	if hello.DeviceID != dev.ID {
		log.Warn("hello names another device", "hello_device", hello.DeviceID)
		closeNow(conn, websocket.ClosePolicyViolation, "hello device_id does not match the token's device")
		return
	}

	s := &session{
		h:          h,
		id:         newID("s-"),
		dev:        dev.ID,
		conn:       conn,
		wake:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		writerDone: make(chan struct{}),
		pending:    make(map[string]*pendingCmd),
	}
	s.log = log.With("session", s.id)
	s.touch()
	if !h.register(s) {
		closeNow(conn, websocket.CloseGoingAway, "hub node shutting down; reconnect")
		return
	}
	defer h.sessWG.Done()
	h.metrics.sessionOpened()
	s.run(hello)
}

func (s *session) run(hello *relay.Hello) {
	h := s.h
	// The route first, flushed so any node can reach it; then welcome, put
	// at the head of the queue (ahead of any command routed meanwhile) before
	// the writer starts, so it is the first frame out and an agent holding
	// it is routable; then the hello's facts; then presence, so "online"
	// means routable and described; then the kick for older sessions, which
	// needs our epoch.
	subErr := s.subscribe()
	if b, err := relay.Encode(&relay.Welcome{SessionID: s.id, HeartbeatMS: h.cfg.Heartbeat.Milliseconds(), ServerTime: h.cfg.Now().UTC()}); err == nil {
		s.qmu.Lock()
		s.queue = append([]outItem{{data: b}}, s.queue...)
		s.qmu.Unlock()
	}
	go s.writer()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	if err := subErr; err != nil {
		s.log.Error("subscribe commands", "err", err)
		s.closeWith(websocket.CloseInternalServerErr, "hub could not route commands; retry")
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		// Registered sessions see revoke messages; this check covers a revoke
		// that landed between the token check and registration.
		d, err := h.st.updateDevice(ctx, s.dev, func(d *deviceRec) error {
			if d.Revoked {
				return errRevokedToken
			}
			d.AgentVersion, d.Policy, d.LastSeen = cleanText(hello.AgentVersion, maxAgentVersion), cleanPolicy(d, hello.Policy), h.cfg.Now().UTC()
			if os := cleanText(hello.OS, maxOS); os != "" {
				d.OS = os
			}
			return nil
		})
		if err == nil && hello.Rooms != nil {
			if derr := h.setDirectory(ctx, d, hello.Rooms); derr != nil {
				s.log.Warn("record room directory", "err", derr)
			}
		}
		cancel()
		switch {
		case errors.Is(err, errRevokedToken):
			s.closeWith(relay.CloseRevoked, "this device's token was revoked; enroll it again")
		default:
			if err != nil {
				s.log.Warn("record hello", "err", err)
			}
			if err := s.goOnlineAndKick(); errors.Is(err, errSuperseded) {
				s.log.Info("superseded while setting up", "epoch", s.epoch.Load())
				s.closeWith(relay.CloseReplaced, "a newer session of this device took over")
			} else if err != nil {
				s.log.Error("presence online", "err", err)
				s.closeWith(websocket.CloseInternalServerErr, "hub could not record presence; retry")
			} else {
				s.log.Info("agent connected", "agent_version", hello.AgentVersion, "os", hello.OS)
			}
		}
	}

	// The setup above may have waited on KV (seconds while JetStream elects
	// a leader); what the agent sent meanwhile is in the socket, unread, so
	// the read deadline starts from here, not from the hello.
	s.touch()
	reason := s.readLoop()
	s.end(reason)
}

// touch records activity and pushes the read deadline out.
func (s *session) touch() {
	s.lastSeen.Store(time.Now().UnixNano())
	if !s.closing.Load() {
		_ = s.conn.SetReadDeadline(time.Now().Add(s.h.readDeadline()))
	}
}

func (s *session) readLoop() error {
	s.conn.SetPongHandler(func(string) error { s.touch(); return nil })
	s.conn.SetPingHandler(func(m string) error {
		s.touch()
		err := s.conn.WriteControl(websocket.PongMessage, []byte(m), time.Now().Add(writeWait))
		if err != nil && !errors.Is(err, websocket.ErrCloseSent) {
			return err
		}
		return nil
	})
	for {
		mt, data, err := s.conn.ReadMessage()
		if err != nil {
			return err
		}
		if s.closing.Load() {
			continue // waiting for the peer's close echo
		}
		s.touch()
		if mt != websocket.TextMessage {
			s.closeWith(websocket.CloseUnsupportedData, "binary frames are not part of "+relay.Subprotocol)
			continue
		}
		f, err := relay.Decode(data, s.h.cfg.MaxFrame)
		if err != nil {
			var pe *relay.ProtocolError
			if errors.As(err, &pe) {
				s.log.Info("protocol error", "close", pe.Close, "reason", pe.Reason)
				s.closeWith(pe.Close, pe.Reason)
			} else {
				s.closeWith(relay.CloseProtocolError, "undecodable frame")
			}
			continue
		}
		switch f := f.(type) {
		case *relay.Result:
			s.deliver(f)
		case *relay.Event:
			s.handleEvent(f)
		case *relay.Hello:
			s.closeWith(relay.CloseProtocolError, "hello sent twice")
		default:
			s.closeWith(relay.CloseProtocolError, fmt.Sprintf("%s frames go from hub to agent, not back", f.FrameType()))
		}
	}
}

// writer owns every write except control frames gorilla writes itself.
func (s *session) writer() {
	defer close(s.writerDone)
	ping := time.NewTicker(s.h.cfg.Heartbeat)
	defer ping.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
			s.qmu.Lock()
			items := s.queue
			s.queue = nil
			s.qmu.Unlock()
			for _, it := range items {
				if it.close != nil {
					_ = s.conn.WriteControl(websocket.CloseMessage,
						websocket.FormatCloseMessage(it.close.code, it.close.reason), time.Now().Add(writeWait))
					// The reader ends at the peer's echo or after closeWait.
					_ = s.conn.SetReadDeadline(time.Now().Add(closeWait))
					<-s.stop
					return
				}
				_ = s.conn.SetWriteDeadline(time.Now().Add(writeWait))
				if err := s.conn.WriteMessage(websocket.TextMessage, it.data); err != nil {
					s.abort(err)
					<-s.stop
					return
				}
			}
		case <-ping.C:
			if err := s.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeWait)); err != nil {
				s.abort(err)
				<-s.stop
				return
			}
		}
	}
}

// enqueue hands an item to the writer; false when the queue is full.
func (s *session) enqueue(it outItem) bool {
	s.qmu.Lock()
	if len(s.queue) >= outQueue && it.close == nil {
		s.qmu.Unlock()
		return false
	}
	s.queue = append(s.queue, it)
	s.qmu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true
}

// abort ends a session whose socket cannot be written: the reader's next
// read fails at once.
func (s *session) abort(err error) {
	s.log.Info("write to agent failed", "err", err)
	s.closing.Store(true)
	_ = s.conn.SetReadDeadline(time.Now())
}

// send queues a frame; false if the session is closing or its queue is full.
func (s *session) send(f relay.Frame) bool {
	if s.closing.Load() {
		return false
	}
	b, err := relay.Encode(f)
	if err != nil {
		s.log.Error("encode frame", "err", err)
		return false
	}
	return s.enqueue(outItem{data: b})
}

// closeWith closes the socket with code and reason after the frames already
// queued. Safe from any goroutine; only the first call counts.
func (s *session) closeWith(code int, reason string) {
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		s.sentClose.Store(int32(code))
		s.enqueue(outItem{close: &closeReq{code, reason}}) // after what is queued
	})
}

// end runs once the reader has stopped: fail what is pending, record offline
// (unless a newer session owns presence), and free the subscription.
func (s *session) end(readErr error) {
	s.closing.Store(true)
	close(s.stop)
	<-s.writerDone

	s.mu.Lock()
	s.ended = true
	sub := s.sub
	pending := s.pending
	s.pending = nil
	s.mu.Unlock()
	releaseRoute(sub)
	for id, p := range pending {
		s.respond(p.replies, &relay.Result{ID: id, Error: relay.Errorf(relay.CodeDeviceOffline,
			"the device disconnected before answering; it may or may not have run the command")})
	}

	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	lastSeen := time.Unix(0, s.lastSeen.Load()).UTC()
	s.setPresence(ctx, func(p *presenceRec) {
		p.State, p.Since, p.LastSeen = hubapi.StateOffline, s.h.cfg.Now().UTC(), lastSeen
	})
	if _, err := s.h.st.updateDevice(ctx, s.dev, func(d *deviceRec) error {
		if lastSeen.After(d.LastSeen) {
			d.LastSeen = lastSeen
		}
		return nil
	}); err != nil {
		s.log.Warn("record last_seen", "err", err)
	}
	s.h.unregister(s)
	s.h.metrics.sessionClosed(int(s.sentClose.Load()), readErr)
	s.log.Info("agent disconnected", "reason", closeReason(readErr))
}

func closeReason(err error) string {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return fmt.Sprintf("close %d %s", ce.Code, ce.Text)
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

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
	if err := h.nc.FlushTimeout(opTimeout); err != nil {
		return fmt.Errorf("flush subscription: %w", err)
	}
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
	s.log.Info("session handed over to a newer one; the agent closes it once its commands answered")
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

func (s *session) goOnlineAndKick() error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := s.goOnline(ctx); err != nil {
		return err
	}
	kick := ctlMsg{Op: "kick", Session: s.id, Epoch: s.epoch.Load()}
	if err := s.h.nc.Publish(ctlSubject(s.dev), mustJSON(kick)); err != nil {
		return fmt.Errorf("publish kick: %w", err)
	}
	return nil
}

// goOnline writes an online record unconditionally: a new session always
// supersedes older ones, and its revision becomes the session's epoch.
func (s *session) goOnline(ctx context.Context) error {
	now := s.h.cfg.Now().UTC()
	rec := presenceRec{State: hubapi.StateOnline, Session: s.id, Node: s.h.cfg.NodeName,
		Since: now, LastSeen: now, Refreshed: now, StaleAfterMS: s.h.staleAfter().Milliseconds()}
	s.presMu.Lock()
	defer s.presMu.Unlock()
	rev, err := s.h.st.presence.Put(ctx, s.dev, mustJSON(rec))
	if err != nil {
		return fmt.Errorf("put presence: %w", err)
	}
	s.pres, s.presRev = rec, rev
	s.epoch.Store(rev)
	if s.h.newest.superseded(s.dev, rev) {
		return errSuperseded
	}
	return nil
}

// errSuperseded: a newer session of the device went online while this one
// was setting up.
var errSuperseded = errors.New("a newer session of this device took over")

// setPresence rewrites this session's presence record with compare-and-set
// on the revision it last wrote, so a stale session never overwrites a
// newer one. It returns false once a newer session owns the key.
func (s *session) setPresence(ctx context.Context, mutate func(*presenceRec)) bool {
	s.presMu.Lock()
	defer s.presMu.Unlock()
	if s.presLost {
		return false
	}
	if s.presRev == 0 {
		return true // never went online
	}
	rec := s.pres
	rec.LastSeen = time.Unix(0, s.lastSeen.Load()).UTC()
	rec.Refreshed = s.h.cfg.Now().UTC()
	mutate(&rec)
	rev, err := s.h.st.presence.Update(ctx, s.dev, mustJSON(rec), s.presRev)
	if err != nil {
		if isRevMismatch(err) {
			s.presLost = true
			return false
		}
		s.log.Warn("update presence", "err", err)
		return true
	}
	s.pres, s.presRev = rec, rev
	return true
}

func (s *session) refreshPresence(ctx context.Context) {
	if s.closing.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if !s.setPresence(ctx, func(*presenceRec) {}) {
		s.closeWith(relay.CloseReplaced, "a newer session of this device took over")
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
		s.log.Warn("ack command request", "err", err)
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
		s.log.Debug("cancelled a command its caller gave up on", "command", id)
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
	if p == nil {
		s.log.Debug("result for no pending command (late or duplicate)", "command", res.ID)
		return
	}
	s.respond(p.replies, res)
}

func (s *session) respond(replies []*nats.Msg, res *relay.Result) {
	b := mustJSON(res)
	for _, m := range replies {
		if err := m.Respond(b); err != nil {
			s.log.Warn("reply to command request", "command", res.ID, "err", err)
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
