package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

// ErrClosed is returned by SmokeRun after Close.
var ErrClosed = errors.New("sandbox pool closed")

// Pool runs smoke-runs in worker processes. Workers start on demand, serve
// one run at a time, are replaced when they die, hit a limit or served
// RecycleAfter runs, and exit after IdleTimeout without work, so an idle
// daemon holds no worker.
type Pool struct {
	cfg Config
	log *slog.Logger
	sem chan struct{}

	mu      sync.Mutex
	idle    []*worker
	closed  bool
	libs    map[string]string
	limits  string
	nextID  uint64
	stats   PoolStats
	workers map[*worker]struct{}
	running int // runs holding a slot

	stop chan struct{} // closed by Close: runs in flight stop
	// idled (cap 1) wakes reap when a worker goes idle: with none idle,
	// reap waits on it instead of ticking (an idle agent has no worker).
	idled chan struct{}
	runs  sync.WaitGroup // runs holding a slot; Add only while not closed
	wg    sync.WaitGroup // the reaper and every worker's waiter
}

// PoolStats counts worker lifecycle events.
type PoolStats struct {
	Spawned  int `json:"spawned"`
	Killed   int `json:"killed"`   // SIGKILLed after the time limit
	Died     int `json:"died"`     // exited on their own during a run
	Recycled int `json:"recycled"` // retired after a limit or RecycleAfter runs
	Reaped   int `json:"reaped"`   // exited after IdleTimeout
	Live     int `json:"live"`
	Running  int `json:"running"` // smoke-runs in flight
	// WorkerPIDs and WorkerRSS (the resident size each last reported)
	// describe the live workers.
	WorkerPIDs []int   `json:"worker_pids,omitempty"`
	WorkerRSS  []int64 `json:"worker_rss,omitempty"`
}

// NewPool returns a pool; workers start with the first SmokeRun. The React
// runtime is loaded (never fetched) on first use: see EnsureRuntime.
func NewPool(cfg Config) (*Pool, error) {
	cfg = cfg.withDefaults()
	if len(cfg.WorkerCommand) == 0 {
		return nil, errors.New("sandbox: Config.WorkerCommand is empty")
	}
	p := &Pool{
		cfg:     cfg,
		log:     cfg.Logger,
		sem:     make(chan struct{}, cfg.Workers),
		stop:    make(chan struct{}),
		idled:   make(chan struct{}, 1),
		workers: map[*worker]struct{}{},
	}
	p.wg.Add(1)
	go p.reap()
	return p, nil
}

// Limits describes the limits the last started worker applied, "" before
// the first one started.
func (p *Pool) Limits() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.limits
}

// Stats returns the lifecycle counters and live workers' RSS.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Live = len(p.workers)
	s.Running = p.running
	s.WorkerPIDs, s.WorkerRSS = nil, nil
	for w := range p.workers {
		s.WorkerPIDs = append(s.WorkerPIDs, w.pid)
		s.WorkerRSS = append(s.WorkerRSS, w.rss)
	}
	return s
}

// runtime loads and verifies the React runtime once; a failure is retried
// on the next call so a later EnsureRuntime takes effect.
func (p *Pool) runtime() (map[string]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.libs != nil {
		return p.libs, nil
	}
	libs, err := loadRuntime(p.cfg)
	if err != nil {
		return nil, err
	}
	p.libs = libs
	return libs, nil
}

// SmokeRun builds files and smoke-runs them in a worker. A snippet's failure
// is a Result with OK false; the error is for the pool's own trouble (closed,
// ctx done, a worker that cannot start).
func (p *Pool) SmokeRun(ctx context.Context, files map[string]string) (*Result, error) {
	start := time.Now()
	libs, err := p.runtime()
	if err != nil {
		return failResult(PhaseRuntimeUnavailable, "%v", err), nil
	}
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.stop:
		return nil, ErrClosed
	}
	defer func() { <-p.sem }()
	if !p.enter() {
		return nil, ErrClosed
	}
	defer p.leave()

	w, err := p.take(ctx, libs)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.nextID++
	id := p.nextID
	p.mu.Unlock()

	resp, err := w.do(ctx, p.stop, WorkerRequest{ID: id, Files: files}, p.cfg.Timeout+p.cfg.KillGrace)
	if err == nil && (resp.Error != "" || resp.ID != id) {
		// A worker that breaks the protocol is not trusted further.
		w.shutdown(p.cfg.KillGrace)
		p.forget(w)
		p.mu.Lock()
		p.stats.Died++
		p.mu.Unlock()
		msg := resp.Error
		if msg == "" {
			msg = fmt.Sprintf("answered request %d, want %d", resp.ID, id)
		}
		p.log.Warn("sandbox worker protocol error", "pid", w.pid, "err", msg)
		res := failResult(PhaseCrash, "the sandbox worker misbehaved: %s", msg)
		res.DurationMS = millis(time.Since(start))
		return res, nil
	}
	if err != nil {
		w.shutdown(p.cfg.KillGrace)
		p.forget(w)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, ErrClosed) {
			return nil, ErrClosed
		}
		res := p.deadWorkerResult(w, err)
		res.DurationMS = millis(time.Since(start))
		return res, nil
	}
	w.runs++
	recycle := resp.Recycle || w.runs >= p.cfg.RecycleAfter
	p.mu.Lock()
	w.rss = resp.RSSBytes
	if recycle {
		p.stats.Recycled++
	}
	p.mu.Unlock()
	if recycle {
		w.shutdown(p.cfg.KillGrace)
		p.forget(w)
	} else {
		p.putIdle(w)
	}
	res := resp.Result
	if res == nil {
		res = failResult(PhaseCrash, "the sandbox worker sent no result")
	}
	res.DurationMS = millis(time.Since(start))
	return res, nil
}

