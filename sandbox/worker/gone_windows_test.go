package worker

import (
	"os"
	"testing"
)

// assertGone: on Windows, opening a process that has exited fails.
func assertGone(t *testing.T, pid int) {
	t.Helper()
	if p, err := os.FindProcess(pid); err == nil {
		p.Release()
		t.Errorf("worker %d still exists", pid)
	}
}
