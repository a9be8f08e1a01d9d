package rooms

import (
	"errors"
	"sync"
	"testing"

	"github.com/roomrelay/roomrelay/relay"
)

func timerFiles() map[string]string {
	return map[string]string{
		"src/App.tsx":    "export default function App() { return <div className=\"t\">25:00</div> }",
		"src/styles.css": ".t { font-size: 4rem }",
	}
}

func snippetProposal(room string, files map[string]string) NewProposal {
	return NewProposal{ProjectID: "p1", RoomID: room, Kind: SourceSnippet, Name: "Standup timer",
		Files: files, IdempotencyKey: relay.SnippetKey(room, "Standup timer", files)}
}

func TestProposalIsNotAnApp(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	room := setupRoom(t, s, "p1")
	addSnippet(t, s, "p1", room, "Existing")
	p, dup, err := s.CreateProposal(ctx, snippetProposal(room, timerFiles()))
	if err != nil || dup {
		t.Fatalf("CreateProposal = %v, dup %v", err, dup)
	}
	if p.State != ProposalPending || p.ContentHash != relay.ContentHash(timerFiles()) || p.FileCount != 2 || p.Project != "p1" {
		t.Errorf("proposal = %+v", p)
	}
	r, err := s.ReadRoom(ctx, "p1", room)
	if err != nil || r.AppCount != 1 || r.PendingProposals != 1 {
		t.Errorf("ReadRoom = %+v, %v; want 1 app, 1 pending", r, err)
	}
	page, err := s.ListRoomApps(ctx, "p1", room, 50, "")
	if err != nil || len(page.Items) != 1 {
		t.Errorf("ListRoomApps = %+v, %v; want only the existing app", page, err)
	}
	// Neither its id nor anything else makes it openable or smoke-runnable.
	_, err = s.ReadRoomAppStatus(ctx, "p1", room, p.ID)
	wantCode(t, err, relay.CodeNotFound)
	_, err = s.AppFiles(ctx, "p1", room, p.ID)
	wantCode(t, err, relay.CodeNotFound)
}

