// Package provider is the room-provider side of the local API: a desktop app
// that owns the device's Rooms dials a websocket (subprotocol
// roomrelay.provider.v1) and speaks JSON-RPC 2.0 both ways
// (docs/provider-protocol.md). roomrelay asks the app for Room data only
// after a command passed the owner's allowlist, decodes every answer into
// its own slim structs with bounded strings, and fails at once with
// app_not_running when no app is connected or the app goes away mid-call.
//
// Server is the http.Handler agent/localapi mounts at /localapi/v1/provider;
// the newest app connection wins. Builtin is the store-backed provider for
// devices without an app.
package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/relay"
)

// Peer is the process at the other end of a provider connection, as the
// local API's peer check identified it (PID 0 when the OS did not say; Exe
// only where the OS tells it). Shown to the owner, never used to decide.
type Peer struct {
	PID int
	Exe string
}

// Conn is the current provider connection: who the app said it is, and the
// process and time it connected.
type Conn struct {
	App   AppInfo
	Peer  Peer
	Since time.Time
}

// Config is what the daemon hands the server.
type Config struct {
	// Version is roomrelay's, told to the app in the hello answer.
	Version string
	// Projects lists the enabled project ids (hello answer).
	Projects func() []string
	// Selected reports whether the owner's policy selects the app as the
	// room provider; an app's hello is refused (4004) when it does not.
	Selected func() bool
	// OnRooms receives each checked directory the app sends.
	OnRooms func(rooms []Room)
	// OnChange is called when an app connected (said hello) or the current
	// one went away, after the registry changed.
	OnChange func(connected bool, app AppInfo)
	// Events, when set, gets provider_changed: the daemon's publisher.
	Events events.Publisher
	// PeerOf names the process behind a provider request (the daemon reads
	// the local API's peer check); nil or false: unknown.
	PeerOf func(r *http.Request) (Peer, bool)
	// Now is the clock of Conn.Since (default time.Now).
	Now func() time.Time

	Heartbeat    time.Duration // ping interval (default 20 s); two silent intervals close
	HelloTimeout time.Duration // default 10 s
	MaxMessage   int64         // bytes per message (default 1 MiB)
	MaxInFlight  int           // roomrelay → app requests at once (default DefaultMaxInFlight, at most MaxMaxInFlight)
	Logger       *slog.Logger
}

// DefaultMaxInFlight is how many requests roomrelay has in flight to the
// desktop app at once unless configured (`roomrelay run
// --provider-in-flight`); a call beyond it waits for a free slot until its
// deadline (never answered busy). MaxMaxInFlight bounds the setting: each
// slot is a request the app holds.
const (
	DefaultMaxInFlight = 8
	MaxMaxInFlight     = 1024
)

// MaxInFlight is the server's bound on requests in flight to the app.
func (s *Server) MaxInFlight() int { return s.cfg.MaxInFlight }

// Server accepts provider connections and forwards calls to the newest.
type Server struct {
	cfg      Config
	log      *slog.Logger
	upgrader websocket.Upgrader
	seq      atomic.Uint64
	conns    uint64 // connections registered so far (under mu): a session's number

	mu      sync.Mutex
	cur     *session
	closed  bool
	serving sync.WaitGroup // ServeHTTP calls still running
}

// New builds a Server.
func New(cfg Config) *Server {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 20 * time.Second
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = 10 * time.Second
	}
	if cfg.MaxMessage <= 0 {
		cfg.MaxMessage = 1 << 20
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	cfg.MaxInFlight = min(cfg.MaxInFlight, MaxMaxInFlight)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Projects == nil {
		cfg.Projects = func() []string { return nil }
	}
	if cfg.Selected == nil {
		cfg.Selected = func() bool { return true }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	s.upgrader = websocket.Upgrader{
		Subprotocols:    []string{Subprotocol},
		ReadBufferSize:  4096,
		WriteBufferSize: 4096,
		// A browser page must never become a provider: any Origin is
		// refused (agent/localapi refuses it before us too).
		CheckOrigin: func(r *http.Request) bool { return r.Header.Get("Origin") == "" },
	}
	return s
}

// Connected reports whether an app is connected, and which.
func (s *Server) Connected() (AppInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return AppInfo{}, false
	}
	return s.cur.app, true
}

// connection is the current provider connection's number (each hello that
// registers gets the next one), false when no app is connected.
func (s *Server) connection() (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return 0, false
	}
	return s.cur.num, true
}

// Current reports the current provider connection, if any.
func (s *Server) Current() (Conn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return Conn{}, false
	}
	return Conn{App: s.cur.app, Peer: s.cur.peer, Since: s.cur.since}, true
}

// Reselect closes the current connection with 4004 when the owner's policy
// no longer selects the app (roomrelay provider builtin): the app learns
// why at once instead of serving nobody. Called after a policy reload.
func (s *Server) Reselect() {
	if s.cfg.Selected() {
		return
	}
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur != nil {
		s.log.Info("the owner's policy selects the builtin provider now; closing the desktop app's connection")
		cur.close(CloseNotSelected, NotSelectedReason, notRunning("the owner's policy selects the builtin room provider"))
	}
}

// Close closes the current connection (1001 going away), refuses new ones
// and waits for the ServeHTTP calls to return.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	cur := s.cur
	s.mu.Unlock()
	if cur != nil {
		cur.close(websocket.CloseGoingAway, "going away", notRunning("the agent is shutting down"))
	}
	s.serving.Wait()
}

