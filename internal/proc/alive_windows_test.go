package proc

import (
	"testing"

	"golang.org/x/sys/windows"
)

// TestExitedButHeld: a process that exited reads as not running while a
// handle to it is still open (it can still be opened then, so "can it be
// opened" is not a liveness check; the sandbox tests' assertGone was one).
func TestExitedButHeld(t *testing.T) {
	cmd, stdin := startChild(t)
	pid := cmd.Process.Pid
	h, err := windows.OpenProcess(windows.SYNCHRONIZE|windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		t.Fatal(err)
	}
	defer windows.CloseHandle(h)
	stdin.Close()
	if _, err := windows.WaitForSingleObject(h, windows.INFINITE); err != nil {
		t.Fatal(err)
	}
	if Alive(pid) {
		t.Errorf("exited child %d, still held, reads as running", pid)
	}
}
