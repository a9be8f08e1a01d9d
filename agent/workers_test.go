package agent

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/relay"
)

// goroutineID is the running goroutine's number, from its stack header.
func goroutineID() int {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	f := strings.Fields(string(b))
	n, _ := strconv.Atoi(f[1])
	return n
}

// TestWorkersAreReusedAndBounded: a command runs on the worker that ran
// the one before, once that one waits (a goroutine per command grew its stack anew each time),
// and after a burst at most maxIdleWorkers workers stay; they end with Run.
func TestWorkersAreReusedAndBounded(t *testing.T) {
	hub := newTestHub(t)
	a := newTestAgent(t, hub, "", nil)
	release := make(chan struct{})
	started := make(chan struct{}, 16)
	a.Register("who", func(ctx context.Context, cmd *relay.Command) (any, error) { return goroutineID(), nil })
	a.Register("wait", func(ctx context.Context, cmd *relay.Command) (any, error) {
		started <- struct{}{}
		<-release
		return 1, nil
	})
	stop, _, _ := start(t, a)
	c := hub.next(t)
	var ids []string
	for _, id := range []string{"w1", "w2", "w3"} {
		if id != "w1" { // the worker parks once it has answered and counted the command out
			eventually(t, "a worker waits", func() bool { return a.cmds.idleW.Load() == 1 })
		}
		c.send(command(id, "who", ""))
		r := c.result(t)
		if !r.OK {
			t.Fatalf("%s: %+v", id, r)
		}
		ids = append(ids, string(r.Result))
	}
	if ids[0] != ids[1] || ids[1] != ids[2] {
		t.Errorf("three commands in a row ran on goroutines %v; want one worker for all", ids)
	}

	const burst = 12
	for i := range burst {
		c.send(command("b"+strconv.Itoa(i), "wait", ""))
	}
	for range burst {
		<-started
	}
	close(release)
	for range burst {
		if r := c.result(t); !r.OK {
			t.Fatalf("burst: %+v", r)
		}
	}
	workers := func() int {
		b := make([]byte, 1<<20)
		return bytes.Count(b[:runtime.Stack(b, true)], []byte("agent.(*dispatcher).worker("))
	}
	eventually(t, "at most maxIdleWorkers workers after the burst", func() bool { return workers() <= maxIdleWorkers })
	if n := a.cmds.idleW.Load(); n < 1 || n > maxIdleWorkers {
		t.Errorf("%d workers wait after a burst of %d; want 1 to %d", n, burst, maxIdleWorkers)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := workers(); n != 0 {
		t.Errorf("%d workers left after Run returned", n)
	}
}
