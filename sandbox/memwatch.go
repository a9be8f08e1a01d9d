package sandbox

import (
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// memWatch samples a process's memory with sample every `every` and kills
// it once a sample reaches limit. It is macOS's hard memory cap (sample:
// the footprint, memcap_darwin.go); the loop is OS-independent so that it
// is tested where it can run (memwatch_linux_test.go).
type memWatch struct {
	pid      int
	limit    int64
	sample   func(pid int) (int64, error)
	exceeded atomic.Bool
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

func startMemWatch(pid int, limit int64, every time.Duration, sample func(int) (int64, error)) *memWatch {
	m := &memWatch{pid: pid, limit: limit, sample: sample, stop: make(chan struct{}), done: make(chan struct{})}
	go m.run(every)
	return m
}

func (m *memWatch) run(every time.Duration) {
	defer close(m.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		n, err := m.sample(m.pid)
		if err != nil {
			return // the process is gone
		}
		if n >= m.limit {
			// Set before the kill: the run that sees the worker die reads it.
			m.exceeded.Store(true)
			if p, err := os.FindProcess(m.pid); err == nil {
				p.Kill()
			}
			return
		}
	}
}

// Exceeded reports whether the watcher killed the process at the limit.
func (m *memWatch) Exceeded() bool { return m != nil && m.exceeded.Load() }

// Close stops the watcher and waits for it. It is called right after the
// process is reaped; a sample in that moment reads a pid the OS does not
// hand out again so soon (pids are assigned in sequence), or fails and
// ends the watcher.
func (m *memWatch) Close() error {
	if m == nil {
		return nil
	}
	m.once.Do(func() { close(m.stop) })
	<-m.done
	return nil
}
