package daemon

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent/notify"
	"github.com/roomrelay/roomrelay/agent/rooms"
)

// TestProposalNotifiesOnce: a new proposal tells the desktop user once,
// naming the room and the app; its duplicate retry does not, nor does a
// restart; with "notify off" in the policy nothing is shown, and the
// command still succeeds. The queue's goroutine ends with Run.
func TestProposalNotifiesOnce(t *testing.T) {
	dir := t.TempDir()
	notes := make(chan notify.Note, 16)
	cfg := Config{ConfigDir: filepath.Join(dir, "c"), StateDir: filepath.Join(dir, "s"), DataDir: filepath.Join(dir, "d"),
		HubURL: "http://127.0.0.1:1", DeviceID: "dev-test", Token: "t",
		Notifier: notify.Func(func(ctx context.Context, n notify.Note) error { notes <- n; return nil })}
	ctx := context.Background()
	base := runtime.NumGoroutine()

	// run opens the daemon, runs it, and returns a stop that waits for Run.
	run := func() (*Daemon, func()) {
		d, err := Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- d.Run(rctx) }()
		return d, func() {
			cancel()
			<-done
			d.Close()
		}
	}
	next := func() notify.Note {
		t.Helper()
		select {
		case n := <-notes:
			return n
		case <-time.After(20 * time.Second):
			t.Fatal("no desktop notification")
			panic("unreachable")
		}
	}
	files := map[string]string{"src/App.tsx": "export default () => null"}
	propose := func(d *Daemon, key string) ProposalResult {
		t.Helper()
		res, err := d.propose(ctx, rooms.NewProposal{ProjectID: "p1", RoomID: "room-1", Kind: rooms.SourceSnippet,
			Name: "Standup timer " + key, Files: files, IdempotencyKey: "snip-notify-" + key, ProposedBy: "MCP client token \"ci\""})
		if err != nil {
			t.Fatal(err)
		}
		return res.(ProposalResult)
	}
	setPolicy := func(d *Daemon, pol string) {
		t.Helper()
		// A new size, so the reload does not depend on the mtime's resolution.
		if err := os.WriteFile(d.policyPath(), []byte(pol), 0o600); err != nil {
			t.Fatal(err)
		}
		d.Poke(ctx)
	}

	d, stop := run()
	if _, err := d.store.CreateProject(ctx, "p1", "p1"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.store.CreateRoom(ctx, rooms.NewRoom{ID: "room-1", ProjectID: "p1", Name: "Kitchen wall"}); err != nil {
		t.Fatal(err)
	}
	first := propose(d, "a")
	n := next()
	if n.ProposalID != first.ProposalID || n.Room != "Kitchen wall" || n.App != "Standup timer a" || n.Project != "p1" || n.From != `MCP client token "ci"` {
		t.Errorf("note %+v for proposal %s", n, first.ProposalID)
	}
	if dup := propose(d, "a"); !dup.Duplicate {
		t.Fatalf("the retry was not a duplicate: %+v", dup)
	}
	setPolicy(d, "version 1\nnotify off\n")
	if d.Policy().Notifications() {
		t.Fatal("policy with notify off not loaded")
	}
	if off := propose(d, "b"); off.Duplicate || off.State != "pending_review" {
		t.Fatalf("with notify off: %+v", off)
	}
	setPolicy(d, "version 1\nnotify on\n")
	// The queue is FIFO: had the retry or the proposal under "notify off"
	// posted a note, it would come before this one.
	third := propose(d, "c")
	if n := next(); n.ProposalID != third.ProposalID {
		t.Errorf("after a duplicate and a notify-off proposal the next note is %+v, want proposal %s", n, third.ProposalID)
	}
	stop()

	// A restart finds pending proposals in the store and says nothing
	// about them: the next note is the next new proposal's.
	d, stop = run()
	fourth := propose(d, "d")
	if n := next(); n.ProposalID != fourth.ProposalID {
		t.Errorf("after a restart the next note is %+v, want proposal %s", n, fourth.ProposalID)
	}
	stop()
	deadline := time.Now().Add(20 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines %d, baseline %d:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(notes) != 0 {
		t.Errorf("%d notes left over", len(notes))
	}
}

// TestSlowNotifierDoesNotHoldTheCommand: a desktop that never answers
// neither delays a proposal's answer nor keeps Run from ending; past the
// queue's bound, notes are dropped.
func TestSlowNotifierDoesNotHoldTheCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	calls := make(chan struct{}, 64)
	// More proposals than the queue holds, in one room: above the default
	// pending bound.
	if err := os.MkdirAll(filepath.Join(dir, "c"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "c", PolicyFile), []byte("project p1\n enabled yes\n max pending.room 100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Open(context.Background(), Config{ConfigDir: filepath.Join(dir, "c"), StateDir: filepath.Join(dir, "s"), DataDir: filepath.Join(dir, "d"),
		HubURL: "http://127.0.0.1:1", DeviceID: "dev-test", Token: "t",
		Notifier: notify.Func(func(ctx context.Context, n notify.Note) error { calls <- struct{}{}; <-ctx.Done(); return ctx.Err() })})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	if _, err := d.store.CreateProject(ctx, "p1", "p1"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.store.CreateRoom(ctx, rooms.NewRoom{ID: "room-1", ProjectID: "p1", Name: "r"}); err != nil {
		t.Fatal(err)
	}
	proposed := make(chan error, 1)
	go func() {
		for i := range notify.DefaultQueueSize + 4 {
			if _, err := d.propose(ctx, rooms.NewProposal{ProjectID: "p1", RoomID: "room-1", Kind: rooms.SourceSnippet,
				Name: "app", Files: map[string]string{"src/App.tsx": strings.Repeat("x", i+1)}, IdempotencyKey: "snip-slow-" + strconv.Itoa(i)}); err != nil {
				proposed <- err
				return
			}
		}
		proposed <- nil
	}()
	select {
	case err := <-proposed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(notify.DefaultTimeout):
		t.Fatal("proposals held up by a notifier that never answers")
	}
	<-calls // the first note did reach the notifier, and is stuck there
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not end while a notification hung")
	}
}
