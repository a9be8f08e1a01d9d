package hub

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestNewestSessionRule: whichever comes first, the kick of a newer session
// or the older session learning its epoch, the older one is superseded and
// the newer one is not; a forgotten device starts clean.
func TestNewestSessionRule(t *testing.T) {
	t.Parallel()
	// Kick first (the older session was still setting up when it came).
	var n newest
	n.kicked("dev-a", 8)
	if !n.superseded("dev-a", 7) {
		t.Error("epoch 7 after kick(8): not superseded")
	}
	if n.superseded("dev-a", 8) {
		t.Error("the kicking session itself superseded")
	}
	if n.superseded("dev-b", 1) {
		t.Error("another device superseded")
	}
	// An older kick arriving late never lowers the record.
	n.kicked("dev-a", 5)
	if !n.superseded("dev-a", 7) {
		t.Error("a late kick(5) lowered the record below 8")
	}
	// A newer session after the record is not superseded.
	if n.superseded("dev-a", 9) {
		t.Error("epoch 9 superseded by kick(8)")
	}
	n.forget("dev-a")
	if n.superseded("dev-a", 1) {
		t.Error("forgotten device still remembers a kick")
	}
}

func TestPendingCommandFailsOnDisconnect(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	dev, tok := th.enroll("p1")
	a := dialAgent(t, th.wsURL(), tok, dev)
	seen := make(chan struct{})
	a.serve(func(*relay.Command) *relay.Result { close(seen); return nil })
	th.waitState(dev, hubapi.StateOnline)
	go func() {
		<-seen
		a.conn.Close()
	}()
	res, status := th.command(dev, hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoom, TimeoutMS: 60000})
	if status != http.StatusServiceUnavailable || res.Error == nil || res.Error.Code != relay.CodeDeviceOffline {
		t.Fatalf("after disconnect: %d %+v", status, res)
	}
}

// TestCancelWhenCallerLeaves: a caller that gives up on a command makes the
// hub send the agent a cancel frame for it; a command that a second caller
// still waits for is not cancelled.
func TestCancelWhenCallerLeaves(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	dev, tok := th.enroll("p1")
	a := dialAgent(t, th.wsURL(), tok, dev)
	started := make(chan string, 4)
	a.serve(func(c *relay.Command) *relay.Result {
		started <- c.ID
		return nil // never answers: the caller has to give up
	})
	th.waitState(dev, hubapi.StateOnline)
	cancels := func() []string {
		a.mu.Lock()
		defer a.mu.Unlock()
		var ids []string
		for _, f := range a.frames {
			if c, ok := f.(*relay.Cancel); ok {
				ids = append(ids, c.ID)
			}
		}
		return ids
	}
	call := func(ctx context.Context, id string) error {
		_, _, err := th.cl.Command(ctx, dev, hubapi.CommandRequest{ID: id, ProjectID: "p1", Name: relay.CmdListRoomApps, TimeoutMS: 60_000})
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- call(ctx, "c-left") }()
	if id := <-started; id != "c-left" {
		t.Fatalf("agent got %q", id)
	}
	if got := cancels(); len(got) != 0 {
		t.Fatalf("cancel before the caller left: %v", got)
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the abandoned call returned no error")
	}
	waitFor(t, "cancel frame for c-left", func() bool { c := cancels(); return len(c) == 1 && c[0] == "c-left" })

	// Two callers, same id: one leaving does not cancel the other's command.
	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() { errc <- call(ctx1, "c-shared") }()
	<-started
	done2 := make(chan error, 1)
	go func() { done2 <- call(ctx2, "c-shared") }()
	waitFor(t, "second caller joined", func() bool {
		for _, s := range th.localSessions(dev) {
			s.mu.Lock()
			p := s.pending["c-shared"]
			n := 0
			if p != nil {
				n = len(p.replies)
			}
			s.mu.Unlock()
			if n == 2 {
				return true
			}
		}
		return false
	})
	cancel1()
	<-errc
	time.Sleep(200 * time.Millisecond) // a cancel, if wrongly sent, would arrive by now
	if got := cancels(); len(got) != 1 {
		t.Fatalf("cancel frames %v; want only c-left (c-shared still has a caller)", got)
	}
	cancel2()
	<-done2
}
