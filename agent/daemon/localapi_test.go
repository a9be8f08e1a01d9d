package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/relay"
)

// TestLocalAPIWiredIntoRun: the running daemon serves the local API with
// its live status; a policy change through the API is reloaded and
// announced as policy_changed; a proposal made by a command arrives as
// proposal_created after the command's command_ran; an approval through the
// API is told to the hub (announced) at once, and to local apps once; one
// made on the store is told to local apps by the daemon, without
// decided_via.
func TestLocalAPIWiredIntoRun(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()

	c, disc, err := discoverSoon(d.cfg.ConfigDir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if disc.BootID != d.Events().BootID() {
		t.Fatalf("discovery boot id %q, events %q", disc.BootID, d.Events().BootID())
	}
	var st localapi.StatusResponse
	if _, err := c.Do(ctx, "GET", "status", nil, &st, nil); err != nil || st.DeviceID != "dev-test" {
		t.Fatalf("status: %+v %v", st, err)
	}
	resp, err := c.Stream(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	next := func(typ string) localapi.Event {
		t.Helper()
		for lines.Scan() {
			var e localapi.Event
			if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
				t.Fatal(err)
			}
			if e.Type == typ {
				return e
			}
		}
		t.Fatalf("stream ended before %s", typ)
		return localapi.Event{}
	}

	var pr localapi.ProjectsResponse
	h, err := c.Do(ctx, "GET", "projects", nil, &pr, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := allowlist.ProjectSpec{Enabled: true, Commands: []string{relay.CmdReadRoom, relay.CmdProposeRoomSnippetApp}}
	if _, err := c.Do(ctx, "PUT", "projects/p", spec, nil, http.Header{"If-Match": {h.Get("ETag")}}); err != nil {
		t.Fatal(err)
	}
	if e := next(events.TypePolicyChanged); !strings.Contains(string(e.Data), relay.CmdProposeRoomSnippetApp) {
		t.Fatalf("policy_changed %s", e.Data)
	}
	if got := d.Policy().Summary(); len(got) != 1 || len(got[0].Commands) != 2 {
		t.Fatalf("the daemon did not reload the PUT: %+v", got)
	}

	if _, err := d.store.CreateProject(ctx, "p", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := d.store.CreateRoom(ctx, rooms.NewRoom{ID: "r1", ProjectID: "p", Name: "R"}); err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(relay.ProposeSnippetArgs{RoomID: "r1", Name: "App", IdempotencyKey: "key-00001",
		Files: map[string]string{"src/App.tsx": "export default function App() { return null }\n"}})
	cmd := &relay.Command{ID: "c1", ProjectID: "p", Name: relay.CmdProposeRoomSnippetApp, Args: args}
	if err := d.guard(ctx, cmd); err != nil {
		t.Fatal(err)
	}
	out, err := d.propose(ctx, rooms.NewProposal{ProjectID: "p", RoomID: "r1", Kind: rooms.SourceSnippet, Name: "App",
		Files: map[string]string{"src/App.tsx": "export default function App() { return null }\n"}, IdempotencyKey: "key-00001"})
	if err != nil {
		t.Fatal(err)
	}
	d.record(cmd, &relay.Result{}, time.Millisecond, false)
	if e := next(events.TypeProposalCreated); !strings.Contains(string(e.Data), out.(ProposalResult).ProposalID) {
		t.Fatalf("proposal_created %s", e.Data)
	}
	if e := next(events.TypeCommandRan); strings.Contains(string(e.Data), "App.tsx") || !strings.Contains(string(e.Data), `"outcome":"ok"`) {
		t.Fatalf("command_ran %s (never arguments)", e.Data)
	}
	p, err := d.store.GetProposal(ctx, out.(ProposalResult).ProposalID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do(ctx, "POST", "proposals/"+p.ID+"/approve", localapi.DecideRequest{ContentHash: p.ContentHash}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if e := next(events.TypeProposalDecided); !strings.Contains(string(e.Data), `"decided_via":"app"`) {
		t.Fatalf("proposal_decided %s", e.Data)
	}
	// Decided pokes the publisher: the hub's event is queued by now (no
	// sandbox here, so no smoke-run comes first).
	if un, err := d.store.UnannouncedDecisions(ctx); err != nil || len(un) != 0 {
		t.Fatalf("decision not announced at once: %+v %v", un, err)
	}
	// The announcement publishes no second proposal_decided: the proposal
	// carries decided_via, so the daemon knows the API told local apps.
	d.pub.Publish(events.Resync{Reason: "marker"})
	for lines.Scan() {
		var e localapi.Event
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if e.Type == events.TypeProposalDecided {
			t.Fatalf("a second proposal_decided for an API decision: %s", e.Data)
		}
		if e.Type == events.TypeResync {
			break
		}
	}
	// A decision on the store (the review page, the CLI without an agent)
	// has no decided_via: the daemon tells local apps when it sees it.
	out2, err := d.propose(ctx, rooms.NewProposal{ProjectID: "p", RoomID: "r1", Kind: rooms.SourceSnippet, Name: "App 2",
		Files: map[string]string{"src/App.tsx": "export default function App() { return 2 }\n"}, IdempotencyKey: "key-00002"})
	if err != nil {
		t.Fatal(err)
	}
	id2 := out2.(ProposalResult).ProposalID
	if _, err := d.store.DeclineProposal(ctx, id2); err != nil {
		t.Fatal(err)
	}
	d.Poke(ctx) // publishes the decisions it finds before it returns (no sandbox: no smoke-run)
	d.pub.Publish(events.Resync{Reason: "marker 2"})
	var decided []string
	for lines.Scan() {
		var e localapi.Event
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if e.Type == events.TypeProposalDecided {
			decided = append(decided, string(e.Data))
		}
		if e.Type == events.TypeResync {
			break
		}
	}
	if len(decided) != 1 || !strings.Contains(decided[0], id2) || strings.Contains(decided[0], "decided_via") {
		t.Fatalf("proposal_decided of a decision on the store: %q; want one for %s without decided_via", decided, id2)
	}
}

func discoverSoon(dir string) (*localapi.Client, localapi.Discovery, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, d, err := localapi.Discover(context.Background(), dir)
		if err == nil || time.Now().After(deadline) {
			return c, d, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}
