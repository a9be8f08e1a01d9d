package rooms

import (
	"context"
	"testing"

	"github.com/roomrelay/roomrelay/relay"
)

func TestDecisionsAnnouncedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, t.TempDir()+"/rooms.db", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateProject(ctx, "p", "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRoom(ctx, NewRoom{ID: "r", ProjectID: "p", Name: "R"}); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"src/App.tsx": "export default () => null"}
	var ids []string
	for _, key := range []string{"key-one-1", "key-two-2", "key-three"} {
		p, _, err := s.CreateProposal(ctx, NewProposal{ProjectID: "p", RoomID: "r", Kind: SourceSnippet, Name: key, Files: files, IdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
	}
	if ps, _ := s.UnannouncedDecisions(ctx); len(ps) != 0 {
		t.Fatalf("pending proposals listed as decisions: %d", len(ps))
	}
	if _, err := s.ApproveProposal(ctx, ids[0], relay.ContentHash(files)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeclineProposal(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	ps, err := s.UnannouncedDecisions(ctx)
	if err != nil || len(ps) != 2 {
		t.Fatalf("decisions = %+v, %v", ps, err)
	}
	// Both decisions may carry the same millisecond: find them by id.
	byID := map[string]Proposal{ps[0].ID: ps[0], ps[1].ID: ps[1]}
	if a, d := byID[ids[0]], byID[ids[1]]; a.State != ProposalApproved || a.InstanceID == "" || d.State != ProposalDeclined {
		t.Fatalf("decisions = %+v", ps)
	}
	if err := s.MarkAnnounced(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	ps, _ = s.UnannouncedDecisions(ctx)
	if len(ps) != 1 || ps[0].ID != ids[1] {
		t.Fatalf("after marking: %+v", ps)
	}
}