func TestProposalLifecycle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	files := timerFiles()
	other := map[string]string{"src/App.tsx": "export default () => 'changed'"}

	type step func(t *testing.T, s *Store, room string, p Proposal)
	cases := []struct {
		name string
		run  step
	}{
		{"retry is a duplicate", func(t *testing.T, s *Store, room string, p Proposal) {
			q, dup, err := s.CreateProposal(ctx, snippetProposal(room, timerFiles()))
			if err != nil || !dup || q.ID != p.ID {
				t.Fatalf("retry = %s dup=%v err=%v; want %s as duplicate", q.ID, dup, err, p.ID)
			}
			if ps, _ := s.ListProposals(ctx, ProposalFilter{RoomID: room}); len(ps) != 1 {
				t.Errorf("%d proposals after a retry, want 1", len(ps))
			}
		}},
		{"same key other content conflicts", func(t *testing.T, s *Store, room string, p Proposal) {
			np := snippetProposal(room, other)
			np.IdempotencyKey = p.IdempotencyKey
			_, _, err := s.CreateProposal(ctx, np)
			wantCode(t, err, relay.CodeIdempotencyConflict)
		}},
		{"same key other name conflicts", func(t *testing.T, s *Store, room string, p Proposal) {
			np := snippetProposal(room, files)
			np.Name = "Renamed"
			_, _, err := s.CreateProposal(ctx, np)
			wantCode(t, err, relay.CodeIdempotencyConflict)
		}},
		{"same key in another room is independent", func(t *testing.T, s *Store, room string, p Proposal) {
			r2, err := s.CreateRoom(ctx, NewRoom{ProjectID: "p1", Name: "other"})
			if err != nil {
				t.Fatal(err)
			}
			np := snippetProposal(r2.ID, other)
			np.IdempotencyKey = p.IdempotencyKey
			if q, dup, err := s.CreateProposal(ctx, np); err != nil || dup || q.ID == p.ID {
				t.Fatalf("other room = %+v dup=%v err=%v", q, dup, err)
			}
		}},
		{"approve creates the app", func(t *testing.T, s *Store, room string, p Proposal) {
			d, err := s.GetProposal(ctx, p.ID)
			if err != nil || len(d.Files) != 2 || d.Files["src/App.tsx"] != files["src/App.tsx"] {
				t.Fatalf("GetProposal = %+v, %v", d, err)
			}
			a, err := s.ApproveProposal(ctx, p.ID, relay.ContentHash(d.Files))
			if err != nil {
				t.Fatal(err)
			}
			if a.State != ProposalApproved || a.InstanceID == "" || a.DecidedAt.IsZero() {
				t.Errorf("approved = %+v", a)
			}
			st, err := s.ReadRoomAppStatus(ctx, "p1", room, a.InstanceID)
			if err != nil || st.Review.State != ReviewApproved || st.Review.ReviewedAt.IsZero() || st.Launcher.State != LauncherActive || st.Build.State != BuildNone {
				t.Errorf("status = %+v, %v", st, err)
			}
			got, err := s.AppFiles(ctx, "p1", room, a.InstanceID)
			if err != nil || relay.ContentHash(got) != p.ContentHash {
				t.Errorf("app files = %v, %v; want the approved files", got, err)
			}
			r, _ := s.ReadRoom(ctx, "p1", room)
			if r.AppCount != 1 || r.PendingProposals != 0 {
				t.Errorf("room after approve = %+v", r)
			}
			// A second approval, a decline, or a retry cannot make a second app.
			if _, err := s.ApproveProposal(ctx, p.ID, p.ContentHash); !errors.Is(err, ErrNotPending) {
				t.Errorf("second approve = %v, want ErrNotPending", err)
			}
			if _, err := s.DeclineProposal(ctx, p.ID); !errors.Is(err, ErrNotPending) {
				t.Errorf("decline after approve = %v, want ErrNotPending", err)
			}
			if q, dup, err := s.CreateProposal(ctx, snippetProposal(room, timerFiles())); err != nil || !dup || q.State != ProposalApproved {
				t.Errorf("retry after approve = %+v dup=%v err=%v", q, dup, err)
			}
			if r, _ := s.ReadRoom(ctx, "p1", room); r.AppCount != 1 {
				t.Errorf("app count = %d, want 1", r.AppCount)
			}
		}},
		{"approve with another hash is refused", func(t *testing.T, s *Store, room string, p Proposal) {
			if _, err := s.ApproveProposal(ctx, p.ID, relay.ContentHash(other)); !errors.Is(err, ErrContentChanged) {
				t.Fatalf("approve = %v, want ErrContentChanged", err)
			}
			if _, err := s.ApproveProposal(ctx, p.ID, ""); !errors.Is(err, ErrContentChanged) {
				t.Fatalf("approve without hash = %v, want ErrContentChanged", err)
			}
			if r, _ := s.ReadRoom(ctx, "p1", room); r.AppCount != 0 || r.PendingProposals != 1 {
				t.Errorf("room after refused approval = %+v", r)
			}
		}},
		{"approve of changed stored files is refused", func(t *testing.T, s *Store, room string, p Proposal) {
			// Someone edits the stored files behind the store's back.
			if _, err := s.db.ExecContext(ctx, `UPDATE proposal_files SET content = 'evil' WHERE proposal_id = ?`, p.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := s.ApproveProposal(ctx, p.ID, p.ContentHash); !errors.Is(err, ErrContentChanged) {
				t.Fatalf("approve = %v, want ErrContentChanged", err)
			}
		}},
		{"decline discards and spends the key", func(t *testing.T, s *Store, room string, p Proposal) {
			d, err := s.DeclineProposal(ctx, p.ID)
			if err != nil || d.State != ProposalDeclined || d.FileCount != 0 {
				t.Fatalf("decline = %+v, %v", d, err)
			}
			got, _ := s.GetProposal(ctx, p.ID)
			if len(got.Files) != 0 {
				t.Errorf("declined proposal still has %d files", len(got.Files))
			}
			q, dup, err := s.CreateProposal(ctx, snippetProposal(room, timerFiles()))
			if err != nil || !dup || q.ID != p.ID || q.State != ProposalDeclined {
				t.Errorf("retry after decline = %+v dup=%v err=%v; want the declined one", q, dup, err)
			}
			np := snippetProposal(room, other)
			np.IdempotencyKey = p.IdempotencyKey
			_, _, err = s.CreateProposal(ctx, np)
			wantCode(t, err, relay.CodeIdempotencyConflict)
			if _, err := s.ApproveProposal(ctx, p.ID, p.ContentHash); !errors.Is(err, ErrNotPending) {
				t.Errorf("approve after decline = %v, want ErrNotPending", err)
			}
			if r, _ := s.ReadRoom(ctx, "p1", room); r.AppCount != 0 || r.PendingProposals != 0 {
				t.Errorf("room after decline = %+v", r)
			}
		}},
		{"unknown proposal", func(t *testing.T, s *Store, room string, p Proposal) {
			_, err := s.ApproveProposal(ctx, "prop_nope", p.ContentHash)
			wantCode(t, err, relay.CodeNotFound)
			_, err = s.DeclineProposal(ctx, "prop_nope")
			wantCode(t, err, relay.CodeNotFound)
			_, err = s.GetProposal(ctx, "prop_nope")
			wantCode(t, err, relay.CodeNotFound)
		}},
		{"room of another project", func(t *testing.T, s *Store, room string, p Proposal) {
			setupRoom(t, s, "p2")
			np := snippetProposal(room, other)
			np.ProjectID = "p2"
			_, _, err := s.CreateProposal(ctx, np)
			wantCode(t, err, relay.CodeNotFound)
		}},
		{"caller hash must match", func(t *testing.T, s *Store, room string, p Proposal) {
			np := snippetProposal(room, other)
			np.ContentHash = p.ContentHash
			if _, _, err := s.CreateProposal(ctx, np); err == nil {
				t.Fatal("a proposal with a hash of other files was stored")
			}
			np.ContentHash = relay.ContentHash(other)
			if _, _, err := s.CreateProposal(ctx, np); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t)
			room := setupRoom(t, s, "p1")
			p, _, err := s.CreateProposal(ctx, snippetProposal(room, timerFiles()))
			if err != nil {
				t.Fatal(err)
			}
			c.run(t, s, room, p)
		})
	}
}

