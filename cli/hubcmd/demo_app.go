package hubcmd

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/cli"
	"github.com/roomrelay/roomrelay/relay"
)

// The demo's desktop-app step: examples/desktop-app (Node, on
// @roomrelay/localapi) owns a Room in its own file. The owner selects it as
// the room provider; the cloud reads that Room over MCP; the app quits and
// the model sees app_not_running; a proposal waits; the app reopens, the
// owner approves at its prompt and the app installs the snippet. From a
// checkout with Node ≥ 20 on PATH (demo_node.go runs the npm installs the
// first time); without Node the step is not shown and the demo says why.

const appRoom = "team-standup" // the room the example app creates on its first start

// demoApp is the example app as a child process: commands on stdin, its
// stable output lines collected.
type demoApp struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	lines []string
	done  bool
}

func startDemoApp(ctx context.Context, dir, home, data string) (*demoApp, error) {
	c := exec.CommandContext(ctx, "node", "app.mjs", "--home", home, "--data", data, "--project", demoProject)
	c.Dir = dir
	c.WaitDelay = 5 * time.Second
	a := &demoApp{cmd: c}
	var err error
	if a.stdin, err = c.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := c.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c.Stderr = c.Stdout
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("node app.mjs: %w", err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			a.mu.Lock()
			a.lines = append(a.lines, sc.Text())
			a.mu.Unlock()
		}
		a.mu.Lock()
		a.done = true
		a.mu.Unlock()
	}()
	return a, nil
}

// wait returns the submatches of the first output line matching re, or nil
// when none came within 30 s or the app exited.
func (a *demoApp) wait(re string) []string {
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		a.mu.Lock()
		for _, l := range a.lines {
			if m := rx.FindStringSubmatch(l); m != nil {
				a.mu.Unlock()
				return m
			}
		}
		done := a.done
		a.mu.Unlock()
		if done {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

func (a *demoApp) send(line string) { _, _ = io.WriteString(a.stdin, line+"\n") }

func (a *demoApp) stop() {
	a.send("quit")
	_ = a.stdin.Close()
	done := make(chan struct{})
	go func() { _ = a.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = a.cmd.Process.Kill()
		<-done
	}
}

func (a *demoApp) output() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strings.Join(a.lines, "\n")
}

// selectProvider writes `provider app` into the owner's policy (the running
// agent reloads it) and returns the policy as it was.
func selectProvider(configDir string) ([]byte, error) {
	path := cli.PolicyPath(configDir)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	src := "provider app\n" + string(b)
	if v, rest, ok := strings.Cut(string(b), "\n"); ok && strings.HasPrefix(v, "version") {
		src = v + "\nprovider app\n" + rest
	}
	pol, err := allowlist.Parse([]byte(src))
	if err != nil {
		return nil, err
	}
	return b, pol.Save(path)
}

func (d *demo) desktopAppStep(ctx context.Context, call func(string, any) *mcp.CallToolResult, deviceHome, configDir, builtinRoom string) {
	dir, skip, err := d.prepareDesktopApp(ctx)
	if skip != "" {
		d.skip("the desktop app step", skip)
		return
	}
	if err != nil {
		d.expect(false, "the desktop app could not be installed: %v", err)
		return
	}
	before, err := selectProvider(configDir)
	if err != nil {
		d.expect(false, "select the app as room provider: %v", err)
		return
	}
	// Back to roomrelay's own store afterwards, for the steps that follow.
	defer func() {
		if err := os.WriteFile(cli.PolicyPath(configDir), before, 0o600); err != nil {
			d.expect(false, "restore the policy: %v", err)
			return
		}
		var r *mcp.CallToolResult
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if r = call(relay.CmdReadRoom, map[string]any{"room_id": builtinRoom}); !r.IsError {
				break
			}
		}
		d.expect(!r.IsError, "the builtin room after `provider builtin` again: %s", mcpText(r))
		d.say("device owner: back to `provider builtin` (roomrelay's store serves %s again)", builtinRoom)
	}()
	d.say("device owner: `provider app` in the policy: the desktop app's own Rooms, not roomrelay's store")
	data := filepath.Join(d.dir, "desktop-app.rooms.json")
	t0 := time.Now()
	app, err := startDemoApp(ctx, dir, deviceHome, data)
	if err != nil {
		d.expect(false, "start the desktop app: %v", err)
		return
	}
	ok := app.wait(`^ready: provider connected`) != nil
	d.expect(ok, "the desktop app did not register as provider:\n%s", app.output())
	if !ok {
		app.stop()
		return
	}
	d.say("desktop app (node examples/desktop-app): registered as room provider over the local API; its Rooms live in its own file (%s)", since(t0))
	var r *mcp.CallToolResult
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if r = call(relay.CmdReadRoom, map[string]any{"room_id": appRoom}); !r.IsError {
			break
		}
	}
	d.expect(!r.IsError && strings.Contains(mcpText(r), "Team standup"), "MCP read_room of the app's room: %s", mcpText(r))
	d.say("MCP client: read_room %s → %s (answered by the app)", appRoom, mcpText(r))

	app.stop()
	t0 = time.Now()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if r = call(relay.CmdReadRoom, map[string]any{"room_id": appRoom}); r.IsError && strings.HasPrefix(mcpText(r), "app_not_running") {
			break
		}
	}
	d.expect(r.IsError && strings.HasPrefix(mcpText(r), "app_not_running"), "MCP read_room with the app closed: %s", mcpText(r))
	d.say("desktop app closed; MCP client: read_room → %s", firstLine(mcpText(r)))

	files := map[string]string{"src/App.tsx": "export default function App() {\n  return <div className=\"timer\">15:00</div>\n}\n"}
	r = call(relay.CmdProposeRoomSnippetApp, map[string]any{"room_id": appRoom, "name": "Standup timer", "files": files,
		"idempotency_key": relay.SnippetKey(appRoom, "Standup timer", files)})
	d.expect(!r.IsError, "MCP propose to the app's room while it is closed: %s", mcpText(r))
	d.say("MCP client: propose_room_snippet_app to %s while the app is closed → %s", appRoom, firstLine(mcpText(r)))

	app, err = startDemoApp(ctx, dir, deviceHome, data)
	if err != nil {
		d.expect(false, "reopen the desktop app: %v", err)
		return
	}
	defer app.stop()
	m := app.wait(`^approval needed: (\S+) "Standup timer"`)
	d.expect(m != nil, "the reopened app shows no pending proposal:\n%s", app.output())
	if m == nil {
		return
	}
	d.say("desktop app reopened: shows %q waiting for approval", m[0])
	app.send("approve " + m[1])
	inst := app.wait(`^installed: .*`)
	d.expect(inst != nil, "the app did not install the approved snippet:\n%s", app.output())
	if inst != nil {
		d.say("owner approves at the app's prompt (bound to the hash it computed); desktop app: %s (%s)", inst[0], since(t0))
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
