package proc

import (
	"io"
	"os"
	"os/exec"
	"testing"
)

// TestMain lets the test binary stand in for a child that runs until its
// stdin closes.
func TestMain(m *testing.M) {
	if os.Getenv("PROC_TEST_CHILD") == "wait" {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// startChild starts a child that runs until the returned pipe is closed.
func startChild(t *testing.T) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PROC_TEST_CHILD=wait")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	return cmd, stdin
}

// TestAlive: this process and a running child read as running; the child
// once it exited does not, nor do nonsense pids.
func TestAlive(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Fatal("this process reads as not running")
	}
	for _, pid := range []int{0, -1} {
		if Alive(pid) {
			t.Errorf("pid %d reads as running", pid)
		}
	}
	cmd, stdin := startChild(t)
	pid := cmd.Process.Pid
	if !Alive(pid) {
		t.Fatalf("running child %d reads as not running", pid)
	}
	stdin.Close()
	if err := cmd.Wait(); err == nil {
		t.Fatal("the child exited 0, want 3")
	}
	if Alive(pid) {
		t.Errorf("pid %d of an exited child reads as running", pid)
	}
}
