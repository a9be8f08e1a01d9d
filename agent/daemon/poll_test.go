package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent"
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
	testutil.Eventually(t, "proposal_decided for "+p.ID, func() bool { return outboxHas(t, d, relay.EventProposalDecided, p.ID) })
}

// outboxHas reports whether the outbox file holds an event of kind whose
// data names id.
func outboxHas(t *testing.T, d *Daemon, kind, id string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.cfg.StateDir, agent.OutboxFile))
	if err != nil {
		return false
	}
	var evs []relay.Event
	if err := json.Unmarshal(b, &evs); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Event == kind && strings.Contains(string(ev.Data), id) {
			return true
		}
	}
	return false
}
