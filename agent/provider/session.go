package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/relay"
)

// writeWait bounds one write to the app.
const writeWait = 10 * time.Second

// session is one provider connection.
type session struct {
	srv   *Server
	conn  *websocket.Conn
	app   AppInfo   // set by hello, before register; read-only after
	peer  Peer      // the process behind the connection (ServeHTTP)
	since time.Time // when it became the provider (register, under srv.mu)
	num   uint64    // its number among the server's connections (register)
	done  chan struct{}
	slots chan struct{} // roomrelay → app requests in flight

	wmu sync.Mutex // one writer at a time (gorilla allows one)

	mu       sync.Mutex
	pending  map[string]chan reply
	closed   bool
	closeErr *relay.Error // what calls in flight and after the close fail with
}

// run reads the hello, registers, then reads until the connection ends.
// The pinger it starts ends before run returns.
func (ss *session) run() {
	defer ss.conn.Close()
	if !ss.hello() {
		ss.close(0, "", notRunning("the desktop app's hello was refused"))
		return
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); ss.pinger() }()
	defer wg.Wait()
	defer ss.srv.unregister(ss)
	hb := ss.srv.cfg.Heartbeat
	ss.conn.SetPongHandler(func(string) error { return ss.conn.SetReadDeadline(time.Now().Add(2*hb + hb/2)) })
	for {
		_ = ss.conn.SetReadDeadline(time.Now().Add(2*hb + hb/2))
		typ, data, err := ss.conn.ReadMessage()
		if err != nil {
			ss.closeAfterRead(err)
			return
		}
		if typ != websocket.TextMessage {
			ss.close(CloseProtocolError, "protocol error: binary message", relay.Errorf(relay.CodeInternal, "the desktop app broke the provider protocol (a binary message)"))
			return
		}
		if !ss.handle(data) {
			return
		}
	}
}

// closeAfterRead fails what is in flight according to why reading stopped.
func (ss *session) closeAfterRead(err error) {
	switch {
	case errors.Is(err, websocket.ErrReadLimit):
		ss.srv.log.Warn("the provider sent a message over the limit; closing it", "max", ss.srv.cfg.MaxMessage)
		ss.finish(relay.Errorf(relay.CodeInternal, "the desktop app sent an answer over %d bytes", ss.srv.cfg.MaxMessage))
		ss.closeTooBig()
	default:
		ss.close(0, "", notRunning("the desktop app's connection closed"))
	}
}

// hello reads and answers provider.hello, then registers the session.
func (ss *session) hello() bool {
	cfg := ss.srv.cfg
	_ = ss.conn.SetReadDeadline(time.Now().Add(cfg.HelloTimeout))
	typ, data, err := ss.conn.ReadMessage()
	if err != nil {
		if errors.Is(err, websocket.ErrReadLimit) {
			ss.closeTooBig()
		} else {
			ss.closeWith(CloseProtocolError, "protocol error: no provider.hello")
		}
		return false
	}
	var m message
	if typ != websocket.TextMessage || json.Unmarshal(data, &m) != nil || m.Method != MethodHello || len(m.ID) == 0 {
		ss.closeWith(CloseProtocolError, "protocol error: the first message must be the request provider.hello")
		return false
	}
	var p helloParams
	if err := json.Unmarshal(m.Params, &p); err != nil {
		ss.answerError(m.ID, rpcInvalidParams, "provider.hello params: "+err.Error(), relay.CodeInvalidArgs)
		ss.closeWith(CloseProtocolError, "protocol error: bad hello")
		return false
	}
	if !slices.Contains(p.ProtocolVersions, ProtocolVersion) {
		ss.answerError(m.ID, rpcInvalidParams, "this roomrelay speaks provider protocol version 1 only", relay.CodeInvalidArgs)
		ss.closeWith(CloseUnsupported, "unsupported protocol version")
		return false
	}
	if !cfg.Selected() {
		ss.answerError(m.ID, rpcServerError, "the owner's policy selects the builtin room provider on this device: "+
			"select the desktop app with PUT /localapi/v1/policy/provider {\"provider\":\"app\"} (If-Match: the ETag of its GET), or `roomrelay provider app`, then connect again",
			relay.CodeCommandNotAllowed)
		ss.closeWith(CloseNotSelected, NotSelectedReason)
		return false
	}
	ss.app = AppInfo{Name: relay.CleanLine(p.App.Name, maxAppInfoBytes), Version: relay.CleanLine(p.App.Version, maxAppInfoBytes), Capabilities: p.Capabilities}
	var res HelloResult
	res.ProtocolVersion = ProtocolVersion
	res.Roomrelay.Version = cfg.Version
	res.Projects = cfg.Projects()
	if res.Projects == nil {
		res.Projects = []string{}
	}
	res.HeartbeatS = int(cfg.Heartbeat / time.Second)
	raw, _ := json.Marshal(res)
	if err := ss.write(&message{JSONRPC: "2.0", ID: m.ID, Result: raw}); err != nil {
		return false
	}
	return ss.srv.register(ss)
}

