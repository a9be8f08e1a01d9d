package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rssOf reads a process's resident set from /proc (the sample macOS takes
// from proc_pid_rusage's footprint).
func rssOf(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, errors.New("short statm")
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize()), err
}

// A real child that grows past the limit is SIGKILLed by the watcher and
// reported as exceeded; one that stays below is left alone.
func TestMemWatchKillsAtTheLimit(t *testing.T) {
	grow := exec.Command("sh", "-c", `x=$(head -c 100000000 /dev/zero | tr '\0' a); sleep 60`)
	if err := grow.Start(); err != nil {
		t.Fatal(err)
	}
	m := startMemWatch(grow.Process.Pid, 32<<20, 5*time.Millisecond, rssOf)
	done := make(chan error, 1)
	go func() { done <- grow.Wait() }()
	select {
	case err := <-done:
		m.Close()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL || !m.Exceeded() {
			t.Fatalf("child ended with %v, exceeded %v: want SIGKILL by the watcher", err, m.Exceeded())
		}
	case <-time.After(30 * time.Second):
		grow.Process.Kill()
		t.Fatal("the watcher never killed a child past its limit")
	}

	small := exec.Command("sleep", "60")
	if err := small.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { small.Process.Kill(); small.Wait() }()
	m = startMemWatch(small.Process.Pid, 512<<20, time.Millisecond, rssOf)
	time.Sleep(50 * time.Millisecond) // fifty samples below the limit
	m.Close()
	if m.Exceeded() || small.ProcessState != nil {
		t.Fatal("the watcher acted on a child below its limit")
	}
	if err := small.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("child below the limit is gone: %v", err)
	}
}
