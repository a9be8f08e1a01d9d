package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/examples"
	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
)

// TestPollSeesEveryCommit: the check systems without inotify run every tick
// (macOS and Windows) never misses a commit another process made. Another
// store handle (as the review CLI) commits one room per round while looks
// run beside it; one look after the commit returned must see the room.
// Before the fix a look could stat the WAL after the commit's frames were
// written but query before SQLite published the commit (synchronous=FULL
// fsyncs in between); the next looks saw the same file stamp and skipped
// the query, and the change waited for the one-minute recheck (the Windows
// demo flake: "the cloud never saw the approval").
func TestPollSeesEveryCommit(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	ctx := context.Background()
	pol := "version 1\nproject p\n  enabled yes\n  commands read_room\n"
	if err := os.WriteFile(d.policyPath(), []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	other, err := rooms.Open(ctx, filepath.Join(d.cfg.DataDir, RoomsDB), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.CreateProject(ctx, "p", "p"); err != nil {
		t.Fatal(err)
	}
	d.poke(ctx, false)
	for i := range 60 {
		done := make(chan error, 1)
		go func() {
			_, err := other.CreateRoom(ctx, rooms.NewRoom{ID: fmt.Sprintf("room-%d", i), ProjectID: "p", Name: "r"})
			done <- err
		}()
	looks:
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				break looks
			default:
				d.poke(ctx, false)
			}
		}
		d.poke(ctx, false) // the first tick after the commit returned
		d.dirMu.Lock()
		n := len(d.lastDir)
		d.dirMu.Unlock()
		if n != i+1 {
			t.Fatalf("round %d: the look after the commit saw %d rooms, want %d", i, n, i+1)
		}
	}
}

// TestPollingPathPublishesDecisions runs the housekeeping loop as macOS and
// Windows run it (no inotify, a poll every Tick) on Linux: an approval made
// through another store handle (the review CLI) reaches the outbox as a
// proposal_decided event, and a room created there as the directory.
func TestPollingPathPublishesDecisions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, err := Open(context.Background(), Config{ConfigDir: filepath.Join(dir, "c"), StateDir: filepath.Join(dir, "s"), DataDir: filepath.Join(dir, "d"),
		HubURL: "http://127.0.0.1:1", DeviceID: "dev-test", Token: "t", Tick: 20 * time.Millisecond, pollOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithCancel(context.Background())
	pol := "version 1\nproject p\n  enabled yes\n  commands read_room propose_room_snippet_app\n"
	if err := os.WriteFile(d.policyPath(), []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	other, err := rooms.Open(ctx, filepath.Join(d.cfg.DataDir, RoomsDB), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.CreateProject(ctx, "p", "p"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); d.housekeep(ctx) }()
	defer func() { cancel(); <-done }()
	// Past the start's second looks (settleSteps), so only the ticks can
	// find the changes below.
	time.Sleep(2 * settleSteps[len(settleSteps)-1])

	if _, err := other.CreateRoom(ctx, rooms.NewRoom{ID: "room-1", ProjectID: "p", Name: "Standup"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the room in the directory", func() bool {
		d.dirMu.Lock()
		defer d.dirMu.Unlock()
		return len(d.lastDir) == 1
	})

	files := examples.StandupTimer()
	p, _, err := other.CreateProposal(ctx, rooms.NewProposal{ProjectID: "p", RoomID: "room-1", Kind: rooms.SourceSnippet, Name: "Timer",
		Files: files, IdempotencyKey: relay.SnippetKey("room-1", "Timer", files)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.ApproveProposal(ctx, p.ID, relay.ContentHash(files)); err != nil {
		t.Fatal(err)
	}
	// Announced: the outbox took the proposal_decided event and the store
	// marked it (the outbox file itself is not read while the agent may
	// replace it: Windows refuses a rename over an open file).
	testutil.Eventually(t, "proposal_decided for "+p.ID, func() bool {
		ps, err := other.UnannouncedDecisions(ctx)
		return err == nil && len(ps) == 0
	})
}
