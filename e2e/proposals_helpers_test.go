package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/relay"
)

// proposeCommands are what the proposal tests enable.
var proposeCommands = []string{relay.CmdReadRoom, relay.CmdListRoomApps, relay.CmdReadRoomAppStatus,
	relay.CmdProposeRoomSnippetApp, relay.CmdProposeRoomRepoApp, relay.CmdSmokeRunRoomApp}

// enableFast enables project with the propose commands and a rate high
// enough for a thousand proposals, by writing the owner's policy file.
func (dv *device) enableFast(t testing.TB, project string) {
	t.Helper()
	dv.enable(t, project, proposeCommands...)
	b, err := os.ReadFile(dv.policyPath())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "rate ") {
			continue
		}
		out = append(out, line)
		if strings.TrimSpace(line) == "project "+project {
			out = append(out, "  rate 100000/min burst 1000")
			// The seed's table leaves up to a thousand proposals pending
			// in one room: the ceiling of the pending bounds.
			out = append(out, fmt.Sprintf("  max %s %d", allowlist.BoundPendingRoom, allowlist.MaxPending),
				fmt.Sprintf("  max %s %d", allowlist.BoundPendingProject, allowlist.MaxPending))
		}
	}
	text := strings.Join(out, "\n")
	p, err := allowlist.Parse([]byte(text))
	if err != nil {
		t.Fatalf("policy with a high rate: %v\n%s", err, text)
	}
	if r, ok := p.RateOf(project); !ok || r.Burst != 1000 {
		t.Fatalf("rate not applied: %+v\n%s", r, text)
	}
	if err := os.WriteFile(dv.policyPath(), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// emptyRoom creates a Room with no apps in the device's store.
func emptyRoom(t testing.TB, dv *device, project, room string) {
	t.Helper()
	ctx := context.Background()
	s := dv.d.Store()
	ps, err := s.ListProjects(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(ps, func(p rooms.Project) bool { return p.ID == project }) {
		if _, err := s.CreateProject(ctx, project, project); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateRoom(ctx, rooms.NewRoom{ID: room, ProjectID: project, Name: room}); err != nil {
		t.Fatal(err)
	}
}

func decodeProposal(t testing.TB, res *relay.Result) daemon.ProposalResult {
	t.Helper()
	var pr daemon.ProposalResult
	if !res.OK || json.Unmarshal(res.Result, &pr) != nil || pr.ProposalID == "" {
		t.Fatalf("proposal result: %+v %s", res.Error, res.Result)
	}
	return pr
}

func launcherCount(t testing.TB, dv *device, project, room string) int {
	t.Helper()
	page, err := dv.d.Store().ListRoomApps(context.Background(), project, room, 50, "")
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Items)
}
