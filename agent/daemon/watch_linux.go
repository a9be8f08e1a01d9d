package daemon

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// changeWatcher signals when a file in one of its directories changes, so an
// idle agent sleeps instead of polling (inotify; other systems poll).
type changeWatcher struct {
	f *os.File
	c chan struct{}
}

func newChangeWatcher(dirs ...string) (*changeWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	for _, d := range dirs {
		if _, err := unix.InotifyAddWatch(fd, d, unix.IN_CLOSE_WRITE|unix.IN_MODIFY|unix.IN_MOVED_TO|unix.IN_CREATE|unix.IN_DELETE); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("inotify watch %s: %w", d, err)
		}
	}
	// A non-blocking fd in os.NewFile joins Go's poller: Read parks the
	// goroutine instead of a thread, and Close wakes it.
	return &changeWatcher{f: os.NewFile(uintptr(fd), "inotify"), c: make(chan struct{}, 1)}, nil
}

// C receives a value after changes; bursts are coalesced.
func (w *changeWatcher) C() <-chan struct{} { return w.c }

// run reads events until Close; the caller owns the goroutine.
func (w *changeWatcher) run() {
	buf := make([]byte, 4096)
	for {
		if _, err := w.f.Read(buf); err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		select {
		case w.c <- struct{}{}:
		default:
		}
	}
}

func (w *changeWatcher) Close() error { return w.f.Close() }
