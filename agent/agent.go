package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/internal/tlsfiles"
	"github.com/roomrelay/roomrelay/relay"
)

var (
	// ErrNeedsEnrollment means the hub refused the device token (HTTP 401) or
	// revoked the device. Retrying cannot help; the device must be enrolled again.
	ErrNeedsEnrollment = errors.New("the hub does not accept this device's token (unknown or revoked): enroll the device again with `roomrelay enroll`")
	// ErrProtocolVersion means the hub closed the connection because it does
	// not speak this agent's protocol version.
	ErrProtocolVersion = errors.New("the hub speaks another protocol version: upgrade roomrelay on the older side")
)

// Handler runs one command. Its ctx carries the command's deadline and is
// cancelled by a cancel frame or on shutdown. The returned value is marshalled
// to JSON as the result; an error is sent as a *relay.Error (any other error
// becomes internal).
type Handler func(ctx context.Context, cmd *relay.Command) (any, error)

const (
	writeWait = 10 * time.Second // bound on one frame write
	closeWait = time.Second      // how long to wait for the hub's close echo
	outBuffer = 64
	// skewTolerance: below it the hub's and the device's clocks are treated
	// as equal; above it deadlines are judged on the hub's clock.
	skewTolerance = 2 * time.Second
)

// Agent is the device daemon core. Create it with New, register handlers,
// then call Run once.
type Agent struct {
	cfg     Config
	connURL string
	log     *slog.Logger
	clock   Clock
	outbox  *outbox

	hmu      sync.RWMutex
	handlers map[string]Handler

	running atomic.Bool
	held    atomic.Bool  // AnnounceSleep: do not reconnect until Resume or a wake
	offset  atomic.Int64 // hub clock minus device clock, in ns

	kick     chan struct{}      // events were queued
	wake     chan struct{}      // the wall clock jumped
	retry    chan struct{}      // RetryNow: skip the backoff wait
	resume   chan struct{}      // Resume was called
	sleepReq chan chan struct{} // AnnounceSleep; closed when done

	smu          sync.Mutex
	status       Status
	fmu          sync.Mutex    // serialises status file writes
	lazyStatus   atomic.Bool   // statusLoop runs: counters are written by it
	statusNudge  chan struct{} // a counter changed
	statusWrites atomic.Int64  // status file writes, for tests
	maxInFlight  atomic.Int64  // SetMaxInFlight; Config.MaxInFlight at first

	// Dispatcher state, valid during Run.
	dmu       sync.Mutex
	calls     map[string]*call
	inflight  int
	idle      chan struct{} // closed when inflight drops to 0 (waitIdle)
	stopping  bool
	stopBy    time.Time // end of the shutdown grace
	store     *dedupeStore
	cmdCtx    context.Context
	cmdCancel context.CancelFunc
	cmdWG     sync.WaitGroup
}

// New validates cfg, applies defaults, creates the state directory (0700)
// and loads the persisted event outbox. It opens no connection.
func New(cfg Config) (*Agent, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	cfg.setDefaults()
	u, _ := ConnectURL(cfg.HubURL) // validated above
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("agent state directory: %w", err)
	}
	ob, err := loadOutbox(cfg.StateDir, cfg.MaxQueuedEvents)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:      cfg,
		connURL:  u,
		log:      cfg.Logger.With("component", "agent"),
		clock:    cfg.Clock,
		outbox:   ob,
		handlers: make(map[string]Handler),
		kick:     make(chan struct{}, 1),
		wake:     make(chan struct{}, 1),
		retry:    make(chan struct{}, 1),
		resume:   make(chan struct{}, 1),
		sleepReq: make(chan chan struct{}),
		calls:    make(map[string]*call),

		statusNudge: make(chan struct{}, 1),
	}
	a.maxInFlight.Store(int64(cfg.MaxInFlight))
	a.status = Status{
		State:        StateStopped,
		Hub:          cfg.HubURL,
		DeviceID:     cfg.DeviceID,
		PID:          os.Getpid(),
		QueuedEvents: ob.len(),
		Notes:        slices.Clone(cfg.Notes),
	}
	return a, nil
}

// Register adds a handler for the command name. Commands without a handler
// are refused with command_not_allowed. Register before Run.
func (a *Agent) Register(name string, h Handler) {
	a.hmu.Lock()
	defer a.hmu.Unlock()
	a.handlers[name] = h
}

