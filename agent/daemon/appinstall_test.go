package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/agent/notify"
	"github.com/roomrelay/roomrelay/agent/provider"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/examples"
	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/sandbox"
	"github.com/roomrelay/roomrelay/sandbox/sandboxtest"
)

// Smoke-runs run in real worker processes: the test binary is its own worker.
func TestMain(m *testing.M) { sandboxtest.Main(m) }

// recordingSandbox is the real sandbox pool, noting the files of every run.
type recordingSandbox struct {
	pool *sandbox.Pool
	mu   sync.Mutex
	runs []map[string]string
}

func (r *recordingSandbox) SmokeRun(ctx context.Context, files map[string]string) (*sandbox.Result, error) {
	r.mu.Lock()
	r.runs = append(r.runs, maps.Clone(files))
	r.mu.Unlock()
	return r.pool.SmokeRun(ctx, files)
}

func (r *recordingSandbox) ran() []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]string(nil), r.runs...)
}

// realSandbox is a one-worker pool with the pinned React runtime (fetched
// into the user cache if missing, as the sandbox tests do).
func realSandbox(t *testing.T) *recordingSandbox {
	return &recordingSandbox{pool: sandboxtest.Pool(t, "", 10*time.Second)}
}

// deskApp is a desktop app on the agent's real local API socket: it says
// hello with caps, sends its directory, and answers apps.install (held until
// release is closed; with mangle it rewrites line endings before hashing, a
// believable bug, so it refuses the content) and apps.status.
type deskApp struct {
	conn    *websocket.Conn
	wmu     sync.Mutex
	release chan struct{}

	mu        sync.Mutex
	mangle    bool
	got       []string                     // methods received
	builds    []map[string]any             // apps.set_build_state params
	installed map[string]map[string]string // instance id → files
	done      chan struct{}
}

func connectDeskApp(t *testing.T, ep localapi.Endpoint, caps provider.Capabilities, dir []provider.Room) *deskApp {
	t.Helper()
	dl := websocket.Dialer{
		NetDialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return localapi.Dial(ctx, ep) // the unix socket, or the named pipe on Windows
		},
		Subprotocols: []string{provider.Subprotocol}, HandshakeTimeout: 5 * time.Second,
	}
	conn, _, err := dl.Dial("ws://"+localapi.Host+localapi.Prefix+"provider", nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &deskApp{conn: conn, release: make(chan struct{}), installed: map[string]map[string]string{}, done: make(chan struct{})}
	a.send(map[string]any{"jsonrpc": "2.0", "id": 1, "method": provider.MethodHello, "params": map[string]any{
		"protocol_versions": []int{1}, "app": map[string]string{"name": "Desk", "version": "2.0"}, "capabilities": caps}})
	if _, data, err := conn.ReadMessage(); err != nil || !bytes.Contains(data, []byte(`"result"`)) {
		t.Fatalf("hello answer %s: %v", data, err)
	}
	a.send(map[string]any{"jsonrpc": "2.0", "method": provider.MethodRoomsChanged, "params": map[string]any{"rooms": dir}})
	go a.serve()
	t.Cleanup(func() { conn.Close(); <-a.done })
	return a
}

func (a *deskApp) send(v any) {
	b, _ := json.Marshal(v)
	a.wmu.Lock()
	defer a.wmu.Unlock()
	_ = a.conn.WriteMessage(websocket.TextMessage, b)
}

