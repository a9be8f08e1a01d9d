package localapi

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/relay"
)

func apiCode(err error) string {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

func TestProjectsETag(t *testing.T) {
	t.Parallel()
	ta := startAPI(t, nil)
	ctx := context.Background()
	var pr ProjectsResponse
	hdr, err := ta.client.Do(ctx, "GET", "projects", nil, &pr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Get("ETag") != etag(pr.Revision) || len(pr.Projects) != 0 {
		t.Fatalf("empty policy: %v %+v", hdr, pr)
	}
	spec := allowlist.ProjectSpec{Enabled: true, Commands: []string{relay.CmdReadRoom, relay.CmdProposeRoomSnippetApp}, Rooms: []string{"*"}}
	// If-Match is required.
	if _, err := ta.client.Do(ctx, "PUT", "projects/p1", spec, nil, nil); apiCode(err) != CodePreconditionFailed {
		t.Fatalf("PUT without If-Match: %v", err)
	}
	var res ProjectResponse
	if _, err := ta.client.Do(ctx, "PUT", "projects/p1", spec, &res, http.Header{"If-Match": {etag(pr.Revision)}}); err != nil {
		t.Fatal(err)
	}
	if !res.Changed || !res.Project.Enabled || len(res.Project.Commands) != 2 || res.Revision == pr.Revision {
		t.Fatalf("PUT: %+v", res)
	}
	pol, err := allowlist.Load(filepath.Join(ta.cfg.ConfigDir, "policy"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pol.Decide("p1", relay.CmdProposeRoomSnippetApp, nil); err != nil && !strings.Contains(err.Error(), "invalid") {
		// Decide checks arguments too; what matters is the command is allowed.
		if e := relay.AsError(err); e.Code == relay.CodeCommandNotAllowed || e.Code == relay.CodeProjectNotEnabled {
			t.Fatalf("the file does not allow what PUT set: %v", err)
		}
	}
	// The old revision is stale now: 412, file unchanged.
	before, _ := os.ReadFile(filepath.Join(ta.cfg.ConfigDir, "policy"))
	spec.Commands = []string{relay.CmdReadRoom}
	if _, err := ta.client.Do(ctx, "PUT", "projects/p1", spec, nil, http.Header{"If-Match": {etag(pr.Revision)}}); apiCode(err) != CodePreconditionFailed {
		t.Fatalf("stale If-Match: %v", err)
	}
	// An unknown command: 400, file unchanged.
	spec.Commands = []string{"read_rooms"}
	if _, err := ta.client.Do(ctx, "PUT", "projects/p1", spec, nil, http.Header{"If-Match": {etag(res.Revision)}}); apiCode(err) != "invalid_args" || !strings.Contains(err.Error(), "read_rooms") {
		t.Fatalf("unknown command: %v", err)
	}
	// An unknown field: 400.
	if status, _, body := ta.raw("PUT", "/localapi/v1/projects/p1", map[string]string{"If-Match": etag(res.Revision)}, `{"enabled":true,"commands":["read_room"],"comands":[]}`); status != 400 {
		t.Fatalf("unknown field: %d %v", status, body)
	}
	after, _ := os.ReadFile(filepath.Join(ta.cfg.ConfigDir, "policy"))
	if !bytes.Equal(before, after) {
		t.Fatal("a refused PUT changed the file")
	}
	if n := len(ta.auditLines("localapi.put_project")); n != 1 {
		t.Fatalf("audited policy writes = %d, want 1", n)
	}
}

func TestEnableDisableShareTheCLIRules(t *testing.T) {
	t.Parallel()
	ta := startAPI(t, nil)
	ctx := context.Background()
	var res ProjectResponse
	if _, err := ta.client.Do(ctx, "POST", "projects/p2/enable", allowlist.EnableRequest{Allow: []string{relay.CmdProposeRoomSnippetApp}, Rooms: []string{"r1", "r2"}}, &res, nil); err != nil {
		t.Fatal(err)
	}
	want := append(append([]string{}, allowlist.DefaultCommands...), relay.CmdProposeRoomSnippetApp)
	if strings.Join(res.Project.Commands, ",") != strings.Join(want, ",") || strings.Join(res.Project.Rooms, ",") != "r1,r2" {
		t.Fatalf("enable: %+v", res.Project)
	}
	for _, bad := range []allowlist.EnableRequest{
		{Only: []string{relay.CmdReadRoom}, Allow: []string{relay.CmdListRoomApps}},
		{Deny: allowlist.DefaultCommands},
		{Rooms: []string{"*", "r1"}},
		{Allow: []string{"nope"}},
	} {
		if _, err := ta.client.Do(ctx, "POST", "projects/p3/enable", bad, nil, nil); apiCode(err) != "invalid_args" {
			t.Errorf("enable %+v: %v", bad, err)
		}
	}
	if _, err := ta.client.Do(ctx, "POST", "projects/p2/disable", nil, &res, nil); err != nil || res.Project.Enabled {
		t.Fatalf("disable: %+v %v", res, err)
	}
	if _, err := ta.client.Do(ctx, "POST", "projects/nope/disable", nil, nil, nil); apiCode(err) != "not_found" {
		t.Fatalf("disable unknown: %v", err)
	}
	if _, err := ta.client.Do(ctx, "POST", "projects/p2/enable", nil, nil, http.Header{"If-Match": {`"stale"`}}); apiCode(err) != CodePreconditionFailed {
		t.Fatalf("stale If-Match on enable: %v", err)
	}
}

// seedProposal stores a pending snippet proposal whose file has one U+202E.
func seedProposal(t *testing.T, s *rooms.Store, key string) rooms.Proposal {
	t.Helper()
	ctx := context.Background()
	if _, err := s.CreateProject(ctx, "p1", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRoom(ctx, rooms.NewRoom{ID: "r1", ProjectID: "p1", Name: "Room"}); err != nil && !strings.Contains(err.Error(), "exists") {
		t.Fatal(err)
	}
	p, _, err := s.CreateProposal(ctx, rooms.NewProposal{ProjectID: "p1", RoomID: "r1", Kind: rooms.SourceSnippet, Name: "Timer",
		Files: map[string]string{"App.tsx": "export default function App() { return <p>\u202eok</p> }\n"}, IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestProposalsReviewedByHash(t *testing.T) {
	t.Parallel()
	ta := startAPI(t, nil)
	ctx := context.Background()
	p := seedProposal(t, ta.store, "k1")
	evs := ta.events("")

	var list ProposalsResponse
	if _, err := ta.client.Do(ctx, "GET", "proposals", nil, &list, nil); err != nil || len(list.Proposals) != 1 || list.Proposals[0].ID != p.ID {
		t.Fatalf("list: %+v %v", list, err)
	}
	var d ProposalDetail
	if _, err := ta.client.Do(ctx, "GET", "proposals/"+p.ID, nil, &d, nil); err != nil {
		t.Fatal(err)
	}
	if len(d.Files) != 1 || d.Files[0].Hidden == nil || d.Files[0].Hidden.Bidi != 1 || !d.HasHidden || d.ContentHash != p.ContentHash {
		t.Fatalf("show: %+v", d)
	}
	wrong := strings.Repeat("0", 64)
	if _, err := ta.client.Do(ctx, "POST", "proposals/"+p.ID+"/approve", DecideRequest{ContentHash: wrong}, nil, nil); apiCode(err) != CodeHashMismatch {
		t.Fatalf("wrong hash: %v", err)
	}
	if cur, _ := ta.store.GetProposal(ctx, p.ID); cur.State != rooms.ProposalPending {
		t.Fatalf("after a wrong hash the proposal is %s", cur.State)
	}
	var dr DecisionResponse
	if _, err := ta.client.Do(ctx, "POST", "proposals/"+p.ID+"/approve", DecideRequest{ContentHash: p.ContentHash}, &dr, nil); err != nil || dr.State != rooms.ProposalApproved || dr.Repeated {
		t.Fatalf("approve: %+v %v", dr, err)
	}
	if _, err := ta.client.Do(ctx, "POST", "proposals/"+p.ID+"/approve", DecideRequest{ContentHash: p.ContentHash}, &dr, nil); err != nil || !dr.Repeated || dr.State != rooms.ProposalApproved {
		t.Fatalf("approve again: %+v %v", dr, err)
	}
	if _, err := ta.client.Do(ctx, "POST", "proposals/"+p.ID+"/decline", nil, nil, nil); apiCode(err) != CodeConflict {
		t.Fatalf("decline an approved one: %v", err)
	}
	e := evs.nextNonPing()
	if e.Type != events.TypeProposalDecided || !strings.Contains(string(e.Data), `"decided_via":"app"`) {
		t.Fatalf("event %+v", e)
	}
	lines := ta.auditLines("localapi.approve")
	if len(lines) != 1 || !strings.Contains(lines[0].Detail, "decided_via=app") || !strings.Contains(lines[0].Detail, "pid=") || lines[0].CommandID != p.ID {
		t.Fatalf("audit: %+v", lines)
	}
	if len(ta.decided) != 1 || ta.decided[0] != p.ID+":approved:app" {
		t.Fatalf("Decided hook: %v", ta.decided)
	}
}

func TestDeclineThenApproveConflicts(t *testing.T) {
	t.Parallel()
	ta := startAPI(t, nil)
	ctx := context.Background()
	p := seedProposal(t, ta.store, "k1")
	var dr DecisionResponse
	if _, err := ta.client.Do(ctx, "POST", "proposals/"+p.ID+"/decline", DecideRequest{DecidedVia: ViaCLI}, &dr, nil); err != nil || dr.State != rooms.ProposalDeclined || dr.DecidedVia != ViaCLI {
		t.Fatalf("decline: %+v %v", dr, err)
	}
	if _, err := ta.client.Do(ctx, "POST", "proposals/"+p.ID+"/approve", DecideRequest{ContentHash: p.ContentHash}, nil, nil); apiCode(err) != CodeConflict {
		t.Fatalf("approve a declined one: %v", err)
	}
	if _, err := ta.client.Do(ctx, "POST", "proposals/"+p.ID+"/decline", nil, &dr, nil); err != nil || !dr.Repeated {
		t.Fatalf("decline again: %+v %v", dr, err)
	}
	if _, err := ta.client.Do(ctx, "POST", "proposals/"+p.ID+"/approve", DecideRequest{}, nil, nil); apiCode(err) != "invalid_args" {
		t.Fatalf("approve without a hash: %v", err)
	}
	if _, err := ta.client.Do(ctx, "GET", "proposals/prop_nope", nil, nil, nil); apiCode(err) != "not_found" {
		t.Fatalf("unknown proposal: %v", err)
	}
	var st StatusResponse
	if _, err := ta.client.Do(ctx, "GET", "status", nil, &st, nil); err != nil || st.PendingProposals != 0 {
		t.Fatalf("status: %+v %v", st, err)
	}
	var au struct {
		Entries []AuditOutcome `json:"entries"`
	}
	if _, err := ta.client.Do(ctx, "GET", "audit?limit=5", nil, &au, nil); err != nil || len(au.Entries) == 0 || au.Entries[0].Command != "localapi.decline" {
		t.Fatalf("audit route: %+v %v", au, err)
	}
}