// handle processes one message from the app; false ends the session.
func (ss *session) handle(data []byte) bool {
	if !json.Valid(data) {
		// A broken stream cannot be trusted to answer what is in flight:
		// close it so calls fail now rather than at their deadline.
		ss.close(CloseProtocolError, "protocol error: invalid JSON",
			relay.Errorf(relay.CodeInternal, "the desktop app sent something that is not JSON"))
		return false
	}
	var m message
	if first := bytes.TrimLeft(data, " \t\r\n"); first[0] != '{' || json.Unmarshal(data, &m) != nil {
		// JSON, but not one request, response or notification (a batch,
		// a number, wrong member types): JSON-RPC's Invalid Request, with
		// the null id since none can be read. The stream is still sound.
		why := "a message must be one JSON-RPC 2.0 object"
		if first[0] == '[' {
			why = "batches are not supported: send one JSON-RPC 2.0 object per message"
		}
		ss.answerError(json.RawMessage("null"), rpcInvalidRequest, why, relay.CodeInvalidArgs)
		return true
	}
	switch {
	case m.Method == "" && len(m.ID) > 0: // a response
		var id string
		if json.Unmarshal(m.ID, &id) != nil {
			return true // not one of ours
		}
		ss.mu.Lock()
		ch := ss.pending[id]
		delete(ss.pending, id)
		ss.mu.Unlock()
		if ch != nil {
			ch <- reply{result: m.Result, err: m.Error}
		}
	case m.Method == MethodRoomsChanged && len(m.ID) == 0:
		var p roomsChangedParams
		if err := json.Unmarshal(m.Params, &p); err != nil {
			ss.srv.log.Warn("the provider's rooms.changed is not a directory; ignored", "err", err)
			return true
		}
		rooms, dropped := checkDirectory(p.Rooms)
		if dropped > 0 {
			ss.srv.log.Warn("entries of the provider's directory refused (invalid or duplicate id, or over the limit)", "dropped", dropped, "max", relay.MaxDirectoryRooms)
		}
		if ss.srv.cfg.OnRooms != nil {
			ss.srv.cfg.OnRooms(rooms)
		}
	case len(m.ID) == 0: // another notification (apps.changed, unknown): nothing to do yet
	case m.Method == MethodHello:
		ss.answerError(m.ID, rpcInvalidRequest, "provider.hello was already answered on this connection", relay.CodeInvalidArgs)
	default:
		ss.answerError(m.ID, rpcMethodNotFound, "roomrelay serves no method "+relay.CleanLine(m.Method, 64), "")
	}
	return true
}

func (ss *session) answerError(id json.RawMessage, code int, msg string, rc relay.Code) {
	e := &rpcError{Code: code, Message: msg}
	if rc != "" {
		e.Data, _ = json.Marshal(map[string]relay.Code{"code": rc})
	}
	_ = ss.write(&message{JSONRPC: "2.0", ID: id, Error: e})
}

// write sends one message.
func (ss *session) write(m *message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	_ = ss.conn.SetWriteDeadline(time.Now().Add(writeWait))
	return ss.conn.WriteMessage(websocket.TextMessage, b)
}

// pinger pings every heartbeat until the session ends.
func (ss *session) pinger() {
	t := time.NewTicker(ss.srv.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ss.done:
			return
		case <-t.C:
			if err := ss.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeWait)); err != nil {
				ss.close(0, "", notRunning("the desktop app's connection failed"))
				return
			}
		}
	}
}

func (ss *session) addPending(id string, ch chan reply) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return false
	}
	ss.pending[id] = ch
	return true
}

func (ss *session) removePending(id string) {
	ss.mu.Lock()
	delete(ss.pending, id)
	ss.mu.Unlock()
}

// failure is what a call fails with once the session closed.
func (ss *session) failure() *relay.Error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closeErr == nil {
		return notRunning("the desktop app's connection closed")
	}
	return ss.closeErr
}

// close ends the session once: calls in flight and waiting fail with why at
// once; code (when not 0) is sent to the app in a close frame.
func (ss *session) close(code int, text string, why *relay.Error) {
	if !ss.finish(why) {
		return
	}
	if code != 0 {
		ss.closeWith(code, text)
	}
	ss.conn.Close() // unblocks the reader
}

// finish marks the session closed (once; false if it already was): calls in
// flight and waiting fail with why at once.
func (ss *session) finish(why *relay.Error) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return false
	}
	ss.closed = true
	ss.closeErr = why
	ss.pending = map[string]chan reply{}
	close(ss.done)
	return true
}

// Bounds of what is read and thrown away after a message over the limit.
const (
	maxDiscardBytes = 32 << 20
	discardWait     = 5 * time.Second
)

// closeTooBig closes after a message over the limit so that the app can
// tell why: the 1009 close frame is sent (gorilla sent it when it read the
// frame's length), then the rest of what the app writes is read and thrown
// away, up to maxDiscardBytes or discardWait, until it closes its end.
// Closing at once would leave its message unread in the socket, and an app
// still writing it would see its connection reset (1006), not the 1009.
func (ss *session) closeTooBig() {
	ss.closeWith(websocket.CloseMessageTooBig, "message too big")
	nc := ss.conn.NetConn()
	_ = nc.SetReadDeadline(time.Now().Add(discardWait))
	_, _ = io.CopyN(io.Discard, nc, maxDiscardBytes)
	ss.conn.Close()
}

// closeWith sends a close frame (best effort).
func (ss *session) closeWith(code int, text string) {
	_ = ss.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
}
