package hub

import (
	"context"
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

// This file is a session's socket lifecycle: upgrade, hello, setup, the read
// loop and the end. What it writes is in session_write.go, its presence in
// session_presence.go, the commands routed to it in session_route.go.

const (
	writeWait = 10 * time.Second // bound on one write to a slow agent
	closeWait = time.Second      // how long to wait for the peer's close echo
	opTimeout = 5 * time.Second  // bound on one KV operation for a session
	outQueue  = 256              // frames queued for one agent before "busy"
)

// session is one agent websocket on this node. One goroutine per socket
// reads; a writer goroutine runs only while frames are queued (gorilla
// allows one concurrent writer), so an idle agent costs one goroutine.
type session struct {
	h    *Hub
	id   string
	dev  string
	conn *websocket.Conn

	qmu     sync.Mutex
	queue   []outItem   // frames for the writer; nil when idle (no memory)
	held    bool        // before welcome: queue, do not write yet
	writing bool        // a writer goroutine is running
	wdone   bool        // no more writes: a close frame went out, a write failed, or the session ended
	pingT   *time.Timer // the next heartbeat ping
	writers sync.WaitGroup

	closeOnce sync.Once
	closing   atomic.Bool // a close frame is queued; the reader only drains now

	lastSeen atomic.Int64 // unix nanos of the last frame, ping or pong

	evMu      sync.Mutex    // the session's event budgets and what waits for them (session_events.go)
	evBudget  evBucket      // events that are not latestWins
	stBudget  evBucket      // latestWins (state) events: churn of other kinds never holds a state change back
	evWaiting []relay.Event // latestWins events past the budget, one per kind; nil when none
	evTimer   *time.Timer   // applies evWaiting when the budget allows
	evStopped bool
	evApply   sync.Mutex // held while an event is applied: one kind's events apply in order

	anchor anchorCommit  // result frames' audit heads, recorded before the result is answered (audithead.go)
	epoch  atomic.Uint64 // presence revision of the connect write; orders sessions

	mu      sync.Mutex
	ended   bool
	sub     *nats.Subscription
	pending map[string]*pendingCmd // made on the first command

	presMu   sync.Mutex
	pres     presenceRec
	presRev  uint64
	presLost bool // a newer session wrote the presence key

	sentClose  atomic.Int32 // the close code this node sent, if it did (metrics)
	handedOver atomic.Bool  // a newer session took over while this node drains
}

// sessionLog logs with the session's device and id. The attributes are
// added per record, and only to records the handler takes: a logger with
// them kept per session would cost memory on every idle agent, and one
// built per call costs CPU on every connect.
type sessionLog struct{ s *session }

func (s *session) log() sessionLog { return sessionLog{s} }

func (l sessionLog) Debug(msg string, args ...any) { l.at(slog.LevelDebug, msg, args) }
func (l sessionLog) Info(msg string, args ...any)  { l.at(slog.LevelInfo, msg, args) }
func (l sessionLog) Warn(msg string, args ...any)  { l.at(slog.LevelWarn, msg, args) }
func (l sessionLog) Error(msg string, args ...any) { l.at(slog.LevelError, msg, args) }

func (l sessionLog) at(level slog.Level, msg string, args []any) {
	lg, ctx := l.s.h.log, context.Background()
	if !lg.Enabled(ctx, level) {
		return
	}
	lg.Log(ctx, level, msg, append([]any{"device", l.s.dev, "session", l.s.id}, args...)...)
}

func (h *Hub) handleConnect(w http.ResponseWriter, r *http.Request) {
	if !websocket.IsWebSocketUpgrade(r) {
		w.Header().Set("Upgrade", "websocket")
		writeError(w, hubapi.CodeWebsocketRequired,
			"this endpoint is a websocket; dial it with subprotocol "+relay.Subprotocol)
		return
	}
	if !hasSubprotocol(r, relay.Subprotocol) {
		w.Header().Set("Upgrade", "websocket")
		writeError(w, hubapi.CodeSubprotocolRequired,
			"this hub speaks websocket subprotocol "+relay.Subprotocol+"; send it in Sec-WebSocket-Protocol")
		return
	}
	// Closing first: a draining node spends no KV reads on agents it refuses.
	if h.isClosing() {
		writeError(w, hubapi.CodeShuttingDown, "this hub node is shutting down; reconnect shortly")
		return
	}
	dev, rev, err := h.authAgent(r.Context(), r)
	if err != nil {
		h.writeAuthError(w, err)
		return
	}
	conn, err := h.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered with an HTTP error
	}
	// The socket gets its own goroutine and this handler returns, so
	// net/http's per-connection buffers (~9 KB) are freed instead of living
	// as long as the agent. Run waits for it like for a request (reqWG
	// is above zero here: Track holds it for this handler).
	h.reqWG.Add(1)
	go func() {
		defer h.reqWG.Done()
		h.serveAgent(conn, dev, rev)
	}()
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

// serveAgent is the socket's goroutine: it reads the hello, has the session
// set up on another goroutine, then reads until the socket ends. Keeping
// decoding and KV work off this stack keeps an idle agent's stack small.
func (h *Hub) serveAgent(conn *websocket.Conn, dev *deviceRec, rev uint64) {
	defer conn.Close()
	conn.SetReadLimit(int64(h.cfg.MaxFrame))
	_ = conn.SetReadDeadline(time.Now().Add(h.cfg.HelloTimeout))
	mt, data, err := conn.ReadMessage()
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			closeNow(conn, relay.CloseProtocolError, fmt.Sprintf("no hello within %s", h.cfg.HelloTimeout))
		}
		h.log.Info("agent left before hello", "device", dev.ID, "err", err) // on ErrReadLimit gorilla already sent 1009
		return
	}
	var s *session
	h.setupWork.do(func() { s = h.startSession(conn, dev, rev, mt, data) })
	if s == nil {
		return
	}
	defer h.sessWG.Done()
	// The setup may have waited on KV (seconds while JetStream elects a
	// leader); what the agent sent meanwhile is in the socket, unread, so
	// the read deadline starts from here, not from the hello.
	s.touch()
	s.end(s.readLoop())
}

