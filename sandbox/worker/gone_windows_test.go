package worker

import (
	"testing"

	"github.com/roomrelay/roomrelay/internal/proc"
)

// assertGone: the worker process has exited. (Whether it can be opened says
// nothing: an exited process stays openable while a handle to it is held.)
func assertGone(t *testing.T, pid int) {
	t.Helper()
	if proc.Alive(pid) {
		t.Errorf("worker %d still exists", pid)
	}
}