// enter counts a run in flight unless the pool is closed: Close waits for
// the runs it counted, and no run starts a worker after Close.
func (p *Pool) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.running++
	p.runs.Add(1)
	return true
}

func (p *Pool) leave() {
	p.mu.Lock()
	p.running--
	p.mu.Unlock()
	p.runs.Done()
}

// take returns an idle worker or starts one.
func (p *Pool) take(ctx context.Context, libs map[string]string) (*worker, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return w, nil
	}
	p.mu.Unlock()
	return p.spawn(ctx, libs)
}

func (p *Pool) putIdle(w *worker) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		w.shutdown(p.cfg.KillGrace)
		p.forget(w)
		return
	}
	w.idleSince = time.Now()
	p.idle = append(p.idle, w)
	p.mu.Unlock()
	select {
	case p.idled <- struct{}{}:
	default:
	}
}

func (p *Pool) forget(w *worker) {
	p.mu.Lock()
	delete(p.workers, w)
	p.mu.Unlock()
}

// spawnTimeout bounds a worker's start (process start plus compiling React).
const spawnTimeout = 30 * time.Second

func (p *Pool) spawn(ctx context.Context, libs map[string]string) (*worker, error) {
	c := p.cfg.WorkerCommand
	cmd := exec.Command(c[0], c[1:]...)
	cmd.Env = []string{} // empty environment, not the daemon's
	cmd.WaitDelay = p.cfg.KillGrace
	setProcAttr(cmd)
	w := &worker{
		cmd:       cmd,
		responses: make(chan WorkerResponse, 2),
		exited:    make(chan struct{}),
		stderr:    &headBuffer{max: 16 << 10},
	}
	w.stdout = &lineWriter{max: 4 << 20, onLine: w.onLine}
	cmd.Stdout = w.stdout
	cmd.Stderr = w.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox worker: %w", err)
	}
	w.stdin = stdin
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sandbox worker %s: %w", c[0], err)
	}
	w.pid = cmd.Process.Pid
	var mc *memCap
	if p.cfg.MemoryLimitBytes > 0 {
		if mc, err = capMemory(w.pid, p.cfg.MemoryLimitBytes); err != nil {
			// Never run a snippet in a worker without the cap it was asked for.
			cmd.Process.Kill()
			cmd.Wait()
			return nil, fmt.Errorf("start sandbox worker: memory cap: %w", err)
		}
	}
	w.mc = mc
	p.mu.Lock()
	p.stats.Spawned++
	p.workers[w] = struct{}{}
	p.mu.Unlock()
	p.wg.Add(1)
	go func() { // ends when the process exits
		defer p.wg.Done()
		w.waitErr = cmd.Wait()
		mc.Close()
		close(w.exited)
	}()

	init := WorkerRequest{Init: &WorkerInit{
		Libraries:        libs,
		TimeoutMS:        p.cfg.Timeout.Milliseconds(),
		KillGraceMS:      p.cfg.KillGrace.Milliseconds(),
		MemoryLimitBytes: p.cfg.MemoryLimitBytes,
	}}
	resp, err := w.do(ctx, p.stop, init, spawnTimeout)
	if err == nil && !resp.Ready {
		err = fmt.Errorf("not ready: %s", resp.Error)
	}
	if err != nil {
		w.shutdown(p.cfg.KillGrace)
		p.forget(w)
		if errors.Is(err, ErrClosed) {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("start sandbox worker: %w (stderr: %s)", err, relay.Clip(strings.TrimSpace(w.stderr.String()), 500))
	}
	p.mu.Lock()
	w.rss = resp.RSSBytes
	w.capped = resp.DataLimited || mc != nil
	p.limits = resp.Limits
	if mc != nil {
		p.limits += "; " + memCapDescription
	}
	p.mu.Unlock()
	p.log.Debug("sandbox worker started", "pid", w.pid, "limits", resp.Limits)
	return w, nil
}