func (a *Agent) handler(name string) Handler {
	a.hmu.RLock()
	defer a.hmu.RUnlock()
	return a.handlers[name]
}

// Status returns a snapshot of the agent's state.
func (a *Agent) Status() Status {
	a.smu.Lock()
	defer a.smu.Unlock()
	return a.status
}

// setStatus applies a state change (connected, disconnected, a problem)
// and writes the status file at once, on the caller's goroutine (the
// supervisor's or Run's, never a socket reader's).
func (a *Agent) setStatus(f func(*Status)) {
	a.smu.Lock()
	f(&a.status)
	a.status.UpdatedAt = a.clock.Now()
	a.smu.Unlock()
	a.writeStatus()
}

// setCounts updates counters (in flight, queued events). While Run runs,
// the file follows at most once per statusEvery, written by the status
// writer Run owns, so no command waits on a file write; otherwise it is
// written at once.
func (a *Agent) setCounts(f func(*Status)) {
	a.smu.Lock()
	f(&a.status)
	a.status.UpdatedAt = a.clock.Now()
	a.smu.Unlock()
	if !a.lazyStatus.Load() {
		a.writeStatus()
		return
	}
	select {
	case a.statusNudge <- struct{}{}:
	default: // a write is already due
	}
}

// writeStatus writes the latest snapshot. Writes are serialised and each
// writes the snapshot taken under the lock, so the file never goes back in
// time.
func (a *Agent) writeStatus() {
	a.fmu.Lock()
	defer a.fmu.Unlock()
	a.statusWrites.Add(1)
	snap := a.Status()
	// Machine times are UTC (RFC 3339 with Z), whatever the device's zone.
	for _, t := range []*time.Time{&snap.ConnectedSince, &snap.LastErrorAt, &snap.NextRetryAt, &snap.UpdatedAt} {
		if !t.IsZero() {
			*t = t.UTC()
		}
	}
	b, err := jsonMarshalIndent(snap)
	if err == nil {
		err = writeFileAtomic(statusPath(a.cfg.StateDir), b, false)
	}
	if err != nil {
		a.log.Warn("cannot write status file", "err", err)
	}
}

// statusEvery is how often, at most, counter changes reach the status file.
const statusEvery = time.Second

// statusLoop writes the status file after counter changes, at most once
// per statusEvery. It wakes only when nudged: an idle agent gains no wakeups.
// On return, Run's last setStatus writes the final state.
func (a *Agent) statusLoop(ctx context.Context) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.statusNudge:
		}
		if wait := statusEvery - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		a.writeStatus()
		last = time.Now()
	}
}

func (a *Agent) recordError(err error) {
	a.setStatus(func(s *Status) {
		s.LastError = err.Error()
		s.LastErrorAt = a.clock.Now()
	})
}

