//go:build linux

package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// logBuf keeps the tail of a child's output (stdout and stderr) for the
// test log of a failed test.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

const maxLogBytes = 48 << 10

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if over := l.buf.Len() - maxLogBytes; over > 0 {
		l.buf.Next(over)
	}
	return len(p), nil
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// child is a long-running process the test can kill and start again with
// the same arguments (same ports, same data dirs).
type child struct {
	name string
	bin  string
	args []string
	env  []string
	log  logBuf

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current run exited
	runs int
}

// start runs the child (again). Its own process group lets kill reach
// anything it forks; Pdeathsig ends it if the test binary dies first.
func (c *child) start(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		select {
		case <-c.done:
		default:
			t.Fatalf("%s: start while still running", c.name)
		}
	}
	c.runs++
	fmt.Fprintf(&c.log, "=== %s run %d: %s %s\n", c.name, c.runs, c.bin, strings.Join(c.args, " "))
	cmd := exec.Command(c.bin, c.args...)
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = &c.log, &c.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", c.name, err)
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(&c.log, "=== %s run exited: %v\n", c.name, err)
		close(done)
	}()
	c.cmd, c.done = cmd, done
}

// running reports whether the current run has not exited.
func (c *child) running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// signal sends sig to the child's process group and, unless it is SIGSTOP
// or SIGCONT, waits for the run to end (SIGKILL after 15 s).
func (c *child) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Errorf("%s did not exit 15s after %v; killing it", c.name, sig)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

func (c *child) kill(t testing.TB) { t.Helper(); c.signal(t, syscall.SIGKILL) }
func (c *child) stop(t testing.TB) { t.Helper(); c.signal(t, syscall.SIGTERM) }

// procs owns every child of a test: they are all killed when it ends, and
// their output goes to the test log when it failed.
type procs struct {
	t    testing.TB
	dir  string
	mu   sync.Mutex
	list []*child
}

func newProcs(t testing.TB) *procs {
	p := &procs{t: t, dir: t.TempDir()}
	t.Cleanup(func() {
		for _, c := range p.all() {
			c.kill(t)
		}
		if t.Failed() {
			for _, c := range p.all() {
				t.Logf("--- output of %s (tail) ---\n%s", c.name, c.log.String())
			}
		}
	})
	return p
}

func (p *procs) all() []*child {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*child(nil), p.list...)
}

// add registers a child (not started yet). home is its HOME and
// ROOMRELAY_HOME: nothing from the test's own environment leaks into it.
func (p *procs) add(name, bin, home string, args ...string) *child {
	c := &child{name: name, bin: bin, args: args, env: childEnv(home)}
	p.mu.Lock()
	p.list = append(p.list, c)
	p.mu.Unlock()
	return c
}

func childEnv(home string) []string {
	return []string{"HOME=" + home, "ROOMRELAY_HOME=" + home, "PATH=" + os.Getenv("PATH"), "ROOMRELAY_LOG_LEVEL=info"}
}

// runRelay runs a one-shot roomrelay command and returns its exit code and
// combined output.
func runRelay(t testing.TB, home string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	c := exec.CommandContext(ctx, relayBin, args...)
	c.Env = childEnv(home)
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	case err != nil:
		t.Fatalf("roomrelay %v: %v", args, err)
	}
	return 0, out.String()
}

// freePorts reserves n distinct loopback ports at once (then frees them for
// the children to take).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var lns []net.Listener
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// poll calls cond every 100 ms until it holds or within passes; then the
// test fails with what and the last reason cond gave. The limit only bounds
// a failing test: nothing waits for it when things work.
func poll(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if err := pollErr(within, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func pollErr(within time.Duration, cond func() (bool, string)) error {
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s (last: %s)", within, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
