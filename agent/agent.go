package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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
	// stateSent is when each state event kind was last sent (StatePace);
	// only the session loop (serve, one at a time) uses it.
	stateSent map[string]time.Time

	hmu      sync.RWMutex
	handlers map[string]Handler

	running atomic.Bool
	held    atomic.Bool  // AnnounceSleep: do not reconnect until Resume or a wake
	offset  atomic.Int64 // hub clock minus device clock, in ns

	kick     chan struct{}      // events were queued
	wake     chan struct{}      // the wall clock jumped, or the OS said it woke (Resume)
	osWake   atomic.Bool        // the OS reports sleep and wake: no wall-clock tick
	osWakeCh chan struct{}      // osWake changed
	retry    chan struct{}      // RetryNow: skip the backoff wait
	sleepReq chan chan struct{} // AnnounceSleep; closed when done

	smu          sync.Mutex
	status       Status
	fmu          sync.Mutex    // serialises status file writes
	lazyStatus   atomic.Bool   // statusLoop runs: counters are written by it
	statusNudge  chan struct{} // a counter changed
	statusWrites atomic.Int64  // status file writes, for tests

	cmds dispatcher // the command half: see dispatch.go
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
		osWakeCh: make(chan struct{}, 1),
		sleepReq: make(chan chan struct{}),

		statusNudge: make(chan struct{}, 1),
	}
	a.cmds.a = a
	a.cmds.max.Store(int64(cfg.MaxInFlight))
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

// SendEvent queues ev for the hub. The queue is persisted in the state
// directory and sent in order as soon as the agent is online, so an event
// (e.g. an approval) survives the hub being unreachable and an agent
// restart. It returns once the event is durably queued; ErrOutboxFull if the
// agent was offline so long that the queue filled up. A state event
// (StateEvents) replaces the queued one of its kind, is never refused, and
// each kind goes at most once per StatePace, so local churn sends little.
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

// Resume tells the agent the machine woke up: it ends the hold set by
// AnnounceSleep and, like a wall-clock jump, skips a backoff wait or
// replaces a connection still up from before the sleep (the hub has most
// likely dropped it), so the agent reconnects at once.
func (a *Agent) Resume() {
	a.held.Store(false)
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// SetOSWakeNotices says whether the operating system reports sleep and wake
// to this agent (agent/power's Watch, wired to AnnounceSleep and Resume, is
// subscribed). While it does, the wall-clock wake detector does not tick:
// its periodic check was the largest source of an idle agent's wakeups, and
// Resume reconnects at once without it. Turn it off when the notifications
// end, and the detector ticks again.
func (a *Agent) SetOSWakeNotices(on bool) {
	if a.osWake.Swap(on) == on {
		return
	}
	select {
	case a.osWakeCh <- struct{}{}:
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

	a.cmds.start(ctx, store)
	defer a.cmds.cancel()

	a.held.Store(false) // a sleep announced while not running is over
	a.log.Info("agent starting", "hub", a.cfg.HubURL, "device", a.cfg.DeviceID, "version", a.cfg.Version)
	var wg sync.WaitGroup
	wctx, stopWatch := context.WithCancel(ctx)
	wg.Go(func() { a.watchWallClock(wctx) })
	a.lazyStatus.Store(true)
	wg.Go(func() { a.statusLoop(wctx) })

	err = a.supervise(ctx)

	stopWatch()
	a.cmds.finishCommands()
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