// SendEvent queues ev for the hub. The queue is persisted in the state
// directory and sent in order as soon as the agent is online, so an event
// (e.g. an approval) survives the hub being unreachable and an agent
// restart. It returns once the event is durably queued; ErrOutboxFull if the
// agent was offline so long that the queue filled up.
func (a *Agent) SendEvent(ctx context.Context, ev relay.Event) error {
	if ev.Event == "" {
		return errors.New("agent: event has no name")
	}
	if ev.Time.IsZero() {
		ev.Time = a.clock.Now().UTC()
	}
	b, err := relay.Encode(&ev)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if len(b) > a.cfg.MaxFrame {
		return fmt.Errorf("agent: event %q of %d bytes exceeds the %d-byte frame limit", ev.Event, len(b), a.cfg.MaxFrame)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := a.outbox.push(ev); err != nil {
		return err
	}
	a.setCounts(func(s *Status) { s.QueuedEvents = a.outbox.len() })
	select {
	case a.kick <- struct{}{}:
	default:
	}
	return nil
}

// AnnounceSleep tells the hub the device is going to sleep (a sleeping
// event, then a clean close) and holds off reconnecting until Resume or a
// wall-clock jump. Offline, it only holds off. It returns when the
// connection is closed or ctx ends (a sleep inhibitor's delay, typically).
func (a *Agent) AnnounceSleep(ctx context.Context) error {
	a.held.Store(true)
	if !a.running.Load() {
		return nil
	}
	done := make(chan struct{})
	select {
	case a.sleepReq <- done:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RetryNow makes an agent that is waiting out a reconnect backoff dial at
// once (`roomrelay reconnect`, after the owner fixed the network or the
// hub came back). Online or dialling, it changes nothing.
func (a *Agent) RetryNow() {
	select {
	case a.retry <- struct{}{}:
	default:
	}
}

// Resume ends the hold set by AnnounceSleep: the agent reconnects at once.
func (a *Agent) Resume() {
	a.held.Store(false)
	select {
	case a.resume <- struct{}{}:
	default:
	}
}

// hubNow is the current time on the hub's clock, as far as the welcome told.
func (a *Agent) hubNow() time.Time {
	return a.clock.Now().Add(time.Duration(a.offset.Load()))
}

// Run connects and serves until ctx is cancelled (returns nil after a clean
// close), the hub refuses the device (ErrNeedsEnrollment) or speaks another
// protocol version (ErrProtocolVersion). Every goroutine it starts has ended
// when it returns. Run may be called only once at a time.
func (a *Agent) Run(ctx context.Context) (err error) {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("agent: Run is already running")
	}
	defer a.running.Store(false)

	store, err := openDedupe(ctx, a.cfg.StateDir, a.clock, a.cfg.DedupeTTL, a.cfg.DedupeMax, a.cfg.DedupeMaxBytes)
	if err != nil {
		a.recordError(err)
		a.setStatus(func(s *Status) { s.State = StateError })
		return err
	}
	defer store.Close()

	a.dmu.Lock()
	a.store = store
	a.stopping = false
	a.cmdCtx, a.cmdCancel = context.WithCancel(context.WithoutCancel(ctx))
	a.dmu.Unlock()
	defer a.cmdCancel()

	a.held.Store(false) // a sleep announced while not running is over
	a.log.Info("agent starting", "hub", a.cfg.HubURL, "device", a.cfg.DeviceID, "version", a.cfg.Version)
	var wg sync.WaitGroup
	wctx, stopWatch := context.WithCancel(ctx)
	wg.Go(func() { a.watchWallClock(wctx) })
	a.lazyStatus.Store(true)
	wg.Go(func() { a.statusLoop(wctx) })

	err = a.supervise(ctx)

	stopWatch()
	a.finishCommands()
	wg.Wait()
	a.lazyStatus.Store(false)

	a.setStatus(func(s *Status) {
		switch {
		case errors.Is(err, ErrNeedsEnrollment):
			s.State = StateNeedsEnrollment
		case err != nil:
			s.State = StateError
		default:
			s.State = StateStopped
		}
		s.SessionID = ""
		s.ConnectedSince = time.Time{}
		s.NextRetryAt = time.Time{}
		s.InFlight = 0
	})
	if err != nil {
		a.recordError(err)
		a.log.Error("agent stopped", "err", err)
	} else {
		a.log.Info("agent stopped")
	}
	return err
}

// finishCommands gives in-flight commands ShutdownGrace to finish (their
// results are stored for a redelivery even if no session can carry them),
// then cancels them and waits as long again.
func (a *Agent) finishCommands() {
	if !a.waitIdle(a.beginStopping()) {
		a.log.Warn("cancelling in-flight commands at shutdown", "in_flight", a.inFlight())
	}
	a.cmdCancel()
	if !a.waitIdle(a.cfg.ShutdownGrace) {
		// A handler that ignores its ctx; waiting longer would hang the service stop.
		a.log.Error("handlers did not return after cancellation; stopping without them", "in_flight", a.inFlight())
		return
	}
	a.cmdWG.Wait()
}

// beginStopping refuses new commands from now on and returns how much of
// the shutdown grace is left (one grace in total, wherever it is spent).
func (a *Agent) beginStopping() time.Duration {
	a.dmu.Lock()
	defer a.dmu.Unlock()
	if !a.stopping {
		a.stopping = true
		a.stopBy = time.Now().Add(a.cfg.ShutdownGrace)
	}
	return time.Until(a.stopBy)
}

func (a *Agent) inFlight() int {
	a.dmu.Lock()
	defer a.dmu.Unlock()
	return a.inflight
}

// waitIdle waits until no command is in flight or d passed.
func (a *Agent) waitIdle(d time.Duration) bool {
	a.dmu.Lock()
	if a.inflight == 0 {
		a.dmu.Unlock()
		return true
	}
	if a.idle == nil {
		a.idle = make(chan struct{})
	}
	idle := a.idle
	a.dmu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return a.inFlight() == 0
	}
}

// endKind says why a session (or a connection attempt) ended.
type endKind int

const (
	endError       endKind = iota // anything unexpected: back off
	endShutdown                   // ctx cancelled
	endRevoked                    // close 4003
	endVersion                    // close 4001
	endReplaced                   // close 4009: another instance of this device
	endDrain                      // the hub asked us to move to a new session
	endDrainClosed                // a draining node closed the session before the move: wait out its delay
	endWake                       // the wall clock jumped: reconnect now
	endSleep                      // AnnounceSleep
)

type sessionEnd struct {
	kind      endKind
	err       error
	prev      *handover     // endDrain: the old session, still serving
	sleepDone chan struct{} // endSleep
	after     time.Duration // endDrainClosed: what is left of the drain delay
	online    bool          // a welcome was received
	since     time.Time     // when it was received
}

// supervise is the connection loop: dial, serve, decide how long to wait.
func (a *Agent) supervise(ctx context.Context) error {
	attempt := 0 // consecutive failures since the last stable connection
	sessions := 0
	// A session handed over by a draining hub node keeps serving while the
	// next one is dialled; it is closed once that one is up, or given up.
	var prev *handover
	prevTries := 0
	var handoverWG sync.WaitGroup
	defer handoverWG.Wait()
	defer func() {
		if prev != nil {
			prev.finish(0)
		}
	}()
	for {
		if ctx.Err() != nil {
			return nil
		}
		if a.held.Load() {
			if stop := a.holdForSleep(ctx); stop {
				return nil
			}
		}
		// A pending wake or retry request is satisfied by the dial we are
		// about to make.
		select {
		case <-a.wake:
		default:
		}
		select {
		case <-a.retry:
		default:
		}
		a.setStatus(func(s *Status) {
			s.State = StateConnecting
			s.NextRetryAt = time.Time{}
		})
		end := a.connect(ctx, &sessions, prev, &handoverWG)
		if end.online {
			prev = nil // connect started its finish
		}
		if end.online && a.clock.Now().Sub(end.since) >= a.cfg.Backoff.ResetAfter {
			attempt = 0
		}
		if prev != nil && end.kind == endError {
			// The new session did not come up (the load balancer may have
			// picked the draining node again): retry soon while the old
			// one still serves.
			if prevTries++; prevTries < maxHandoverTries && prev.alive() {
				a.log.Info("next session not up yet; retrying while the old one serves", "err", end.err, "try", prevTries)
				if stop := a.wait(ctx, time.Duration(200+a.cfg.Rand(600))*time.Millisecond); stop {
					return nil
				}
				continue
			}
			prev.finish(0)
			prev = nil
		}
		a.setStatus(func(s *Status) {
			s.SessionID = ""
			s.ConnectedSince = time.Time{}
		})
		if end.err != nil && end.kind != endShutdown {
			a.recordError(end.err)
		}
		wait := time.Duration(-1) // -1: back off
		switch end.kind {
		case endShutdown:
			return nil
		case endRevoked:
			a.setStatus(func(s *Status) { s.State = StateNeedsEnrollment })
			return end.err
		case endVersion:
			a.setStatus(func(s *Status) { s.State = StateError })
			return end.err
		case endReplaced:
			a.log.Warn("the hub replaced this session with a newer one of the same device: is another roomrelay agent running with this device's identity?",
				"device", a.cfg.DeviceID)
		case endDrain:
			// Dial now; the old session serves meanwhile. No penalty: the
			// hub is fine and directs us.
			prev, prevTries, attempt = end.prev, 0, 0
			continue
		case endDrainClosed:
			// The node asked for this delay to spread its agents' return
			// (it had nowhere to move them, or went first): keep to it,
			// without a failure's penalty.
			a.log.Info("the draining hub node closed the session; reconnecting after the delay it asked for", "after", end.after)
			wait, attempt = end.after, 0
		case endWake:
			a.log.Info("wall clock jumped (wake from sleep?): reconnecting now")
			continue
		case endSleep:
			close(end.sleepDone)
			continue
		default:
			a.log.Warn("connection to the hub failed", "err", end.err, "attempt", attempt+1)
		}
		if wait < 0 {
			max := a.cfg.Backoff.Max(attempt)
			wait = time.Duration(a.cfg.Rand(int64(max) + 1))
			attempt++
		}
		if stop := a.wait(ctx, wait); stop {
			return nil
		}
	}
}

// wait sleeps d on the agent's clock in state backoff. A wall-clock jump
// cuts it short; AnnounceSleep turns it into a hold. It reports true if ctx
// ended.
func (a *Agent) wait(ctx context.Context, d time.Duration) bool {
	a.setStatus(func(s *Status) {
		s.State = StateBackoff
		s.NextRetryAt = a.clock.Now().Add(d)
	})
	t := a.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return true
	case <-t.C():
	case <-a.wake:
		a.log.Info("wall clock jumped (wake from sleep?): skipping the backoff wait")
	case <-a.retry:
		a.log.Info("asked to retry now: skipping the backoff wait")
	case done := <-a.sleepReq:
		a.held.Store(true)
		close(done)
	}
	return false
}