func TestRepoProposal(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	room := setupRoom(t, s, "p1")
	np := NewProposal{ProjectID: "p1", RoomID: room, Kind: SourceRepo, Name: "Board",
		RepositoryID: "repo_9", VersionID: "v3", IdempotencyKey: relay.RepoKey(room, "Board", "repo_9", "v3")}
	p, _, err := s.CreateProposal(ctx, np)
	if err != nil {
		t.Fatal(err)
	}
	np2 := np
	np2.VersionID = "v4"
	_, _, err = s.CreateProposal(ctx, np2)
	wantCode(t, err, relay.CodeIdempotencyConflict)
	a, err := s.ApproveProposal(ctx, p.ID, ProposalContentHash(SourceRepo, nil, "repo_9", "v3"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.ReadRoomAppStatus(ctx, "p1", room, a.InstanceID)
	if err != nil || st.Source != SourceRepo {
		t.Errorf("status = %+v, %v", st, err)
	}
}

// TestConcurrentRetries sends the same proposal from many goroutines at
// once: one card, the rest duplicates of it.
func TestConcurrentRetries(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	room := setupRoom(t, s, "p1")
	var wg sync.WaitGroup
	ids := make([]string, 16)
	dups := make([]bool, 16)
	errs := make([]error, 16)
	for i := range ids {
		wg.Go(func() {
			p, dup, err := s.CreateProposal(ctx, snippetProposal(room, timerFiles()))
			ids[i], dups[i], errs[i] = p.ID, dup, err
		})
	}
	wg.Wait()
	fresh := 0
	for i := range ids {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if ids[i] != ids[0] {
			t.Errorf("retry %d got proposal %s, want %s", i, ids[i], ids[0])
		}
		if !dups[i] {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("%d retries created a proposal, want exactly 1", fresh)
	}
}

// TestDecisionKeepsItsVia: Decide keeps how the owner decided with the
// decision (UnannouncedDecisions and GetProposal read it back); the review
// page's ApproveProposal/DeclineProposal keep none; a via over the bound is
// refused and the proposal stays pending.
func TestDecisionKeepsItsVia(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	room := setupRoom(t, s, "p1")
	a, _, err := s.CreateProposal(ctx, snippetProposal(room, timerFiles()))
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := s.CreateProposal(ctx, snippetProposal(room, map[string]string{"src/App.tsx": "export default () => 'b'"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decide(ctx, a.ID, Decision{Approve: true, ContentHash: a.ContentHash, Via: "x234567890abcdefg"}); err == nil {
		t.Fatal("a via of 17 bytes was accepted")
	}
	got, err := s.Decide(ctx, a.ID, Decision{Approve: true, ContentHash: a.ContentHash, Via: "cli"})
	if err != nil || got.State != ProposalApproved || got.DecidedVia != "cli" {
		t.Fatalf("Decide = %+v, %v; want approved via cli", got, err)
	}
	if d, err := s.DeclineProposal(ctx, b.ID); err != nil || d.DecidedVia != "" {
		t.Fatalf("DeclineProposal = %+v, %v; want no via", d, err)
	}
	un, err := s.UnannouncedDecisions(ctx)
	if err != nil || len(un) != 2 {
		t.Fatalf("UnannouncedDecisions = %+v, %v", un, err)
	}
	for _, p := range un {
		if want := map[string]string{a.ID: "cli", b.ID: ""}[p.ID]; p.DecidedVia != want {
			t.Errorf("%s read back via %q, want %q", p.ID, p.DecidedVia, want)
		}
	}
	if d, err := s.GetProposal(ctx, a.ID); err != nil || d.DecidedVia != "cli" {
		t.Errorf("GetProposal = %+v, %v; want via cli", d.Proposal, err)
	}
}
