package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

// DefaultMaxInFlight is the in-flight bound when Config sets none; it is
// the policy's default too (allowlist.DefaultInFlight).
const DefaultMaxInFlight = 64

// SetMaxInFlight changes the in-flight bound (the daemon applies the
// policy's in-flight setting on each load). Commands already running are
// not affected; n < 1 is ignored.
func (a *Agent) SetMaxInFlight(n int) {
	if n >= 1 {
		a.cmds.max.Store(int64(n))
	}
}

// dispatcher is the Agent's command half: the in-flight bound, joining
// duplicate deliveries, deadlines, cancel, the dedupe store and the wait
// for running commands at shutdown. The supervisor (agent.go, session.go)
// is the connection half; it hands each command frame to dispatch and
// never touches this state. The state is valid during Run.
type dispatcher struct {
	a *Agent // its configuration, handlers, clock and status

	mu       sync.Mutex
	calls    map[string]*call
	inflight int
	idle     chan struct{} // closed when inflight drops to 0 (waitIdle)
	stopping bool
	stopBy   time.Time // end of the shutdown grace
	store    *dedupeStore
	ctx      context.Context // commands' parent: outlives Run's ctx by the grace
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	max      atomic.Int64 // the in-flight bound (SetMaxInFlight)

	// Commands run on workers: goroutines that stay, up to maxIdleWorkers
	// of them, for the next command (run). A goroutine per command grew
	// its stack anew for every one (the JSON decoders and SQLite run deep):
	// a fifth of a read's CPU on the agent in bench/roundtrip. A worker
	// waits on a channel, so an idle agent gains no wakeups; they end with
	// the Run (ctx).
	work  chan func()   // to a waiting worker (unbuffered)
	idleW *atomic.Int32 // workers waiting on work, this Run's
}

// maxIdleWorkers bounds the workers that wait for the next command.
const maxIdleWorkers = 4

// start readies the dispatcher for a Run with its dedupe store.
func (d *dispatcher) start(ctx context.Context, store *dedupeStore) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.store = store
	d.calls = make(map[string]*call)
	d.stopping = false
	d.ctx, d.cancel = context.WithCancel(context.WithoutCancel(ctx))
	d.work, d.idleW = make(chan func()), new(atomic.Int32)
}

// run runs f on a waiting worker, or on a new one. Workers count in wg,
// so finishCommands waits for them too (they end once ctx is cancelled).
func (d *dispatcher) run(ctx context.Context, work chan func(), idle *atomic.Int32, f func()) {
	select {
	case work <- f:
	default:
		d.wg.Add(1)
		go d.worker(ctx, work, idle, f)
	}
}

func (d *dispatcher) worker(ctx context.Context, work chan func(), idle *atomic.Int32, f func()) {
	defer d.wg.Done()
	for {
		f()
		if idle.Add(1) > maxIdleWorkers {
			idle.Add(-1)
			return
		}
		select {
		case f = <-work:
			idle.Add(-1)
		case <-ctx.Done():
			idle.Add(-1)
			return
		}
	}
}

// call is one command id being handled. Duplicate deliveries that arrive
// meanwhile wait on it and get the same result (singleflight).
type call struct {
	cmd       *relay.Command
	cancel    context.CancelFunc // set once the handler runs
	cancelled bool               // a cancel frame arrived
	refused   bool               // the Guard refused it (set by execute, read after)
	waiters   []delivery
}

// delivery is one arrival of a command frame, answered on its own session.
type delivery struct {
	s     *session
	cmd   *relay.Command
	start time.Time
}