// holdForSleep waits, after AnnounceSleep, for Resume, a wake or ctx.
func (a *Agent) holdForSleep(ctx context.Context) bool {
	a.setStatus(func(s *Status) {
		s.State = StateSleeping
		s.NextRetryAt = time.Time{}
	})
	for a.held.Load() {
		select {
		case <-ctx.Done():
			return true
		case <-a.resume:
		case <-a.wake:
			a.held.Store(false)
		case done := <-a.sleepReq:
			close(done)
		}
	}
	return false
}

// watchWallClock detects a wake from sleep: the monotonic clock stops while
// the machine is suspended and the wall clock does not, so between two ticks
// the wall clock runs ahead. The connection may then be dead without any
// error yet (the hub has long dropped it), and a backoff wait is pointless.
func (a *Agent) watchWallClock(ctx context.Context) {
	t := a.clock.NewTicker(a.cfg.WakeCheck)
	defer t.Stop()
	prevWall, prevMono := a.clock.Now().Round(0), a.clock.Monotonic()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		wall, mono := a.clock.Now().Round(0), a.clock.Monotonic()
		jump := wall.Sub(prevWall) - (mono - prevMono)
		prevWall, prevMono = wall, mono
		if jump > a.cfg.WakeThreshold {
			a.log.Info("wall clock jumped ahead of the monotonic clock", "jump", jump.Round(time.Second))
			a.held.Store(false)
			select {
			case a.wake <- struct{}{}:
			default:
			}
		}
	}
}

