//go:build unix

package worker

import (
	"errors"
	"syscall"
	"testing"
)

func assertGone(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("worker %d still exists (kill 0: %v)", pid, err)
	}
}