// ServeHTTP upgrades to the provider websocket and serves it until it
// closes. It runs on the HTTP server's connection goroutine, plus a pinger
// it starts and waits for.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !offers(r, Subprotocol) {
		http.Error(w, "the provider websocket needs subprotocol "+Subprotocol, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		http.Error(w, "the agent is shutting down", http.StatusServiceUnavailable)
		return
	}
	s.serving.Add(1)
	s.mu.Unlock()
	defer s.serving.Done()
	conn, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		s.log.Info("provider upgrade refused", "err", err)
		return
	}
	conn.SetReadLimit(s.cfg.MaxMessage)
	ss := &session{srv: s, conn: conn, done: make(chan struct{}), pending: map[string]chan reply{},
		slots: make(chan struct{}, s.cfg.MaxInFlight)}
	if s.cfg.PeerOf != nil {
		ss.peer, _ = s.cfg.PeerOf(r)
	}
	ss.run()
}

// offers reports whether the request offers the websocket subprotocol p.
func offers(r *http.Request, p string) bool {
	for _, q := range websocket.Subprotocols(r) {
		if q == p {
			return true
		}
	}
	return false
}

// register makes ss the current provider; the one it replaces is closed
// with 4001. False when the server is closing.
func (s *Server) register(ss *session) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	old := s.cur
	ss.since = s.cfg.Now().UTC()
	s.conns++
	ss.num = s.conns
	s.cur = ss
	s.mu.Unlock()
	if old != nil {
		s.log.Info("a newer provider connection replaces the old one", "app", ss.app.Name)
		old.close(CloseReplaced, "replaced", notRunning("the desktop app's connection was replaced by a newer one"))
	}
	s.changed(true, ss)
	return true
}

// unregister clears ss if it is still the current provider.
func (s *Server) unregister(ss *session) {
	s.mu.Lock()
	was := s.cur == ss
	if was {
		s.cur = nil
	}
	s.mu.Unlock()
	if was {
		s.changed(false, ss)
	}
}

func (s *Server) changed(connected bool, ss *session) {
	app := ss.app
	s.log.Info("room provider", "connected", connected, "app", app.Name, "version", app.Version, "pid", ss.peer.PID, "exe", ss.peer.Exe)
	if s.cfg.OnChange != nil {
		s.cfg.OnChange(connected, app)
	}
	if s.cfg.Events != nil {
		ev := events.ProviderChanged{Connected: connected}
		if connected {
			ev.App, ev.PID, ev.Exe, ev.Since = &app, ss.peer.PID, ss.peer.Exe, ss.since
		}
		s.cfg.Events.Publish(ev)
	}
}

func (s *Server) current() *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// notRunning is the app_not_running error with a reason.
func notRunning(why string) *relay.Error {
	return relay.Errorf(relay.CodeAppNotRunning, "the desktop app that provides this device's Rooms is not running (%s)", why)
}

// reply is an app's answer to one of roomrelay's requests.
type reply struct {
	result json.RawMessage
	err    *rpcError
}

// call sends method with params to the current app and waits for the
// answer, ctx's end, or the connection's end (app_not_running at once).
func (s *Server) call(ctx context.Context, method string, params request) (json.RawMessage, error) {
	ss := s.current()
	if ss == nil {
		return nil, notRunning("no app is connected")
	}
	select {
	case ss.slots <- struct{}{}:
		defer func() { <-ss.slots }()
	case <-ss.done:
		return nil, ss.failure()
	case <-ctx.Done():
		return nil, s.ended(ctx, method, true)
	}
	id := "rr-" + strconv.FormatUint(s.seq.Add(1), 10)
	if dl, ok := ctx.Deadline(); ok {
		params.setDeadline(dl.UnixMilli())
	}
	ch := make(chan reply, 1)
	if !ss.addPending(id, ch) {
		return nil, ss.failure()
	}
	defer ss.removePending(id)
	raw, _ := json.Marshal(params) // strings, ints and files: cannot fail
	idRaw, _ := json.Marshal(id)
	if err := ss.write(&message{JSONRPC: "2.0", ID: idRaw, Method: method, Params: raw}); err != nil {
		ss.close(websocket.CloseAbnormalClosure, "", notRunning("the connection to the desktop app failed"))
		return nil, ss.failure()
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		return r.result, nil
	case <-ss.done:
		return nil, ss.failure()
	case <-ctx.Done():
		cancel, _ := json.Marshal(cancelParams{ID: id})
		_ = ss.write(&message{JSONRPC: "2.0", Method: MethodCancel, Params: cancel})
		return nil, s.ended(ctx, method, false)
	}
}

// ended is the error of a call whose context ended first, in roomrelay's
// own words and never Go's (the cloud caller sees it): expired past the
// deadline (after $/cancelRequest was sent, unless the call still waited for
// a free slot); internal when cancelled (the caller went away, the agent
// stops).
func (s *Server) ended(ctx context.Context, method string, waiting bool) *relay.Error {
	if waiting {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return relay.Errorf(relay.CodeExpired, "the command's deadline passed while %s waited for a free request slot to the desktop app (%d in flight)", method, s.cfg.MaxInFlight)
		}
		return relay.Errorf(relay.CodeInternal, "%s was cancelled while it waited for a free request slot to the desktop app", method)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return relay.Errorf(relay.CodeExpired, "the desktop app did not answer %s before the command's deadline", method)
	}
	return relay.Errorf(relay.CodeInternal, "%s was cancelled before the desktop app answered", method)
}

// errAppError marks an error answer of the app (rpcError) for errors.As.
var _ error = (*rpcError)(nil)

func (e *rpcError) Error() string { return fmt.Sprintf("app error %d: %s", e.Code, e.Message) }

// asRPC returns the app's error answer in err, if it is one.
func asRPC(err error) (*rpcError, bool) {
	var e *rpcError
	ok := errors.As(err, &e)
	return e, ok
}