// dial opens the websocket. A 401 is final (ErrNeedsEnrollment).
func (a *Agent) dial(ctx context.Context) (*websocket.Conn, error) {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+a.cfg.Token)
	h.Set("User-Agent", "roomrelay-agent/"+a.cfg.Version)
	dctx, cancel := context.WithTimeout(ctx, a.cfg.HandshakeTimeout)
	defer cancel()
	conn, resp, err := a.cfg.Dial(dctx, a.connURL, h)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return nil, fmt.Errorf("%w (HTTP 401 from %s)", ErrNeedsEnrollment, a.cfg.HubURL)
		}
		if resp != nil {
			return nil, fmt.Errorf("connect to hub: HTTP %s: %w", resp.Status, err)
		}
		if ex := tlsfiles.Explain(err); ex != nil {
			return nil, fmt.Errorf("connect to hub: %w", ex)
		}
		return nil, fmt.Errorf("connect to hub: %w", err)
	}
	if p := conn.Subprotocol(); p != relay.Subprotocol {
		conn.Close()
		return nil, fmt.Errorf("connect to hub: it answered with subprotocol %q, want %q (is this a roomrelay hub of a matching version?)", p, relay.Subprotocol)
	}
	return conn, nil
}

// maxHandoverTries bounds the dials made while a handed-over session still
// serves.
const maxHandoverTries = 5

