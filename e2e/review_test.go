package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/examples"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

func standupTimer(t testing.TB) map[string]string {
	t.Helper()
	return examples.StandupTimer()
}

// TestProposalReviewEvent: the standup timer is proposed through the hub,
// the owner approves it through the review code path (the device's store
// file, opened separately as `roomrelay review approve` does), and a cloud
// caller blocked in the hub's long poll learns of it without polling.
func TestProposalReviewEvent(t *testing.T) {
	h := startHub(t, hub.Config{DataDir: t.TempDir()})
	dv := enroll(t, h, "proj-a")
	dv.enableFast(t, "proj-a")
	dv.start(t, h.URL())
	seedRoom(t, dv, "proj-a", "room-1") // one app already in the launcher
	waitState(t, h, dv.id, hubapi.StateOnline)
	ctx := context.Background()

	files := standupTimer(t)
	key := relay.SnippetKey("room-1", "Standup timer", files)
	args := map[string]any{"room_id": "room-1", "name": "Standup timer", "files": files, "idempotency_key": key}
	res, status := call(t, h, dv.id, "proj-a", relay.CmdProposeRoomSnippetApp, args)
	first := decodeProposal(t, res)
	if status != 200 || first.Duplicate || first.State != "pending_review" {
		t.Fatalf("propose: %d %+v", status, first)
	}
	// The retry after a lost response: same key, same content.
	res, _ = call(t, h, dv.id, "proj-a", relay.CmdProposeRoomSnippetApp, args)
	if dup := decodeProposal(t, res); !dup.Duplicate || dup.ProposalID != first.ProposalID {
		t.Fatalf("retry: %+v", dup)
	}
	// Same key, other content.
	other := map[string]string{"src/App.tsx": files["src/App.tsx"] + "\n// changed\n", "src/styles.css": files["src/styles.css"]}
	res, status = call(t, h, dv.id, "proj-a", relay.CmdProposeRoomSnippetApp,
		map[string]any{"room_id": "room-1", "name": "Standup timer", "files": other, "idempotency_key": key})
	if res.OK || res.Error.Code != relay.CodeIdempotencyConflict || status != 409 {
		t.Fatalf("same key, other content: %d %+v", status, res.Error)
	}

	// Pending: not an app, not readable or runnable as one; counted by read_room.
	res, _ = call(t, h, dv.id, "proj-a", relay.CmdListRoomApps, map[string]any{"room_id": "room-1"})
	var page rooms.AppPage
	if !res.OK || json.Unmarshal(res.Result, &page) != nil || len(page.Items) != 1 || page.Items[0].Name == "Standup timer" {
		t.Fatalf("list_room_apps while pending: %s", res.Result)
	}
	for _, cmd := range []string{relay.CmdReadRoomAppStatus, relay.CmdSmokeRunRoomApp} {
		res, status := call(t, h, dv.id, "proj-a", cmd, map[string]any{"room_id": "room-1", "instance_id": first.ProposalID})
		if res.OK || res.Error.Code != relay.CodeNotFound || status != 404 {
			t.Errorf("%s on a pending proposal: %d %+v", cmd, status, res.Error)
		}
	}
	res, _ = call(t, h, dv.id, "proj-a", relay.CmdReadRoom, map[string]any{"room_id": "room-1"})
	var rs rooms.RoomSummary
	if !res.OK || json.Unmarshal(res.Result, &rs) != nil || rs.PendingProposals != 1 || rs.AppCount != 1 {
		t.Fatalf("read_room while pending: %s", res.Result)
	}
	if st, err := h.client.WaitProposal(ctx, dv.id, first.ProposalID, 0); err != nil || st.State != hubapi.ProposalPending {
		t.Fatalf("hub state while pending: %+v %v", st, err)
	}

	// The cloud caller blocks in one long poll.
	type answer struct {
		st  *hubapi.ProposalState
		err error
		at  time.Time
	}
	got := make(chan answer, 1)
	go func() {
		st, err := h.client.WaitProposal(ctx, dv.id, first.ProposalID, 30*time.Second)
		got <- answer{st, err, time.Now()}
	}()
	// Decide only once the long poll is parked at the hub: the decision's
	// event must wake it (one stored first would merely be read).
	eventually(t, "the long poll parked", func() bool { return h.ProposalWaits() == 1 })
	select {
	case a := <-got:
		t.Fatalf("the long poll answered before the owner decided: %+v %v", a.st, a.err)
	default:
	}

	// The owner approves from another process's view of the store.
	owner, err := rooms.Open(ctx, filepath.Join(dv.home, "data", daemon.RoomsDB), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	detail, err := owner.GetProposal(ctx, first.ProposalID)
	if err != nil || len(detail.Files) != 2 {
		t.Fatalf("owner's view: %v", err)
	}
	clicked := time.Now()
	approved, err := owner.ApproveProposal(ctx, first.ProposalID, detail.ContentHash)
	if err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil || a.st.State != hubapi.ProposalApproved || a.st.InstanceID != approved.InstanceID || a.st.InstanceID == "" {
		t.Fatalf("cloud saw %+v %v, want approved %s", a.st, a.err, approved.InstanceID)
	}
	t.Logf("approval → cloud: %s (one long-poll request; agent tick 50 ms)", a.at.Sub(clicked).Round(time.Millisecond))

	res, _ = call(t, h, dv.id, "proj-a", relay.CmdListRoomApps, map[string]any{"room_id": "room-1"})
	if !res.OK || json.Unmarshal(res.Result, &page) != nil || len(page.Items) != 2 ||
		!slices.ContainsFunc(page.Items, func(i rooms.AppItem) bool { return i.InstanceID == approved.InstanceID }) {
		t.Fatalf("launcher after approval: %s", res.Result)
	}
	res, _ = call(t, h, dv.id, "proj-a", relay.CmdReadRoomAppStatus, map[string]any{"room_id": "room-1", "instance_id": approved.InstanceID})
	if !res.OK {
		t.Fatalf("read_room_app_status after approval: %+v", res.Error)
	}
	// A spent key stays spent: the retry now reports the decided proposal.
	res, _ = call(t, h, dv.id, "proj-a", relay.CmdProposeRoomSnippetApp, args)
	if dup := decodeProposal(t, res); !dup.Duplicate || dup.State != rooms.ProposalApproved {
		t.Fatalf("retry after approval: %+v", dup)
	}

	// A decline reaches the cloud the same way.
	declined := map[string]string{"src/App.tsx": "export default function App() { return null }\n"}
	res, _ = call(t, h, dv.id, "proj-a", relay.CmdProposeRoomSnippetApp, map[string]any{"room_id": "room-1", "name": "Nope",
		"files": declined, "idempotency_key": relay.SnippetKey("room-1", "Nope", declined)})
	second := decodeProposal(t, res)
	go func() {
		st, err := h.client.WaitProposal(ctx, dv.id, second.ProposalID, 30*time.Second)
		got <- answer{st, err, time.Now()}
	}()
	eventually(t, "the second long poll parked", func() bool { return h.ProposalWaits() == 1 })
	if _, err := owner.DeclineProposal(ctx, second.ProposalID); err != nil {
		t.Fatal(err)
	}
	if a := <-got; a.err != nil || a.st.State != hubapi.ProposalDeclined || a.st.InstanceID != "" {
		t.Fatalf("decline seen as %+v %v", a.st, a.err)
	}
}

// BenchmarkApprovalLatency: the time from the owner's approval to a
// long-polling cloud caller seeing it, through the agent's store watch, the
// proposal_decided event and the hub's KV watch (agent tick 50 ms as a
// safety net only). Each wait is parked at the hub before the approval.
//
//	go test -run '^$' -bench ApprovalLatency -benchtime 20x ./e2e
func BenchmarkApprovalLatency(b *testing.B) {
	h := startHub(b, hub.Config{DataDir: b.TempDir()})
	dv := enroll(b, h, "proj-a")
	dv.enableFast(b, "proj-a")
	dv.start(b, h.URL())
	waitState(b, h, dv.id, hubapi.StateOnline)
	emptyRoom(b, dv, "proj-a", "room-1")
	ctx := context.Background()
	var lat []time.Duration
	for i := range b.N {
		files := map[string]string{"src/App.tsx": fmt.Sprintf("export default function App() { return %d }\n", i)}
		name := fmt.Sprintf("App %d", i)
		res, _ := call(b, h, dv.id, "proj-a", relay.CmdProposeRoomSnippetApp, map[string]any{"room_id": "room-1", "name": name,
			"files": files, "idempotency_key": relay.SnippetKey("room-1", name, files)})
		pr := decodeProposal(b, res)
		done := make(chan time.Time, 1)
		go func() {
			st, err := h.client.WaitProposal(ctx, dv.id, pr.ProposalID, 30*time.Second)
			if err != nil || st.State != hubapi.ProposalApproved {
				b.Errorf("wait: %+v %v", st, err)
			}
			done <- time.Now()
		}()
		eventually(b, "the long poll parked", func() bool { return h.ProposalWaits() == 1 })
		clicked := time.Now()
		if _, err := dv.d.Store().ApproveProposal(ctx, pr.ProposalID, relay.ContentHash(files)); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, (<-done).Sub(clicked))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
}

// BenchmarkProposeEndToEnd: proposals per second from an admin client
// through the hub, NATS, the websocket and the agent into the device's
// SQLite store, each a distinct 2-file snippet, from 1 and from 4
// concurrent callers (the agent runs at most 8 commands at once).
func BenchmarkProposeEndToEnd(b *testing.B) {
	h := startHub(b, hub.Config{DataDir: b.TempDir()})
	dv := enroll(b, h, "proj-a")
	dv.enableFast(b, "proj-a")
	dv.start(b, h.URL())
	waitState(b, h, dv.id, hubapi.StateOnline)
	emptyRoom(b, dv, "proj-a", "room-1")
	css := "body { margin: 0 }\n"
	for _, callers := range []int{1, 4} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			var seq atomicCounter
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range callers {
				wg.Go(func() {
					for {
						n := seq.next()
						if n > int64(b.N) {
							return
						}
						name := fmt.Sprintf("bench %d %d %d", callers, b.N, n)
						files := map[string]string{"src/App.tsx": fmt.Sprintf("export default function App() { return %d }\n", n), "src/styles.css": css}
						raw, _ := json.Marshal(map[string]any{"room_id": "room-1", "name": name, "files": files,
							"idempotency_key": relay.SnippetKey("room-1", name, files)})
						res, _, err := h.client.Command(context.Background(), dv.id, hubapi.CommandRequest{ProjectID: "proj-a",
							Name: relay.CmdProposeRoomSnippetApp, Args: raw, TimeoutMS: 10000})
						if err != nil || !res.OK {
							b.Errorf("propose: %v %+v", err, res)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "proposals/s")
		})
	}
}
