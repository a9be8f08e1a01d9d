package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// BenchmarkMCPvsHTTP measures one read_room round trip through the MCP
// front (go-sdk client, stateless streamable HTTP, client token, directory
// lookup) beside the same command through the admin HTTP API, on one hub
// and one real agent in the same run, at 1 and 50 concurrent callers (each
// caller its own MCP session). It reports p50/p99 per call.
//
//	go test -run '^$' -bench MCPvsHTTP -benchtime 2000x ./e2e
func BenchmarkMCPvsHTTP(b *testing.B) {
	h := startHub(b, hub.Config{DataDir: b.TempDir()})
	dv := enroll(b, h, "proj-a")
	if err := os.MkdirAll(dv.home+"/config", 0o700); err != nil {
		b.Fatal(err)
	}
	pol := "version 1\nproject proj-a\n  enabled yes\n  commands read_room\n  rate 1000000/min burst 100000\n"
	if err := os.WriteFile(dv.policyPath(), []byte(pol), 0o600); err != nil {
		b.Fatal(err)
	}
	dv.start(b, h.URL())
	seedRoom(b, dv, "proj-a", "room-1")
	waitState(b, h, dv.id, hubapi.StateOnline)
	tok := clientToken(b, h, "proj-a", hubapi.ScopeRead)
	probe := mcpSession(b, h, tok.Token, nil)
	eventually(b, "room in the directory", func() bool { return len(listRooms(b, probe)) == 1 })

	args := json.RawMessage(`{"room_id":"room-1"}`)
	httpCall := func() func() error {
		return func() error {
			res, _, err := h.client.Command(context.Background(), dv.id, hubapi.CommandRequest{ProjectID: "proj-a", Name: relay.CmdReadRoom, Args: args})
			if err == nil && !res.OK {
				err = res.Error
			}
			return err
		}
	}
	mcpCall := func() func() error {
		cs := mcpSession(b, h, tok.Token, nil)
		return func() error {
			r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: relay.CmdReadRoom, Arguments: map[string]any{"room_id": "room-1"}})
			if err == nil && r.IsError {
				err = errText(resultText(r))
			}
			return err
		}
	}
	for _, conc := range []int{1, 50} {
		for _, path := range []struct {
			name string
			mk   func() func() error
		}{{"http", httpCall}, {"mcp", mcpCall}} {
			b.Run("read_room/"+path.name+"/conc="+itoa(conc), func(b *testing.B) {
				callers := make([]func() error, conc)
				for i := range callers {
					callers[i] = path.mk()
				}
				lat := make([]time.Duration, b.N)
				var wg sync.WaitGroup
				next := make(chan int)
				var failed sync.Once
				for c := range conc {
					wg.Go(func() {
						for i := range next {
							t := time.Now()
							err := callers[c]()
							lat[i] = time.Since(t)
							if err != nil {
								failed.Do(func() { b.Errorf("call failed: %v", err) })
							}
						}
					})
				}
				b.ResetTimer()
				start := time.Now()
				for i := range b.N {
					next <- i
				}
				close(next)
				wg.Wait()
				el := time.Since(start)
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
				b.ReportMetric(float64(b.N)/el.Seconds(), "calls/s")
			})
		}
	}
}

type errText string

func (e errText) Error() string { return string(e) }

// BenchmarkClickToWaitForReview measures the owner's approval on the device
// → wait_for_review returning to the MCP client: propose, start the wait,
// approve through the store as `roomrelay review approve` does, time the
// return. It reports the median.
//
//	go test -run '^$' -bench ClickToWaitForReview -benchtime 10x ./e2e
func BenchmarkClickToWaitForReview(b *testing.B) {
	h := startHub(b, hub.Config{DataDir: b.TempDir()})
	dv := enroll(b, h, "proj-a")
	dv.enableFast(b, "proj-a")
	dv.start(b, h.URL())
	seedRoom(b, dv, "proj-a", "room-1")
	waitState(b, h, dv.id, hubapi.StateOnline)
	cs := mcpSession(b, h, clientToken(b, h, "proj-a", hubapi.ScopeWrite).Token, nil)
	eventually(b, "room in the directory", func() bool { return len(listRooms(b, cs)) == 1 })
	owner := ownerStore(b, dv)
	lat := make([]time.Duration, 0, b.N)
	for i := range b.N {
		files := map[string]string{"src/App.tsx": "export default function App() { return <p>" + itoa(i) + "</p> }\n"}
		name := "App " + itoa(i)
		r := tool(b, cs, relay.CmdProposeRoomSnippetApp, map[string]any{"room_id": "room-1", "name": name, "files": files,
			"idempotency_key": relay.SnippetKey("room-1", name, files)})
		p := wantOK[struct {
			ProposalID string `json:"proposal_id"`
		}](b, "propose", r)
		done := make(chan time.Time, 1)
		started := make(chan struct{})
		go func() {
			close(started)
			r := tool(b, cs, "wait_for_review", map[string]any{"room_id": "room-1", "proposal_id": p.ProposalID, "timeout_seconds": 50})
			if r.IsError || !strings.HasPrefix(resultText(r), "Approved") {
				b.Errorf("wait: %s", resultText(r))
			}
			done <- time.Now()
		}()
		<-started
		time.Sleep(100 * time.Millisecond) // the wait is on the hub before the click
		d, err := owner.GetProposal(context.Background(), p.ProposalID)
		if err != nil {
			b.Fatal(err)
		}
		clicked := time.Now()
		if _, err := owner.ApproveProposal(context.Background(), p.ProposalID, d.ContentHash); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, (<-done).Sub(clicked))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "median-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "max-ms")
}

// ownerStore opens the device's store separately, as the review CLI does.
func ownerStore(t testing.TB, dv *device) *rooms.Store {
	t.Helper()
	s, err := rooms.Open(context.Background(), filepath.Join(dv.home, "data", daemon.RoomsDB), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