// connect dials, does the hello/welcome handshake and serves the session.
// With prev (a handed-over session) it closes prev once the new session is
// up, in a goroutine on wg.
func (a *Agent) connect(ctx context.Context, sessions *int, prev *handover, wg *sync.WaitGroup) sessionEnd {
	conn, err := a.dial(ctx)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return sessionEnd{kind: endShutdown}
		case errors.Is(err, ErrNeedsEnrollment):
			return sessionEnd{kind: endRevoked, err: err}
		}
		return sessionEnd{kind: endError, err: err}
	}
	// Reads below block on the socket; a cancelled ctx must not wait for
	// the handshake timeout.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	w, err := a.handshake(conn)
	if !stop() || ctx.Err() != nil {
		conn.Close()
		return sessionEnd{kind: endShutdown}
	}
	if err != nil {
		conn.Close()
		end := classifyReadErr(err)
		end.err = fmt.Errorf("handshake: %w", end.err)
		return end
	}

	hb := clampHeartbeat(w.Heartbeat())
	a.offset.Store(0)
	if !w.ServerTime.IsZero() {
		if off := w.ServerTime.Sub(a.clock.Now()); off > skewTolerance || off < -skewTolerance {
			a.offset.Store(int64(off))
			a.log.Warn("device clock differs from the hub's; judging deadlines on the hub's clock", "offset", off.Round(time.Millisecond))
		}
	}
	since := a.clock.Now()
	*sessions++
	a.setStatus(func(s *Status) {
		s.State = StateOnline
		s.SessionID = w.SessionID
		s.ConnectedSince = since
		s.NextRetryAt = time.Time{}
		if *sessions > 1 {
			s.Reconnects++
		}
	})
	a.log.Info("online", "session", w.SessionID, "heartbeat", hb)
	if prev != nil {
		wg.Go(func() { prev.finish(maxHandoverWait) })
	}

	end := a.serve(ctx, conn, hb)
	end.online, end.since = true, since
	return end
}

// handshake sends hello and reads welcome.
func (a *Agent) handshake(conn *websocket.Conn) (*relay.Welcome, error) {
	conn.SetReadLimit(int64(a.cfg.MaxFrame))
	var policy []relay.ProjectPolicy
	if a.cfg.Policy != nil {
		policy = a.cfg.Policy()
	}
	rooms := []relay.RoomEntry{} // never nil: nil would read as an agent without a directory
	if a.cfg.Rooms != nil {
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.HandshakeTimeout)
		if r := a.cfg.Rooms(ctx); r != nil {
			rooms = r
		}
		cancel()
	}
	b, err := relay.Encode(&relay.Hello{
		Protocol:     relay.ProtocolVersion,
		AgentVersion: a.cfg.Version,
		DeviceID:     a.cfg.DeviceID,
		OS:           a.cfg.OS,
		Policy:       policy,
		Rooms:        rooms,
	})
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(a.cfg.HandshakeTimeout)
	conn.SetWriteDeadline(deadline)
	if err := conn.WriteMessage(websocket.TextMessage, b); err != nil {
		return nil, fmt.Errorf("send hello: %w", err)
	}
	conn.SetReadDeadline(deadline)
	_, data, err := conn.ReadMessage()
	if err != nil {
		return nil, fmt.Errorf("wait for welcome: %w", err)
	}
	f, err := relay.Decode(data, a.cfg.MaxFrame)
	if err != nil {
		closeWith(conn, err)
		return nil, fmt.Errorf("bad welcome from hub: %w", err)
	}
	w, ok := f.(*relay.Welcome)
	if !ok {
		err := &relay.ProtocolError{Close: relay.CloseProtocolError, Reason: fmt.Sprintf("expected welcome, got %s", f.FrameType())}
		closeWith(conn, err)
		return nil, err
	}
	return w, nil
}

func clampHeartbeat(d time.Duration) time.Duration {
	return min(max(d, 10*time.Millisecond), 10*time.Minute)
}

// closeWith sends the close frame a protocol error calls for.
func closeWith(conn *websocket.Conn, err error) {
	code, reason := relay.CloseProtocolError, err.Error()
	var pe *relay.ProtocolError
	if errors.As(err, &pe) {
		code, reason = pe.Close, pe.Reason
	}
	if len(reason) > 120 {
		reason = reason[:120]
	}
	conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(closeWait))
}

// classifyReadErr maps how the hub ended a connection to what to do next.
func classifyReadErr(err error) sessionEnd {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		switch ce.Code {
		case relay.CloseRevoked:
			return sessionEnd{kind: endRevoked, err: fmt.Errorf("%w (hub closed the connection: %s)", ErrNeedsEnrollment, ce.Text)}
		case relay.CloseVersion:
			return sessionEnd{kind: endVersion, err: fmt.Errorf("%w (hub: %s)", ErrProtocolVersion, ce.Text)}
		case relay.CloseReplaced:
			return sessionEnd{kind: endReplaced, err: fmt.Errorf("hub replaced this session with a newer one of the same device: %w", err)}
		}
		return sessionEnd{kind: endError, err: fmt.Errorf("hub closed the connection: %w", err)}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return sessionEnd{kind: endError, err: fmt.Errorf("no frame from the hub within the read deadline (connection lost silently): %w", err)}
	}
	return sessionEnd{kind: endError, err: err}
}