// dispatch is called by the reader for each command frame. It never blocks
// on a handler: it answers busy at once, joins a running call for the same
// id, or hands the call to a worker (owned by Run through wg).
func (d *dispatcher) dispatch(s *session, cmd *relay.Command) {
	dl := delivery{s: s, cmd: cmd, start: time.Now()}
	s.enter() // left in answer
	d.mu.Lock()
	if c, ok := d.calls[cmd.ID]; ok {
		c.waiters = append(c.waiters, dl)
		d.mu.Unlock()
		return
	}
	var refuse *relay.Error
	switch {
	case d.stopping:
		refuse = relay.Errorf(relay.CodeBusy, "the agent is shutting down; retry when the device is back online")
	case d.inflight >= int(d.max.Load()):
		refuse = relay.Errorf(relay.CodeBusy, "the device is already running %d commands, its limit (the policy's in-flight); retry shortly", d.inflight)
	}
	if refuse != nil {
		d.mu.Unlock()
		d.answer(dl, failure(cmd.ID, refuse), false)
		return
	}
	c := &call{cmd: cmd}
	d.calls[cmd.ID] = c
	d.inflight++
	n := d.inflight
	d.wg.Add(1)
	ctx, work, idle := d.ctx, d.work, d.idleW
	d.mu.Unlock()
	d.a.setCounts(func(st *Status) { st.InFlight = n })
	d.run(ctx, work, idle, func() { d.handle(dl, c) })
}

func (d *dispatcher) cancelCommand(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.calls[id]; ok {
		c.cancelled = true
		if c.cancel != nil {
			c.cancel()
		}
	}
}

// handle executes a call and answers its delivery and any duplicates.
func (d *dispatcher) handle(first delivery, c *call) {
	defer d.wg.Done()
	res := d.execute(c)

	d.mu.Lock()
	// Collect the waiters and forget the call under one lock: a duplicate
	// arriving after this finds the stored result in the dedupe store.
	waiters := c.waiters
	delete(d.calls, c.cmd.ID)
	d.mu.Unlock()

	d.answer(first, res, c.refused)
	for _, w := range waiters {
		dup := d.forDuplicate(c.cmd, w.cmd, res)
		d.answer(w, dup, c.refused && dup == res)
	}

	// Only now is the command out of flight: shutdown waits for this, so
	// the results above are written before the close frame.
	d.mu.Lock()
	d.inflight--
	n := d.inflight
	if n == 0 && d.idle != nil {
		close(d.idle)
		d.idle = nil
	}
	d.mu.Unlock()
	d.a.setCounts(func(st *Status) { st.InFlight = n })
}

// forDuplicate returns the result a duplicate delivery gets: the same one,
// unless the id was reused for a different command.
func (d *dispatcher) forDuplicate(orig, dup *relay.Command, res *relay.Result) *relay.Result {
	if orig.Name != dup.Name || orig.ProjectID != dup.ProjectID || argsHash(orig.Args) != argsHash(dup.Args) {
		return failure(dup.ID, relay.Errorf(relay.CodeIdempotencyConflict,
			"command id %q was already used for %s in project %s with other arguments; use a new id", dup.ID, orig.Name, orig.ProjectID))
	}
	return res
}

