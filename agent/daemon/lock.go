package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LockFile in the state dir is held by the running agent: two agents on one
// state dir would replace each other at the hub and write one status file.
const LockFile = "agent.lock"

var errLocked = errors.New("locked")

// ErrAlreadyRunning is returned by Open when another agent holds the state
// dir.
var ErrAlreadyRunning = errors.New("another roomrelay agent is running on this state dir")

// lockStateDir takes the state dir's lock and writes this process's pid into
// it, for the message another agent gets.
func lockStateDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state dir lock: %w", err)
	}
	if err := tryLock(f); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, errLocked) {
			pid := strings.TrimSpace(string(b))
			if _, perr := strconv.Atoi(pid); perr != nil {
				pid = "unknown"
			}
			return nil, fmt.Errorf("%w (pid %s, lock %s): stop it first (`roomrelay service stop`), or give this one another --home", ErrAlreadyRunning, pid, path)
		}
		return nil, fmt.Errorf("state dir lock: %w", err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
