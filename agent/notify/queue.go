package notify

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Queue defaults.
const (
	DefaultQueueSize = 16
	// DefaultTimeout bounds one notification: a session bus or osascript
	// that hangs must not hold the queue.
	DefaultTimeout = 5 * time.Second
)

// QueueConfig configures NewQueue.
type QueueConfig struct {
	Notifier Notifier
	Size     int           // notes waiting at most (default DefaultQueueSize)
	Timeout  time.Duration // per Notify call (default DefaultTimeout)
	Logger   *slog.Logger
}

// Queue hands notes to a Notifier from its own goroutine (Run). Post never
// blocks: a note that finds the queue full is dropped and logged.
type Queue struct {
	n       Notifier
	timeout time.Duration
	log     *slog.Logger
	ch      chan Note

	mu     sync.Mutex
	warned map[string]bool // failure causes already logged at warn
}

// NewQueue makes a queue; nothing is sent until Run runs.
func NewQueue(cfg QueueConfig) *Queue {
	if cfg.Size <= 0 {
		cfg.Size = DefaultQueueSize
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Queue{n: cfg.Notifier, timeout: cfg.Timeout, log: cfg.Logger, ch: make(chan Note, cfg.Size), warned: map[string]bool{}}
}

// Post queues n. It reports false (and logs) when the queue is full.
func (q *Queue) Post(n Note) bool {
	select {
	case q.ch <- n:
		return true
	default:
		q.log.Warn("notify: queue full; desktop notification dropped", "proposal", n.ProposalID)
		return false
	}
}

// Run sends queued notes until ctx ends; a note still queued then is not
// sent (the owner sees the proposal in `roomrelay review` anyway).
func (q *Queue) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case n := <-q.ch:
			q.send(ctx, n)
		}
	}
}

func (q *Queue) send(ctx context.Context, n Note) {
	cctx, cancel := context.WithTimeout(ctx, q.timeout)
	defer cancel()
	err := q.n.Notify(cctx, n)
	if err == nil {
		q.log.Debug("notify: desktop notification sent", "proposal", n.ProposalID)
		return
	}
	if ctx.Err() != nil {
		return // shutting down, not a failure worth a line
	}
	if errors.Is(cctx.Err(), context.DeadlineExceeded) && !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrUnsupported) {
		err = errors.Join(ErrTimeout, err)
	}
	// A device without a desktop session fails every time the same way:
	// one warning says so, the rest go to debug.
	c := cause(err)
	q.mu.Lock()
	first := !q.warned[c]
	q.warned[c] = true
	q.mu.Unlock()
	if first {
		q.log.Warn("notify: desktop notification failed; further failures like this are logged at debug", "proposal", n.ProposalID, "err", err)
	} else {
		q.log.Debug("notify: desktop notification failed", "proposal", n.ProposalID, "err", err)
	}
}

// cause is the kind of a failure: one of the package's errors, or else the
// text itself.
func cause(err error) string {
	for _, e := range []error{ErrUnsupported, ErrUnavailable, ErrTimeout, ErrFailed} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return err.Error()
}
