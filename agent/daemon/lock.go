package daemon

import (
	"errors"
	"fmt"
	"os"

	"github.com/roomrelay/roomrelay/internal/dirlock"
)

// LockFile in the state dir is held by the running agent: two agents on one
// state dir would replace each other at the hub and write one status file.
const LockFile = "agent.lock"

// ErrAlreadyRunning is returned by Open when another agent holds the state
// dir.
var ErrAlreadyRunning = errors.New("another roomrelay agent is running on this state dir")

// lockStateDir takes the state dir's lock and writes this process's pid into
// it, for the message another agent gets.
func lockStateDir(dir string) (*os.File, error) {
	f, err := dirlock.Acquire(dir, LockFile)
	var held *dirlock.LockedError
	if errors.As(err, &held) {
		return nil, fmt.Errorf("%w (pid %s, lock %s): stop it first (`roomrelay service stop`), or give this one another --home", ErrAlreadyRunning, held.PID, held.Path)
	}
	if err != nil {
		return nil, fmt.Errorf("state dir lock: %w", err)
	}
	return f, nil
}
