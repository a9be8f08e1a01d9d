package daemon

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/relay"
)

// TestSmokeSummaryMatchesResultSchema: a real smoke-run's summary, as
// smoke_run_room_app answers it, matches the command's published result
// schema (relay/schemas/smoke_run_room_app.result.json, the MCP
// outputSchema). The reads' and proposals' results are checked on real
// calls in e2e (the admin API's and the MCP front's helpers).
func TestSmokeSummaryMatchesResultSchema(t *testing.T) {
	t.Parallel()
	sb := realSandbox(t)
	for name, files := range map[string]map[string]string{
		"renders":    {"src/App.tsx": `export default function App(){ return <div><button onClick={() => {}}>hi</button></div> }`},
		"renders no": {"src/App.tsx": `export default function App(){ return null }`},
	} {
		res, err := sb.SmokeRun(context.Background(), files)
		if err != nil || !res.OK {
			t.Fatalf("%s: smoke-run: %v %+v", name, err, res)
		}
		b, _ := json.Marshal(smokeSummary(res))
		if err := relay.ValidateResult(relay.CmdSmokeRunRoomApp, b); err != nil {
			t.Errorf("%s: %v\nresult: %s", name, err, b)
		}
	}
}

// TestHandlersFollowTheTable: the daemon registers one handler per row of
// relay's command table and refuses a table and a registry that differ.
func TestHandlersFollowTheTable(t *testing.T) {
	t.Parallel()
	d := &Daemon{}
	hs := d.handlers()
	var got []string
	if err := registerTable(func(name string, _ agent.Handler) { got = append(got, name) }, hs); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, relay.CommandNames()) {
		t.Errorf("registered %v, want %v", got, relay.CommandNames())
	}
	missing := maps.Clone(hs)
	delete(missing, relay.CmdReadRoomAppStatus)
	if err := registerTable(func(string, agent.Handler) {}, missing); err == nil || !strings.Contains(err.Error(), "no handler for command read_room_app_status") {
		t.Errorf("a row without a handler: %v", err)
	}
	extra := maps.Clone(hs)
	extra["delete_room"] = hs[relay.CmdReadRoom]
	if err := registerTable(func(string, agent.Handler) {}, extra); err == nil || !strings.Contains(err.Error(), "delete_room is not in") {
		t.Errorf("a handler without a row: %v", err)
	}
}