// workPool runs connect-time work (decoding, KV requests) for socket
// goroutines, so that work grows a worker's stack, not the socket's: an
// idle agent's goroutine keeps the few KB its read needs. Workers are
// reused because their stacks are already grown; when none is free, the
// work gets a goroutine of its own.
type workPool struct{ ch chan func() }

func newWorkPool() workPool { return workPool{ch: make(chan func())} }

// run serves work on n workers until ctx ends.
func (p workPool) run(ctx context.Context, n int, wg *sync.WaitGroup) {
	for range n {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case f := <-p.ch:
					f()
				}
			}
		})
	}
}

// do runs f on a worker, or a goroutine of its own, and waits for it.
func (p workPool) do(f func()) {
	done := make(chan struct{})
	task := func() {
		defer close(done)
		f()
	}
	select {
	case p.ch <- task:
	default:
		go task()
	}
	<-done
}

// startSession checks the hello, registers the session and sets it up; nil
// when the connection was refused (and closed with a reason).
func (h *Hub) startSession(conn *websocket.Conn, dev *deviceRec, rev uint64, mt int, data []byte) *session {
	if mt != websocket.TextMessage {
		closeNow(conn, websocket.CloseUnsupportedData, "binary frames are not part of "+relay.Subprotocol)
		return nil
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
			h.log.Info("refusing agent", "device", dev.ID, "close", pe.Close, "reason", pe.Reason)
			closeNow(conn, pe.Close, pe.Reason)
		}
		return nil
	}
	hello := f.(*relay.Hello)
	if hello.DeviceID != dev.ID {
		h.log.Warn("hello names another device", "device", dev.ID, "hello_device", hello.DeviceID)
		closeNow(conn, websocket.ClosePolicyViolation, "hello device_id does not match the token's device")
		return nil
	}

	s := &session{h: h, id: newID("s-"), dev: dev.ID, conn: conn, held: true}
	s.touch()
	switch h.register(s) {
	case errClosing:
		closeNow(conn, websocket.CloseGoingAway, "hub node shutting down; reconnect")
		return nil
	case errRevokedToken:
		closeNow(conn, relay.CloseRevoked, "this device's token was revoked; enroll it again")
		return nil
	}
	h.metrics.sessionOpened()
	s.setup(hello, dev, rev)
	return s
}

// errClosing: the node is shutting down and takes no new session.
var errClosing = errors.New("hub node shutting down")

