package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/notify"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
)

// TestPendingProposalsAreBounded: a caller proposing distinct snippets
// again and again (149 in a minute at the default write rate, each ~60 KiB)
// once left all of them pending in rooms.db, each with a notification. Now
// what waits is bounded per room and per project by the policy: the rest is
// refused with rate_limited saying how many already wait; a retry of a
// stored proposal is still answered; a decision makes room (#24 finding 4).
func TestPendingProposalsAreBounded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgDir := filepath.Join(dir, "c")
	if err := os.MkdirAll(cfgDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, PolicyFile), []byte("project p1\n enabled yes\n max pending.room 3\n max pending.project 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notes := make(chan notify.Note, 1000)
	ctx := context.Background()
	d, err := Open(ctx, Config{ConfigDir: cfgDir, StateDir: filepath.Join(dir, "s"), DataDir: filepath.Join(dir, "d"),
		HubURL: "http://127.0.0.1:1", DeviceID: "dev-test", Token: "t",
		Notifier: notify.Func(func(ctx context.Context, n notify.Note) error { notes <- n; return nil })})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(rctx) }()
	defer func() { cancel(); <-done }()
	if _, err := d.store.CreateProject(ctx, "p1", "p1"); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"room-1", "room-2"} {
		if _, err := d.store.CreateRoom(ctx, rooms.NewRoom{ID: r, ProjectID: "p1", Name: r}); err != nil {
			t.Fatal(err)
		}
	}
	body := strings.Repeat("// filler\n", 6000) // ~60 KiB
	propose := func(room string, i int) (ProposalResult, error) {
		res, err := d.propose(ctx, rooms.NewProposal{ProjectID: "p1", RoomID: room, Kind: rooms.SourceSnippet, Name: "flood",
			Files:          map[string]string{"src/App.tsx": fmt.Sprintf("%s// %d\nexport default () => null\n", body, i)},
			IdempotencyKey: fmt.Sprintf("snip-flood-%s-%d", room, i)})
		if err != nil {
			return ProposalResult{}, err
		}
		return res.(ProposalResult), nil
	}
	var first ProposalResult
	accepted, refused := 0, 0
	for i := range 149 {
		r, err := propose("room-1", i)
		var re *relay.Error
		switch {
		case err == nil:
			accepted++
			if i == 0 {
				first = r
			}
		case errors.As(err, &re) && re.Code == relay.CodeRateLimited:
			refused++
			if !strings.Contains(re.Message, `3 proposals already wait for review in room "room-1"`) || !re.Retryable {
				t.Fatalf("refusal: %+v", re)
			}
		default:
			t.Fatal(err)
		}
	}
	if accepted != 3 || refused != 146 {
		t.Fatalf("149 distinct proposals in one room: %d accepted, %d refused; want 3 and 146", accepted, refused)
	}
	// A retry of a stored proposal is not new.
	if r, err := propose("room-1", 0); err != nil || !r.Duplicate || r.ProposalID != first.ProposalID {
		t.Fatalf("retry of a stored proposal: %+v %v", r, err)
	}
	// The project's bound: 3 in room-1, 2 more in room-2, then refused.
	for i := range 2 {
		if _, err := propose("room-2", i); err != nil {
			t.Fatal(err)
		}
	}
	_, err = propose("room-2", 2)
	if re := relay.AsError(err); re == nil || re.Code != relay.CodeRateLimited || !strings.Contains(re.Message, `5 proposals already wait for review in project "p1"`) {
		t.Fatalf("beyond the project's bound: %v", err)
	}
	// The owner declines one: room for one more.
	if _, err := d.store.DeclineProposal(ctx, first.ProposalID); err != nil {
		t.Fatal(err)
	}
	last, err := propose("room-1", 1000)
	if err != nil {
		t.Fatalf("after a decline: %v", err)
	}
	pending, err := d.store.ListProposals(ctx, rooms.ProposalFilter{State: rooms.ProposalPending})
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 5 {
		t.Errorf("%d pending, want 5", len(pending))
	}
	// One notification per stored proposal, none per refusal: the queue
	// is FIFO, so a refusal's note would come before the last proposal's.
	got := 0
	for n := range notes {
		got++
		if n.ProposalID == last.ProposalID {
			break
		}
	}
	if got != 6 {
		t.Errorf("%d notifications, want 6 (one per stored proposal)", got)
	}
}