// execute decides and, if allowed, runs a command at most once.
func (d *dispatcher) execute(c *call) *relay.Result {
	cmd := c.cmd
	// Store operations outlive a cancelled command: its result must be kept.
	bg := context.WithoutCancel(d.ctx)

	e, err := d.store.lookup(bg, cmd.ID)
	if err != nil {
		d.a.log.Error("dedupe store unavailable; refusing command", "id", cmd.ID, "err", err)
		return failure(cmd.ID, relay.Errorf(relay.CodeInternal, "the device cannot record commands (%v); not run", err))
	}
	if e != nil {
		return d.redelivered(bg, cmd, e)
	}

	now := d.a.hubNow()
	if !now.Before(cmd.Deadline) {
		return failure(cmd.ID, relay.Errorf(relay.CodeExpired,
			"deadline %s passed %s before the device received the command; not run",
			cmd.Deadline.UTC().Format(time.RFC3339Nano), now.Sub(cmd.Deadline).Round(time.Millisecond)))
	}
	h := d.a.handler(cmd.Name)
	if h == nil {
		return failure(cmd.ID, relay.Errorf(relay.CodeCommandNotAllowed, "this device has no command %q", cmd.Name))
	}

	ctx, cancel := context.WithTimeout(d.ctx, cmd.Deadline.Sub(now))
	defer cancel()
	if d.a.cfg.Guard != nil {
		if err := runGuard(ctx, d.a.cfg.Guard, cmd); err != nil {
			var re *relay.Error
			if !errors.As(err, &re) {
				re = relay.Errorf(relay.CodeCommandNotAllowed, "%v", err)
			}
			c.refused = true // read by handle after execute returns
			return failure(cmd.ID, re)
		}
	}

	// A read changes nothing, so running it again is harmless: it needs
	// no durable marks (concurrent duplicates still share one run, through
	// calls). A write is durably marked started before it runs, so that a
	// crash mid-run can never lead to a second run.
	write := !relay.ReadOnlyCommand(cmd.Name)
	if write {
		fresh, err := d.store.markStarted(bg, cmd)
		if err != nil {
			d.a.log.Error("cannot mark command started; refusing it", "id", cmd.ID, "err", err)
			return failure(cmd.ID, relay.Errorf(relay.CodeInternal, "the device cannot record commands (%v); not run", err))
		}
		if !fresh { // another agent process on this state directory got there first
			if e, err := d.store.lookup(bg, cmd.ID); err == nil && e != nil {
				return d.redelivered(bg, cmd, e)
			}
			return failure(cmd.ID, relay.Errorf(relay.CodeInternal, "command %q is already being handled on this device; not run twice", cmd.ID))
		}
	}

	d.mu.Lock()
	c.cancel = cancel
	if c.cancelled {
		cancel()
	}
	d.mu.Unlock()

	val, herr := runHandler(ctx, h, cmd)
	res := d.result(ctx, c, val, herr)
	if write {
		if err := d.store.finish(bg, cmd, res); err != nil {
			d.a.log.Error("cannot store a command result; a redelivery will be told it was interrupted", "id", cmd.ID, "err", err)
		}
	}
	return res
}

// redelivered answers a command id the store already knows.
func (d *dispatcher) redelivered(ctx context.Context, cmd *relay.Command, e *dedupeEntry) *relay.Result {
	if e.Name != cmd.Name || e.Project != cmd.ProjectID || (e.ArgsHash != "" && e.ArgsHash != argsHash(cmd.Args)) {
		return failure(cmd.ID, relay.Errorf(relay.CodeIdempotencyConflict,
			"command id %q was already used for %s in project %s with other arguments; use a new id", cmd.ID, e.Name, e.Project))
	}
	if e.State == stateDone && e.Result != nil {
		return e.Result
	}
	// Started by an earlier agent process that never finished it.
	res := failure(cmd.ID, relay.Errorf(relay.CodeInternal,
		"command %q was interrupted by an agent restart; not re-run (at most once): check the device's state before sending a new command", cmd.ID))
	if err := d.store.finish(ctx, cmd, res); err != nil {
		d.a.log.Error("cannot store a command result", "id", cmd.ID, "err", err)
	}
	return res
}

// runHandler runs h, turning a panic into an error so one bad handler
// cannot take the daemon down.
func runHandler(ctx context.Context, h Handler, cmd *relay.Command) (val any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler for %s panicked: %v\n%s", cmd.Name, p, debug.Stack())
		}
	}()
	return h(ctx, cmd)
}

// runGuard asks the guard; a panic there denies the command.
func runGuard(ctx context.Context, g func(context.Context, *relay.Command) error, cmd *relay.Command) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = relay.Errorf(relay.CodeInternal, "the device's policy check failed (%v); not run", p)
		}
	}()
	return g(ctx, cmd)
}