func (a *deskApp) serve() {
	defer close(a.done)
	for {
		_, data, err := a.conn.ReadMessage()
		if err != nil {
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(data, &m) != nil || len(m.ID) == 0 {
			continue
		}
		a.mu.Lock()
		a.got = append(a.got, m.Method)
		a.mu.Unlock()
		go a.answer(m.ID, m.Method, m.Params)
	}
}

func (a *deskApp) answer(id json.RawMessage, method string, params json.RawMessage) {
	var p struct {
		ProposalID  string            `json:"proposal_id"`
		InstanceID  string            `json:"instance_id"`
		RoomID      string            `json:"room_id"`
		Name        string            `json:"name"`
		Files       map[string]string `json:"files"`
		ContentHash string            `json:"content_hash"`
	}
	_ = json.Unmarshal(params, &p)
	reply := map[string]any{"jsonrpc": "2.0", "id": id}
	switch method {
	case provider.MethodAppsInstall:
		<-a.release
		a.mu.Lock()
		files := p.Files
		if a.mangle {
			files = map[string]string{}
			for k, v := range p.Files {
				files[k] = strings.ReplaceAll(v, "\n", "\r\n")
			}
		}
		if relay.ContentHash(files) != p.ContentHash {
			reply["error"] = map[string]any{"code": -32000, "message": "content hash mismatch", "data": map[string]string{"code": "invalid_args"}}
		} else {
			a.installed[p.InstanceID] = files
			reply["result"] = map[string]string{"instance_id": p.InstanceID}
		}
		a.mu.Unlock()
	case provider.MethodAppsStatus:
		a.mu.Lock()
		files, ok := a.installed[p.InstanceID]
		a.mu.Unlock()
		if !ok {
			reply["error"] = map[string]any{"code": -32000, "message": "no such app", "data": map[string]string{"code": "not_found"}}
			break
		}
		// No build: this app has no build_state capability.
		reply["result"] = map[string]any{"instance_id": p.InstanceID, "name": "Timer", "source": "snippet",
			"launcher": map[string]any{"state": "active", "position": 0},
			"review":   map[string]any{"state": "approved", "reviewed_at": time.Now().UTC()}, "content_hash": relay.ContentHash(files)}
	case provider.MethodSetBuildState:
		var b map[string]any
		_ = json.Unmarshal(params, &b)
		a.mu.Lock()
		a.builds = append(a.builds, b)
		a.mu.Unlock()
		reply["result"] = map[string]any{}
	default:
		reply["error"] = map[string]any{"code": -32601, "message": "no"}
	}
	a.send(reply)
}

func (a *deskApp) received(method string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, m := range a.got {
		if m == method {
			n++
		}
	}
	return n
}

// eventReader reads a real event stream line by line.
type eventReader struct {
	t     *testing.T
	lines *bufio.Scanner
	c     chan localapi.Event
	held  []localapi.Event // read, not yet returned by next
}

func readEvents(t *testing.T, c *localapi.Client) *eventReader {
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := c.Stream(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	r := &eventReader{t: t, lines: bufio.NewScanner(resp.Body), c: make(chan localapi.Event, 256)}
	r.lines.Buffer(nil, 1<<20)
	go func() {
		defer close(r.c)
		for r.lines.Scan() {
			var e localapi.Event
			if json.Unmarshal(r.lines.Bytes(), &e) == nil {
				r.c <- e
			}
		}
	}()
	return r
}

// next returns the first event not returned before of type typ whose data
// contains want, whether it came before or after events returned earlier
// (a build_state may overtake an install_changed).
func (r *eventReader) next(typ, want string) localapi.Event {
	r.t.Helper()
	match := func(e localapi.Event) bool { return e.Type == typ && strings.Contains(string(e.Data), want) }
	for i, e := range r.held {
		if match(e) {
			r.held = append(r.held[:i:i], r.held[i+1:]...)
			return e
		}
	}
	timeout := time.After(60 * time.Second)
	for {
		select {
		case e, ok := <-r.c:
			if !ok {
				r.t.Fatalf("the event stream ended before %s %s", typ, want)
			}
			if match(e) {
				return e
			}
			r.held = append(r.held, e)
		case <-timeout:
			r.t.Fatalf("no %s event with %s", typ, want)
		}
	}
}

// schemaCheck validates v against a component schema of the served
// OpenAPI document.
func schemaCheck(t *testing.T, name string, v []byte) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(localapi.OpenAPI()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("mem://openapi.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("mem://openapi.json#/components/schemas/" + name)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(v))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Errorf("%s does not match openapi.json: %v\n%s", name, err, v)
	}
}

// runAppDaemon runs a daemon whose policy selects the desktop app as the
// room provider, with sb as its sandbox, and returns it with a local API
// client and its event stream; all end with the test.
func runAppDaemon(t *testing.T, sb SmokeRunner) (*Daemon, *localapi.Client, *eventReader) {
	t.Helper()
	dir := t.TempDir()
	d, err := Open(context.Background(), Config{ConfigDir: filepath.Join(dir, "c"), StateDir: filepath.Join(dir, "s"), DataDir: filepath.Join(dir, "d"),
		HubURL: "http://127.0.0.1:1", DeviceID: "dev-test", Token: "t", Sandbox: sb,
		Notifier: notify.Func(func(context.Context, notify.Note) error { return nil })})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	pol := "version 1\nprovider app\nproject p\n  enabled yes\n  commands read_room read_room_app_status propose_room_snippet_app\n"
	if err := os.WriteFile(d.policyPath(), []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	c, _, err := discoverSoon(d.cfg.ConfigDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	evs := readEvents(t, c)
	d.Poke(ctx)
	testutil.Eventually(t, "the policy selecting the app loaded", d.appMode)
	return d, c, evs
}

// TestAppRoomApprovalOverTheSocket: with the desktop app as the room
// provider, over the agent's real local API socket and a real provider
// connection: the provider's pid and executable are in GET status and in
// provider_changed; an approval shows install_state pending in the proposal
// views until the app acknowledges it, then installed; the approved snippet
// is smoke-run in the real sandbox from roomrelay's own store (the app is
// never asked for files) and, the app having no build_state capability,
// read_room_app_status shows roomrelay's record of it; an app that reports
// a content hash mismatch leaves the install failed with its reason.
func TestAppRoomApprovalOverTheSocket(t *testing.T) {
	t.Parallel()
	sb := realSandbox(t)
	d, c, evs := runAppDaemon(t, sb)
	ctx := context.Background()

	app := connectDeskApp(t, c.Endpoint(), provider.Capabilities{Install: true},
		[]provider.Room{{ID: "r1", Project: "p", Name: "Standup"}})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The provider is this test process, as the peer check saw it.
	pc := evs.next(events.TypeProviderChanged, `"connected":true`)
	schemaCheck(t, "ProviderChangedData", pc.Data)
	var pcd events.ProviderChanged
	if err := json.Unmarshal(pc.Data, &pcd); err != nil || pcd.PID != os.Getpid() || pcd.Exe != exe || pcd.Since.IsZero() {
		t.Fatalf("provider_changed %s: want pid %d exe %s and since", pc.Data, os.Getpid(), exe)
	}
	var st localapi.StatusResponse
	if _, err := c.Do(ctx, "GET", "status", nil, &st, nil); err != nil {
		t.Fatal(err)
	}
	if p := st.Provider; !p.Connected || p.App != "Desk" || p.PID != os.Getpid() || p.Exe != exe || p.Since.IsZero() {
		t.Fatalf("status provider %+v: want Desk, pid %d, exe %s, since", p, os.Getpid(), exe)
	}
	testutil.Eventually(t, "the app's directory stored", func() bool {
		rs, _ := d.store.ListProviderRooms(ctx, "p")
		return len(rs) == 1
	})

	propose := func(name string, files map[string]string) rooms.ProposalDetail {
		t.Helper()
		out, err := d.propose(ctx, rooms.NewProposal{ProjectID: "p", RoomID: "r1", Kind: rooms.SourceSnippet, Name: name,
			Files: files, IdempotencyKey: relay.SnippetKey("r1", name, files)})
		if err != nil {
			t.Fatal(err)
		}
		p, err := d.store.GetProposal(ctx, out.(ProposalResult).ProposalID)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	show := func(id string) rooms.Proposal {
		t.Helper()
		var raw json.RawMessage
		if _, err := c.Do(ctx, "GET", "proposals/"+id, nil, &raw, nil); err != nil {
			t.Fatal(err)
		}
		schemaCheck(t, "ProposalDetail", raw)
		var p rooms.Proposal
		_ = json.Unmarshal(raw, &p)
		return p
	}
	listed := func(id string) rooms.Proposal {
		t.Helper()
		var pr localapi.ProposalsResponse
		if _, err := c.Do(ctx, "GET", "proposals?state=all", nil, &pr, nil); err != nil {
			t.Fatal(err)
		}
		for _, p := range pr.Proposals {
			if p.ID == id {
				return p
			}
		}
		t.Fatalf("proposal %s not listed", id)
		return rooms.Proposal{}
	}

	// 1. Approve; pending until the app acknowledges; installed after.
	files := examples.StandupTimer()
	p1 := propose("Timer", files)
	if s := show(p1.ID); s.InstallState != "" {
		t.Fatalf("a pending proposal shows install_state %q", s.InstallState)
	}
	var dec localapi.DecisionResponse
	if _, err := c.Do(ctx, "POST", "proposals/"+p1.ID+"/approve", localapi.DecideRequest{ContentHash: p1.ContentHash}, &dec, nil); err != nil {
		t.Fatal(err)
	}
	if dec.Proposal.InstallState != rooms.InstallPending {
		t.Fatalf("approve answered install_state %q, want pending", dec.Proposal.InstallState)
	}
	if e := evs.next(events.TypeProposalDecided, p1.ID); !strings.Contains(string(e.Data), `"install_state":"pending"`) {
		t.Fatalf("proposal_decided %s: want install_state pending", e.Data)
	}
	testutil.Eventually(t, "apps.install delivered", func() bool { return app.received(provider.MethodAppsInstall) >= 1 })
	if s, l := show(p1.ID), listed(p1.ID); s.InstallState != rooms.InstallPending || l.InstallState != rooms.InstallPending {
		t.Fatalf("before the app's answer: show %q, list %q, want pending", s.InstallState, l.InstallState)
	}
	close(app.release)
	ic := evs.next(events.TypeInstallChanged, p1.ID)
	schemaCheck(t, "InstallChangedData", ic.Data)
	if !strings.Contains(string(ic.Data), `"install_state":"installed"`) {
		t.Fatalf("install_changed %s: want installed", ic.Data)
	}
	if s, l := show(p1.ID), listed(p1.ID); s.InstallState != rooms.InstallInstalled || l.InstallState != rooms.InstallInstalled || s.InstallError != "" {
		t.Fatalf("after the app's answer: show %+v, list %q, want installed", s, l.InstallState)
	}

	// 2. The smoke-run after the approval ran the store's files in the real
	// sandbox; the app was never asked for them, nor told a build state.
	bs := evs.next(events.TypeBuildState, p1.InstanceID)
	schemaCheck(t, "BuildStateData", bs.Data)
	if !strings.Contains(string(bs.Data), `"state":"ok"`) || !strings.Contains(string(bs.Data), p1.ContentHash) {
		t.Fatalf("build_state %s: want ok", bs.Data)
	}
	if runs := sb.ran(); len(runs) != 1 || !maps.Equal(runs[0], files) {
		t.Fatalf("smoke-runs %d, want 1 of the approved files", len(runs))
	}
	if n := app.received(provider.MethodAppsFiles) + app.received(provider.MethodSetBuildState); n != 0 {
		t.Fatalf("the app was asked %d times for files or told a build state", n)
	}
	as, err := d.readAppStatus(ctx, "p", "r1", show(p1.ID).InstanceID)
	if err != nil {
		t.Fatal(err)
	}
	if as.InstallState != rooms.InstallInstalled || as.Build.State != rooms.BuildOK || !strings.HasPrefix(as.Build.Summary, "rendered ") || as.Build.CheckedAt.IsZero() {
		t.Fatalf("read_room_app_status %+v: want installed with roomrelay's build record (ok)", as)
	}

	// 3. An app that reports a content hash mismatch: failed, with why.
	app.mu.Lock()
	app.mangle = true
	app.mu.Unlock()
	files2 := map[string]string{"src/App.tsx": "export default function App() {\n  return <p>two</p>;\n}\n"}
	p2 := propose("Two", files2)
	if _, err := c.Do(ctx, "POST", "proposals/"+p2.ID+"/approve", localapi.DecideRequest{ContentHash: p2.ContentHash}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if e := evs.next(events.TypeInstallChanged, p2.ID); !strings.Contains(string(e.Data), `"install_state":"failed"`) ||
		!strings.Contains(string(e.Data), "invalid_args") {
		t.Fatalf("install_changed %s: want failed with invalid_args", e.Data)
	}
	s2, l2 := show(p2.ID), listed(p2.ID)
	if s2.InstallState != rooms.InstallFailed || l2.InstallState != rooms.InstallFailed ||
		!strings.Contains(s2.InstallError, "invalid_args") || !strings.Contains(s2.InstallError, "refused the install") || l2.InstallError != s2.InstallError {
		t.Fatalf("a refused install: show %q %q, list %q %q; want failed with the reason", s2.InstallState, s2.InstallError, l2.InstallState, l2.InstallError)
	}
	evs.next(events.TypeBuildState, s2.InstanceID)
	as2, err := d.readAppStatus(ctx, "p", "r1", s2.InstanceID)
	if err != nil {
		t.Fatal(err)
	}
	if as2.InstallState != rooms.InstallFailed || as2.Launcher.State != rooms.LauncherNotInstalled || as2.Build.State != rooms.BuildOK {
		t.Fatalf("read_room_app_status of the refused install %+v: want failed, not_installed, roomrelay's build ok", as2)
	}
}

// TestClosedAppIsToldTheBuildAfterItsInstall: approved while the desktop
// app is closed, the snippet is smoke-run and recorded at once; the app,
// which keeps build states (capability build_state), is told that record
// right after it installs the app on its next connection.
func TestClosedAppIsToldTheBuildAfterItsInstall(t *testing.T) {
	t.Parallel()
	d, c, evs := runAppDaemon(t, realSandbox(t))
	ctx := context.Background()
	// The directory the app sent before it closed, as the store keeps it.
	if _, err := d.store.SyncProviderRooms(ctx, []rooms.ProviderRoom{{ID: "r1", Project: "p", Name: "Standup"}}); err != nil {
		t.Fatal(err)
	}
	files := examples.StandupTimer()
	out, err := d.propose(ctx, rooms.NewProposal{ProjectID: "p", RoomID: "r1", Kind: rooms.SourceSnippet, Name: "Timer",
		Files: files, IdempotencyKey: relay.SnippetKey("r1", "Timer", files)})
	if err != nil {
		t.Fatal(err)
	}
	id := out.(ProposalResult).ProposalID
	var dec localapi.DecisionResponse
	if _, err := c.Do(ctx, "POST", "proposals/"+id+"/approve", localapi.DecideRequest{ContentHash: relay.ContentHash(files)}, &dec, nil); err != nil {
		t.Fatal(err)
	}
	evs.next(events.TypeBuildState, dec.Proposal.InstanceID)

	app := connectDeskApp(t, c.Endpoint(), provider.Capabilities{Install: true, BuildState: true},
		[]provider.Room{{ID: "r1", Project: "p", Name: "Standup"}})
	close(app.release)
	evs.next(events.TypeInstallChanged, `"install_state":"installed"`)
	testutil.Eventually(t, "apps.set_build_state after the install", func() bool {
		app.mu.Lock()
		defer app.mu.Unlock()
		return len(app.builds) > 0
	})
	app.mu.Lock()
	b := app.builds[0]
	app.mu.Unlock()
	if b["instance_id"] != dec.Proposal.InstanceID || b["content_hash"] != dec.Proposal.ContentHash || b["state"] != rooms.BuildOK ||
		!strings.HasPrefix(fmt.Sprint(b["summary"]), "rendered ") {
		t.Fatalf("apps.set_build_state %v: want the recorded ok build of %s", b, dec.Proposal.InstanceID)
	}
}