// setup makes a registered session routable and online. The route first;
// then the hello's facts; then presence, so "online" means routable and
// described; then the kick for older sessions, which needs our epoch; then
// welcome, the first frame out (ahead of any command routed meanwhile), so
// an agent holding it is routable and online. The route is not flushed on
// its own: the presence write is a request on the same NATS connection,
// which the server processes after the subscription, so its answer
// confirms both (a flush was a round trip per connect).
func (s *session) setup(hello *relay.Hello, dev *deviceRec, rev uint64) {
	h := s.h
	defer s.startWriting() // also on the refusals below: welcome, then their close frame
	if err := s.subscribe(); err != nil {
		s.log().Error("subscribe commands", "err", err)
		s.closeWith(websocket.CloseInternalServerErr, "hub could not route commands; retry")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	d, err := h.recordHello(ctx, dev, rev, hello)
	if err == nil && hello.Rooms != nil {
		if derr := h.setDirectory(ctx, d, hello.Rooms); derr != nil {
			s.log().Warn("record room directory", "err", derr)
		}
	}
	if errors.Is(err, errRevokedToken) {
		s.closeWith(relay.CloseRevoked, "this device's token was revoked; enroll it again")
		return
	}
	if err != nil {
		s.log().Warn("record hello", "err", err)
	}
	// Presence gets a fresh bound: the writes above may have used up ctx's.
	ctx, cancel = context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := s.goOnlineAndKick(ctx, appPresence(hello.Provider)); errors.Is(err, errSuperseded) {
		s.log().Info("superseded while setting up", "epoch", s.epoch.Load())
		s.closeWith(relay.CloseReplaced, "a newer session of this device took over")
	} else if err != nil {
		s.log().Error("presence online", "err", err)
		s.closeWith(websocket.CloseInternalServerErr, "hub could not record presence; retry")
	} else {
		s.log().Info("agent connected", "agent_version", hello.AgentVersion, "os", hello.OS)
	}
}

// touch records activity and pushes the read deadline out.
func (s *session) touch() {
	s.lastSeen.Store(time.Now().UnixNano())
	if !s.closing.Load() {
		_ = s.conn.SetReadDeadline(time.Now().Add(s.h.readDeadline()))
	}
}

// readLoop reads until the socket fails. It stays small: it is what an idle
// agent's goroutine is parked in.
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
		s.handleFrame(mt, data)
	}
}

func (s *session) handleFrame(mt int, data []byte) {
	if mt != websocket.TextMessage {
		s.closeWith(websocket.CloseUnsupportedData, "binary frames are not part of "+relay.Subprotocol)
		return
	}
	f, err := relay.Decode(data, s.h.cfg.MaxFrame)
	if err != nil {
		var pe *relay.ProtocolError
		if errors.As(err, &pe) {
			s.log().Info("protocol error", "close", pe.Close, "reason", pe.Reason)
			s.closeWith(pe.Close, pe.Reason)
		} else {
			s.closeWith(relay.CloseProtocolError, "undecodable frame")
		}
		return
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

// end runs once the reader has stopped: fail what is pending, record offline
// (unless a newer session owns presence), and free the subscription.
func (s *session) end(readErr error) {
	s.closing.Store(true)
	s.stopWriting()
	s.stopEvents()

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
	s.anchor.wg.Wait() // results waiting for their audit head to be recorded are answered

	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	lastSeen, endedAt := time.Unix(0, s.lastSeen.Load()).UTC(), s.h.cfg.Now().UTC()
	err := s.writeOffline(ctx, endedAt, lastSeen)
	// The presence record carries last_seen (the device view takes the
	// later of it and the device record's): the device record is written
	// only when presence could not be, so a disconnect costs one KV write
	// (a drain of thousands of sessions, thousands, not three times that).
	if err != nil && !errors.Is(err, errPresenceLost) {
		if !errors.Is(err, errNeverOnline) {
			s.h.noteOfflineUnwritten(offlineRetry{s: s, at: endedAt, lastSeen: lastSeen})
		}
		if _, err := s.h.st.updateDevice(ctx, s.dev, func(d *deviceRec) error {
			if lastSeen.After(d.LastSeen) {
				d.LastSeen = lastSeen
			}
			return nil
		}); err != nil {
			s.log().Warn("record last_seen", "err", err)
		}
	}
	s.h.unregister(s)
	s.h.metrics.sessionClosed(int(s.sentClose.Load()), readErr)
	s.log().Info("agent disconnected", "reason", closeReason(readErr))
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