// result builds the wire result of a handler run.
func (d *dispatcher) result(ctx context.Context, c *call, val any, herr error) *relay.Result {
	id := c.cmd.ID
	if herr != nil {
		var re *relay.Error
		switch {
		case errors.As(herr, &re):
			return failure(id, re)
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return failure(id, relay.Errorf(relay.CodeExpired, "the command's deadline passed while it ran: %v", herr))
		case d.wasCancelled(c):
			return failure(id, relay.Errorf(relay.CodeInternal, "cancelled by the hub before it finished: %v", herr))
		case ctx.Err() != nil:
			return failure(id, relay.Errorf(relay.CodeInternal, "cancelled because the agent is shutting down: %v", herr))
		}
		d.a.log.Warn("command failed", "id", id, "name", c.cmd.Name, "err", herr)
		return failure(id, relay.AsError(herr))
	}
	raw, err := json.Marshal(val)
	if err != nil {
		return failure(id, relay.Errorf(relay.CodeInternal, "the result of %s cannot be encoded: %v", c.cmd.Name, err))
	}
	res := &relay.Result{ID: id, OK: true, Result: raw}
	// The frame must fit the hub's limit, or the hub would drop the
	// connection, with room for the audit head answer adds. A result far
	// below it is not encoded here (answer encodes it): the envelope
	// around raw is at most resultEnvelope bytes beside the id, escaped.
	if len(raw)+6*len(id)+resultEnvelope+auditHeadRoom <= d.a.cfg.MaxFrame {
		return res
	}
	if b, err := relay.Encode(res); err != nil || len(b)+auditHeadRoom > d.a.cfg.MaxFrame {
		return failure(id, relay.Errorf(relay.CodeInternal, "the result of %s is %d bytes, over the %d-byte frame limit", c.cmd.Name, len(b), d.a.cfg.MaxFrame))
	}
	return res
}

// resultEnvelope bounds what a result frame adds around its id and result:
// {"type":"result","id":"","ok":true,"result":}.
const resultEnvelope = 64

func (d *dispatcher) wasCancelled(c *call) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return c.cancelled
}

// auditHeadRoom is what the audit head adds to a result frame, at most:
// `,"audit_head":{"seq":<20 digits>,"hash":"<64 hex>"}`.
const auditHeadRoom = 128

func failure(id string, e *relay.Error) *relay.Result {
	return &relay.Result{ID: id, OK: false, Error: e}
}

// answer audits a delivery and writes its result on the session it came in
// on, from the calling worker (session.write). If that session is gone the
// result is kept only in the dedupe store (when the command ran), where a
// redelivery finds it.
func (d *dispatcher) answer(dl delivery, res *relay.Result, refused bool) {
	defer dl.s.leave()
	if d.a.cfg.Audit != nil {
		d.a.cfg.Audit(dl.cmd, res, time.Since(dl.start), refused)
	}
	// The head after the command's line: the hub records it before the
	// caller has the result, so its anchor is never behind a command the
	// cloud has seen. A copy: a joined duplicate shares res.
	out := res
	if d.a.cfg.AuditHead != nil {
		if h := d.a.cfg.AuditHead(); h != nil {
			withHead := *res
			withHead.AuditHead = h
			out = &withHead
		}
	}
	b, err := relay.Encode(out)
	if err != nil {
		d.a.log.Error("cannot encode a result", "id", res.ID, "err", err)
		return
	}
	if err := dl.s.write(b); err != nil {
		d.a.log.Info("result not sent: the connection it came on is gone; a redelivery gets the stored result", "id", res.ID)
	}
}

// finishCommands gives in-flight commands ShutdownGrace to finish (their
// results are stored for a redelivery even if no session can carry them),
// then cancels them and waits as long again.
func (d *dispatcher) finishCommands() {
	if !d.waitIdle(d.beginStopping()) {
		d.a.log.Warn("cancelling in-flight commands at shutdown", "in_flight", d.inFlight())
	}
	d.cancel()
	if !d.waitIdle(d.a.cfg.ShutdownGrace) {
		// A handler that ignores its ctx; waiting longer would hang the service stop.
		d.a.log.Error("handlers did not return after cancellation; stopping without them", "in_flight", d.inFlight())
		return
	}
	d.wg.Wait()
}

// beginStopping refuses new commands from now on and returns how much of
// the shutdown grace is left (one grace in total, wherever it is spent).
func (d *dispatcher) beginStopping() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.stopping {
		d.stopping = true
		d.stopBy = time.Now().Add(d.a.cfg.ShutdownGrace)
	}
	return time.Until(d.stopBy)
}

func (d *dispatcher) inFlight() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inflight
}

// waitIdle waits until no command is in flight or limit passed.
func (d *dispatcher) waitIdle(limit time.Duration) bool {
	d.mu.Lock()
	if d.inflight == 0 {
		d.mu.Unlock()
		return true
	}
	if d.idle == nil {
		d.idle = make(chan struct{})
	}
	idle := d.idle
	d.mu.Unlock()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return d.inFlight() == 0
	}
}
