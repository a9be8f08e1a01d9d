// Package dirlock holds a directory for one process: an exclusive lock on a
// file in it, with the holder's pid written inside for the message another
// process gets. The kernel drops the lock when the process dies (kill -9
// included), so a stale lock file never blocks a restart.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

var errLocked = errors.New("locked")

// LockedError says another process holds the lock.
type LockedError struct {
	Path string
	PID  string // "unknown" when the file holds no pid
}

func (e *LockedError) Error() string { return fmt.Sprintf("%s is held by pid %s", e.Path, e.PID) }

// Acquire takes dir/name's lock and writes this process's pid into it. The
// lock lasts as long as the returned file stays open. A held lock is a
// *LockedError.
func Acquire(dir, name string) (*os.File, error) {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := tryLock(f); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, errLocked) {
			pid := strings.TrimSpace(string(b))
			if _, perr := strconv.Atoi(pid); perr != nil {
				pid = "unknown"
			}
			return nil, &LockedError{Path: path, PID: pid}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
