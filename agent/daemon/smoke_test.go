package daemon

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent/notify"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/examples"
	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/sandbox"
)

// blockingSandbox holds every smoke-run until released.
type blockingSandbox struct {
	started chan struct{}
	release chan struct{}
}

func (b *blockingSandbox) SmokeRun(ctx context.Context, files map[string]string) (*sandbox.Result, error) {
	b.started <- struct{}{}
	select {
	case <-b.release:
		return &sandbox.Result{OK: true}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestDisableWhileSmokeRunning: the owner's "disable project" takes effect
// while the smoke-run of a just-approved snippet is still running (it runs
// on its own goroutine, not in the loop that reloads the policy), and the
// decision is announced once the smoke-run is done.
func TestDisableWhileSmokeRunning(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sb := &blockingSandbox{started: make(chan struct{}, 1), release: make(chan struct{})}
	d, err := Open(context.Background(), Config{ConfigDir: filepath.Join(dir, "c"), StateDir: filepath.Join(dir, "s"), DataDir: filepath.Join(dir, "d"),
		HubURL: "http://127.0.0.1:1", DeviceID: "dev-test", Token: "t", Sandbox: sb,
		Notifier: notify.Func(func(context.Context, notify.Note) error { return nil })})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	on := "version 1\nproject p\n  enabled yes\n  commands read_room\n"
	if err := os.WriteFile(d.policyPath(), []byte(on), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()

	s := d.Store()
	if _, err := s.CreateProject(ctx, "p", "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRoom(ctx, rooms.NewRoom{ID: "r1", ProjectID: "p", Name: "R"}); err != nil {
		t.Fatal(err)
	}
	files := examples.StandupTimer()
	p, _, err := s.CreateProposal(ctx, rooms.NewProposal{ProjectID: "p", RoomID: "r1", Kind: rooms.SourceSnippet, Name: "Timer",
		Files: files, IdempotencyKey: relay.SnippetKey("r1", "Timer", files)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ApproveProposal(ctx, p.ID, relay.ContentHash(files)); err != nil {
		t.Fatal(err)
	}
	go d.Poke(ctx) // a goroutine: a Poke that waits for the smoke-run must not hang the test
	select {
	case <-sb.started:
	case <-time.After(30 * time.Second):
		t.Fatal("no smoke-run after the approval")
	}
	// The smoke-run is in progress: the owner disables the project.
	// (A different size: the reload notices the change whatever the mtime.)
	if err := os.WriteFile(d.policyPath(), []byte("version 1\nproject p\n  enabled no\n  commands read_room\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	poked := make(chan struct{})
	go func() { d.Poke(ctx); close(poked) }()
	select {
	case <-poked:
	case <-time.After(30 * time.Second):
		t.Fatal("the policy reload waited for the smoke-run")
	}
	if got := d.Policy().Decide("p", relay.CmdReadRoom, []byte(`{"room_id":"r1"}`)); relay.AsError(got).Code != relay.CodeProjectNotEnabled {
		t.Fatalf("with the smoke-run still running the project is %v, want disabled", got)
	}
	if n, _ := s.UnannouncedDecisions(ctx); len(n) != 1 {
		t.Fatalf("%d decisions unannounced while the smoke-run runs, want 1 (announced after it)", len(n))
	}
	close(sb.release)
	testutil.Eventually(t, "the decision announced after the smoke-run", func() bool {
		n, _ := s.UnannouncedDecisions(ctx)
		return len(n) == 0
	})
}