// reap retires workers idle for longer than IdleTimeout, looking every
// IdleTimeout/2 while there are idle workers and not at all while there are
// none: a ticker running for an empty pool woke an idle agent every 15 s.
func (p *Pool) reap() {
	defer p.wg.Done()
	every := p.cfg.IdleTimeout / 2
	if every < 50*time.Millisecond {
		every = 50 * time.Millisecond
	}
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		p.mu.Lock()
		none := len(p.idle) == 0
		p.mu.Unlock()
		if none {
			select {
			case <-p.stop:
				return
			case <-p.idled:
			}
		}
		t.Reset(every)
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		var old []*worker
		keep := p.idle[:0]
		for _, w := range p.idle {
			if time.Since(w.idleSince) >= p.cfg.IdleTimeout {
				old = append(old, w)
			} else {
				keep = append(keep, w)
			}
		}
		p.idle = keep
		p.stats.Reaped += len(old)
		p.mu.Unlock()
		for _, w := range old {
			w.shutdown(p.cfg.KillGrace)
			p.forget(w)
		}
	}
}

// Close stops every worker and waits for every worker process and
// goroutine of the pool to end. Runs in flight are stopped (their workers
// killed) and return ErrClosed, as do runs waiting for a worker.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	close(p.stop)
	for _, w := range idle {
		w.shutdown(p.cfg.KillGrace)
		p.forget(w)
	}
	// Every worker that is not idle belongs to a run in flight, which
	// stops it; after the runs, nothing starts a worker any more.
	p.runs.Wait()
	p.wg.Wait()
	return nil
}

var (
	errKilled = errors.New("worker killed after the time limit")
	errDied   = errors.New("worker exited")
)

// worker is one worker process; it is used by one SmokeRun at a time.
type worker struct {
	cmd       *exec.Cmd
	pid       int
	stdin     io.WriteCloser
	stdout    *lineWriter
	stderr    *headBuffer
	responses chan WorkerResponse
	exited    chan struct{}
	waitErr   error // set before exited is closed
	capped    bool  // runs under a hard memory cap (RLIMIT_DATA, a Job Object, the footprint watcher)
	mc        *memCap
	runs      int
	rss       int64
	idleSince time.Time
}

func (w *worker) onLine(line []byte) {
	var r WorkerResponse
	if err := json.Unmarshal(line, &r); err != nil {
		r = WorkerResponse{Error: "unreadable response from worker: " + err.Error()}
	}
	select {
	case w.responses <- r:
	default: // a worker that talks out of turn is killed by do's caller
	}
}

// do sends req and waits up to wait for the answer; past that the worker is
// SIGKILLed and errKilled returned. When stop closes first the worker is
// killed and ErrClosed returned.
func (w *worker) do(ctx context.Context, stop <-chan struct{}, req WorkerRequest, wait time.Duration) (WorkerResponse, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return WorkerResponse{}, err
	}
	if _, err := w.stdin.Write(append(data, '\n')); err != nil {
		return WorkerResponse{}, fmt.Errorf("%w: %w", errDied, err)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case r := <-w.responses:
		return r, nil
	case <-w.exited:
		select { // the answer may have come just before the exit
		case r := <-w.responses:
			return r, nil
		default:
		}
		return WorkerResponse{}, errDied
	case <-t.C:
		w.kill()
		return WorkerResponse{}, errKilled
	case <-ctx.Done():
		w.kill()
		return WorkerResponse{}, ctx.Err()
	case <-stop:
		w.kill()
		return WorkerResponse{}, ErrClosed
	}
}

func (w *worker) kill() { _ = w.cmd.Process.Kill() }

// shutdown closes stdin (the worker exits on EOF), kills it after grace,
// and waits for the process to be reaped.
func (w *worker) shutdown(grace time.Duration) {
	_ = w.stdin.Close()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-w.exited:
		return
	case <-t.C:
		w.kill()
	}
	<-w.exited
}

// lineWriter splits the worker's stdout into lines. exec.Cmd's copying
// goroutine is its only writer.
type lineWriter struct {
	buf    []byte
	max    int
	onLine func([]byte)
}

func (l *lineWriter) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			l.buf = append(l.buf, b...)
			break
		}
		l.buf = append(l.buf, b[:i]...)
		l.onLine(l.buf)
		l.buf = l.buf[:0]
		b = b[i+1:]
	}
	if len(l.buf) > l.max {
		return n, errors.New("sandbox worker: response line too long")
	}
	return n, nil
}

// headBuffer keeps the first max bytes written: the worker's stderr, where
// the Go runtime reports a fatal error's reason (e.g. out of memory) first
// and then every goroutine's stack.
type headBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *headBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := t.max - len(t.buf); room > 0 {
		t.buf = append(t.buf, b[:min(room, len(b))]...)
	}
	return len(b), nil
}

func (t *headBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
