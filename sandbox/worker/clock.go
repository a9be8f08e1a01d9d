package worker

import (
	"container/heap"
	"errors"
	"math"

	"github.com/dop251/goja"
)

// The virtual clock: a snippet's timers run when the harness advances the
// clock, never on real time, so a 3 s interval costs nothing to wait for.

const (
	maxTimerCallbacks  = 100_000
	virtualEpochMillis = 1_704_099_600_000 // 2024-01-01T09:00:00Z, a fixed "now"
)

type timer struct {
	id       int64
	due      int64
	seq      uint64
	fn       goja.Callable
	args     []goja.Value
	interval int64 // 0 for a one-shot timer
	index    int
}

// clock is the virtual clock and its timers, in due order (ties in the
// order they were set, as in browsers).
type clock struct {
	now       int64 // ms since the epoch
	timers    map[int64]*timer
	queue     timerHeap
	nextTimer int64
	seq       uint64
	inTimer   bool
	callbacks int
}

func newClock() clock {
	return clock{now: virtualEpochMillis, timers: map[int64]*timer{}}
}

type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *timerHeap) Push(x any)   { t := x.(*timer); t.index = len(*h); *h = append(*h, t) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	t.index = -1
	return t
}
func (h timerHeap) peek() *timer { return h[0] }
func (h timerHeap) empty() bool  { return len(h) == 0 }

func (c *clock) clearTimer(id int64) { c.removeTimer(c.timers[id]) }

func (c *clock) removeTimer(t *timer) {
	if t == nil {
		return
	}
	delete(c.timers, t.id)
	if t.index >= 0 {
		heap.Remove(&c.queue, t.index)
	}
}

func (r *run) setTimer(fnv, delay goja.Value, repeat bool, args []goja.Value) int64 {
	fn, ok := goja.AssertFunction(fnv)
	if !ok {
		panic(r.vm.NewTypeError("setTimeout/setInterval: the callback must be a function (strings are not evaluated)"))
	}
	c := &r.clock
	d := delay.ToFloat()
	if math.IsNaN(d) || d < 0 {
		d = 0
	}
	d = math.Min(d, math.MaxInt32)
	ms := int64(d)
	// Timers set from a timer callback wait at least 1 ms, so advancing the
	// clock always makes progress (browsers clamp nested timers too).
	if c.inTimer && ms < 1 || repeat && ms < 1 {
		ms = 1
	}
	c.nextTimer++
	c.seq++
	t := &timer{id: c.nextTimer, due: c.now + ms, seq: c.seq, fn: fn, args: append([]goja.Value(nil), args...)}
	if repeat {
		t.interval = ms
	}
	c.timers[t.id] = t
	heap.Push(&c.queue, t)
	return t.id
}

var errTimerStorm = errors.New("more than 100000 timer callbacks: the snippet schedules timers without end")

// advance runs every timer due within ms of virtual time, in order, jumping
// the clock from one to the next; Promise jobs run after each callback.
func (c *clock) advance(ms int64) error {
	target := c.now + ms
	for !c.queue.empty() && c.queue.peek().due <= target {
		t := c.queue.peek()
		c.now = t.due
		if t.interval > 0 {
			c.seq++
			t.due += t.interval
			t.seq = c.seq
			heap.Fix(&c.queue, t.index)
		} else {
			c.removeTimer(t)
		}
		c.callbacks++
		if c.callbacks > maxTimerCallbacks {
			return errTimerStorm
		}
		c.inTimer = true
		_, err := t.fn(goja.Undefined(), t.args...)
		c.inTimer = false
		if err != nil {
			return err
		}
	}
	c.now = target
	return nil
}
