package rooms

import (
	"errors"
	"testing"

	"github.com/roomrelay/roomrelay/relay"
)

// TestProviderDirectory: the desktop app's directory is kept for proposals
// while the app is closed; builtin reads never see it; a builtin room's id is
// never taken over; a room the app stopped listing takes no proposals.
func TestProviderDirectory(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	builtin := setupRoom(t, s, "p1")
	skipped, err := s.SyncProviderRooms(ctx, []ProviderRoom{{ID: "app-room", Project: "p1", Name: "App room"},
		{ID: builtin, Project: "p1", Name: "takeover"}, {ID: "other", Project: "p2", Name: "Other"}})
	if err != nil || len(skipped) != 1 || skipped[0] != builtin {
		t.Fatalf("sync: skipped %v, %v", skipped, err)
	}
	got, err := s.ListProviderRooms(ctx, "p1")
	if err != nil || len(got) != 1 || got[0] != (ProviderRoom{ID: "app-room", Project: "p1", Name: "App room"}) {
		t.Fatalf("app rooms %+v %v", got, err)
	}
	if _, err := s.ReadRoom(ctx, "p1", "app-room"); err == nil {
		t.Fatal("a builtin read sees the app's room")
	}
	if rs, _ := s.ListRooms(ctx, ""); len(rs) != 1 || rs[0].ID != builtin {
		t.Fatalf("builtin rooms %+v", rs)
	}
	np := snippetProposal("app-room", timerFiles())
	if _, _, err := s.CreateProposal(ctx, np); err == nil {
		t.Fatal("a proposal for the builtin provider reached an app room")
	}
	np.Provider = ProviderApp
	if _, _, err := s.CreateProposal(ctx, np); err != nil {
		t.Fatal(err)
	}
	bp := snippetProposal(builtin, timerFiles())
	bp.Provider = ProviderApp
	if _, _, err := s.CreateProposal(ctx, bp); err == nil {
		t.Fatal("a proposal for the app provider reached a builtin room")
	}
	if _, err := s.SyncProviderRooms(ctx, nil); err != nil {
		t.Fatal(err)
	}
	np.IdempotencyKey, np.Name = "k2", "Other name"
	_, _, err = s.CreateProposal(ctx, np)
	wantCode(t, err, relay.CodeNotFound)
	if n, _ := s.PendingProposals(ctx, "app-room"); n != 1 {
		t.Fatalf("pending %d: the room's proposal must survive the app dropping the room", n)
	}
}

// TestApprovalCommitsAnInstallRow: an approval in an app room commits the
// decision and a pending install row, and creates no builtin app; in a
// builtin room the app is created and the install is installed at once.
func TestApprovalCommitsAnInstallRow(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	builtin := setupRoom(t, s, "p1")
	if _, err := s.SyncProviderRooms(ctx, []ProviderRoom{{ID: "app-room", Project: "p1", Name: "App room"}}); err != nil {
		t.Fatal(err)
	}
	np := snippetProposal("app-room", timerFiles())
	np.Provider = ProviderApp
	p, _, err := s.CreateProposal(ctx, np)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.ApproveProposal(ctx, p.ID, p.ContentHash)
	if err != nil || a.InstanceID == "" || a.State != ProposalApproved {
		t.Fatalf("approve %+v %v", a, err)
	}
	in, err := s.InstallOf(ctx, a.InstanceID)
	if err != nil || in.State != InstallPending || in.ProposalID != p.ID {
		t.Fatalf("install %+v %v", in, err)
	}
	var apps int
	_ = s.db.QueryRow(`SELECT count(*) FROM apps`).Scan(&apps)
	if apps != 0 {
		t.Fatalf("%d builtin apps for an app room's approval", apps)
	}
	jobs, err := s.PendingInstalls(ctx)
	if err != nil || len(jobs) != 1 || jobs[0].ID != p.ID || relay.ContentHash(jobs[0].Files) != p.ContentHash {
		t.Fatalf("jobs %+v %v", jobs, err)
	}
	if err := s.FinishInstall(ctx, p.ID, InstallInstalled, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishInstall(ctx, p.ID, InstallFailed, "late"); err != nil {
		t.Fatal(err)
	}
	if in, _ := s.InstallOf(ctx, a.InstanceID); in.State != InstallInstalled {
		t.Fatalf("a later answer changed a finished install: %+v", in)
	}
	if jobs, _ := s.PendingInstalls(ctx); len(jobs) != 0 {
		t.Fatalf("jobs after install %+v", jobs)
	}

	bp, _, err := s.CreateProposal(ctx, snippetProposal(builtin, timerFiles()))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.ApproveProposal(ctx, bp.ID, bp.ContentHash)
	if err != nil {
		t.Fatal(err)
	}
	if in, err := s.InstallOf(ctx, b.InstanceID); err != nil || in.State != InstallInstalled {
		t.Fatalf("builtin install %+v %v", in, err)
	}
	if _, err := s.ReadRoomAppStatus(ctx, "p1", builtin, b.InstanceID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InstallOf(ctx, "app_none"); !errors.Is(err, ErrNoInstall) {
		t.Fatalf("unknown instance: %v", err)
	}
}

// TestDecisionAndInstallAreOneTransaction: when the install row cannot be
// written, the decision is not committed either.
func TestDecisionAndInstallAreOneTransaction(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	if _, err := s.SyncProviderRooms(ctx, []ProviderRoom{{ID: "app-room", Project: "p1", Name: "App room"}}); err != nil {
		t.Fatal(err)
	}
	np := snippetProposal("app-room", timerFiles())
	np.Provider = ProviderApp
	p, _, err := s.CreateProposal(ctx, np)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`CREATE TRIGGER no_installs BEFORE INSERT ON installs BEGIN SELECT RAISE(ABORT, 'disk says no'); END`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ApproveProposal(ctx, p.ID, p.ContentHash); err == nil {
		t.Fatal("approved without an install row")
	}
	got, err := s.GetProposal(ctx, p.ID)
	if err != nil || got.State != ProposalPending || got.InstanceID != "" {
		t.Fatalf("after the failed approval: %+v %v; want still pending", got.Proposal, err)
	}
	if _, err := s.db.Exec(`DROP TRIGGER no_installs`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ApproveProposal(ctx, p.ID, p.ContentHash); err != nil {
		t.Fatal(err)
	}
}
