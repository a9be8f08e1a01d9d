package e2e

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/agent/provider"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// serveProvider serves the device's provider websocket on a unix socket (as
// agent/localapi mounts it) and returns the socket path.
func serveProvider(t testing.TB, dv *device) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rre2e")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "p.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: dv.d.Provider(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close(); os.RemoveAll(dir) })
	return sock
}

// desktopApp plays the desktop app: it keeps rooms and installed apps, and
// answers roomrelay's requests.
type desktopApp struct {
	conn *websocket.Conn
	wmu  sync.Mutex
	done chan struct{}

	mu        sync.Mutex
	installed map[string]string // proposal id → instance id
	requests  []string
	// hold, when set, receives the id of each rooms.read, which is then
	// never answered; cancels receives the id each $/cancelRequest names.
	hold, cancels chan string
	// schemaErrs are messages that broke docs/provider-protocol.schema.json.
	schemaErrs []string
}

// checkMsg notes a message that breaks the provider protocol's schema.
func (app *desktopApp) checkMsg(method, part string, raw []byte) {
	if err := checkProvider(method, part, raw); err != nil {
		app.mu.Lock()
		app.schemaErrs = append(app.schemaErrs, err.Error())
		app.mu.Unlock()
	}
}

func connectDesktopApp(t testing.TB, sock string, installed map[string]string) *desktopApp {
	t.Helper()
	d := websocket.Dialer{NetDialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}, Subprotocols: []string{provider.Subprotocol}}
	conn, _, err := d.Dial("ws://localapi/localapi/v1/provider", nil)
	if err != nil {
		t.Fatal(err)
	}
	app := &desktopApp{conn: conn, done: make(chan struct{}), installed: installed}
	hello := `{"protocol_versions":[1],"app":{"name":"Rooms","version":"1"},"capabilities":{"install":true,"files":true}}`
	if err := checkProvider(provider.MethodHello, "params", []byte(hello)); err != nil {
		t.Fatal(err)
	}
	app.send(t, `{"jsonrpc":"2.0","id":1,"method":"provider.hello","params":`+hello+`}`)
	_, answer, err := conn.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	var ans struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(answer, &ans); err != nil {
		t.Fatal(err)
	}
	if err := checkProvider(provider.MethodHello, "result", ans.Result); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		app.mu.Lock()
		defer app.mu.Unlock()
		for _, e := range app.schemaErrs {
			t.Error(e)
		}
	})
	app.send(t, `{"jsonrpc":"2.0","method":"rooms.changed","params":{"rooms":[{"id":"r-app","project":"p","name":"App room"}]}}`)
	go app.serve()
	t.Cleanup(app.close)
	return app
}

func (app *desktopApp) close() {
	app.conn.Close()
	<-app.done
}

func (app *desktopApp) send(t testing.TB, s string) {
	app.wmu.Lock()
	defer app.wmu.Unlock()
	if err := app.conn.WriteMessage(websocket.TextMessage, []byte(s)); err != nil && t != nil {
		t.Fatal(err)
	}
}

func (app *desktopApp) serve() {
	defer close(app.done)
	for {
		_, data, err := app.conn.ReadMessage()
		if err != nil {
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				RoomID      string            `json:"room_id"`
				InstanceID  string            `json:"instance_id"`
				ProposalID  string            `json:"proposal_id"`
				Files       map[string]string `json:"files"`
				ContentHash string            `json:"content_hash"`
			} `json:"params"`
		}
		var in struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(data, &in) == nil && in.Method != "" {
			app.checkMsg(in.Method, "params", in.Params)
		}
		var cancel struct {
			Params struct {
				ID json.RawMessage `json:"id"`
			} `json:"params"`
		}
		if json.Unmarshal(data, &m) == nil && m.Method == provider.MethodCancel && json.Unmarshal(data, &cancel) == nil {
			app.mu.Lock()
			if app.cancels != nil {
				app.cancels <- string(cancel.Params.ID)
			}
			app.mu.Unlock()
			continue
		}
		if json.Unmarshal(data, &m) != nil || len(m.ID) == 0 {
			continue
		}
		app.mu.Lock()
		app.requests = append(app.requests, m.Method)
		if app.hold != nil && m.Method == provider.MethodRoomsRead {
			app.hold <- string(m.ID)
			app.mu.Unlock()
			continue
		}
		var result string
		switch m.Method {
		case provider.MethodRoomsRead:
			result = `{"id":"` + m.Params.RoomID + `","name":"App room","app_count":` + itoa(len(app.installed)) + `,"secret":"LEAKMARK"}`
		case provider.MethodAppsInstall:
			if relay.ContentHash(m.Params.Files) != m.Params.ContentHash {
				result = ""
				app.mu.Unlock()
				app.send(nil, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"error":{"code":-32000,"message":"hash","data":{"code":"invalid_args"}}}`)
				continue
			}
			if _, ok := app.installed[m.Params.ProposalID]; !ok {
				app.installed[m.Params.ProposalID] = m.Params.InstanceID
			}
			result = `{"instance_id":"` + app.installed[m.Params.ProposalID] + `"}`
		case provider.MethodAppsStatus:
			result = `{"instance_id":"` + m.Params.InstanceID + `","name":"Timer","source":"snippet","launcher":{"state":"active","position":1},"review":{"state":"approved"},"content_hash":""}`
		default:
			app.mu.Unlock()
			app.send(nil, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"error":{"code":-32601,"message":"no"}}`)
			continue
		}
		app.mu.Unlock()
		app.checkMsg(m.Method, "result", []byte(result))
		app.send(nil, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":`+result+`}`)
	}
}

func appDevice(t testing.TB, h *runningHub) (*device, string) {
	t.Helper()
	dv := enroll(t, h, "p")
	if err := os.MkdirAll(filepath.Dir(dv.policyPath()), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dv.policyPath(), []byte("version 1\nprovider app\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dv.enable(t, "p", proposeCommands...)
	dv.start(t, h.URL())
	waitState(t, h, dv.id, "online")
	return dv, serveProvider(t, dv)
}

// TestProviderApp: with `provider app`, the cloud reads the app's rooms
// through the agent; with the app closed reads are app_not_running and a
// proposal still waits; an approval made while it is closed is installed
// once it opens.
func TestProviderApp(t *testing.T) {
	h := startHub(t, hub.Config{})
	dv, sock := appDevice(t, h)
	ctx := context.Background()

	res, status := call(t, h, dv.id, "p", relay.CmdReadRoom, map[string]string{"room_id": "r-app"})
	if res.OK || res.Error.Code != relay.CodeAppNotRunning || !res.Error.Retryable || status != http.StatusServiceUnavailable {
		t.Fatalf("no app yet: %d %+v", status, res)
	}

	installed := map[string]string{}
	app := connectDesktopApp(t, sock, installed)
	eventually(t, "the app's room never reached the hub's directory", func() bool {
		rs, err := h.Rooms(ctx, "p")
		return err == nil && len(rs) == 1 && rs[0].RoomID == "r-app" && rs[0].Name == "App room"
	})
	res, _ = call(t, h, dv.id, "p", relay.CmdReadRoom, map[string]string{"room_id": "r-app"})
	if !res.OK || strings.Contains(string(res.Result), "LEAKMARK") {
		t.Fatalf("read through the app: %+v %s", res.Error, res.Result)
	}
	var sum rooms.RoomSummary
	_ = json.Unmarshal(res.Result, &sum)
	if sum.Name != "App room" || sum.ID != "r-app" || sum.Project != "p" {
		t.Fatalf("summary %+v", sum)
	}

	eventually(t, "the hub never saw the app open", func() bool {
		rs, err := h.Rooms(ctx, "p")
		return err == nil && len(rs) == 1 && rs[0].Presence.App == hubapi.AppOpen
	})
	cs := mcpSession(t, h, clientToken(t, h, "p", hubapi.ScopeWrite).Token, nil)

	app.close()
	eventually(t, "the agent still sees the app", func() bool { _, ok := dv.d.Provider().Connected(); return !ok })
	res, _ = call(t, h, dv.id, "p", relay.CmdReadRoom, map[string]string{"room_id": "r-app"})
	if res.OK || res.Error.Code != relay.CodeAppNotRunning {
		t.Fatalf("app closed: %+v", res)
	}
	eventually(t, "list_local_rooms never said the app is closed", func() bool {
		return strings.Contains(resultText(tool(t, cs, "list_local_rooms", map[string]any{})), "App room (r-app, online, app closed)")
	})
	if text := wantCode(t, "read_room with the app closed", tool(t, cs, relay.CmdReadRoom, map[string]any{"room_id": "r-app"}), "app_not_running"); !strings.Contains(text, "open") {
		t.Fatalf("MCP text %q does not tell the model to ask for the app to be opened", text)
	}
	files := map[string]string{"src/App.tsx": "export default function App() { return <p>hi</p> }"}
	res, _ = call(t, h, dv.id, "p", relay.CmdProposeRoomSnippetApp, map[string]any{"room_id": "r-app", "name": "Hi", "files": files,
		"idempotency_key": relay.SnippetKey("r-app", "Hi", files)})
	prop := decodeProposal(t, res)
	if prop.State != "pending_review" {
		t.Fatalf("proposal with the app closed: %+v", prop)
	}
	res, _ = call(t, h, dv.id, "p", relay.CmdProposeRoomSnippetApp, map[string]any{"room_id": "r-none", "name": "Hi", "files": files,
		"idempotency_key": "k-none-12345"})
	if res.OK || res.Error.Code != relay.CodeNotFound {
		t.Fatalf("a room the app never listed: %+v", res)
	}

	approved, err := dv.d.Store().ApproveProposal(ctx, prop.ProposalID, relay.ContentHash(files))
	if err != nil {
		t.Fatal(err)
	}
	res, _ = call(t, h, dv.id, "p", relay.CmdReadRoomAppStatus, map[string]string{"room_id": "r-app", "instance_id": approved.InstanceID})
	var st rooms.AppStatus
	if !res.OK || json.Unmarshal(res.Result, &st) != nil || st.InstallState != rooms.InstallPending || st.Launcher.State != rooms.LauncherNotInstalled {
		t.Fatalf("status before the install: %+v %s", res.Error, res.Result)
	}

	connectDesktopApp(t, sock, installed)
	eventually(t, "the approved app was never installed", func() bool {
		res, _ := call(t, h, dv.id, "p", relay.CmdReadRoomAppStatus, map[string]string{"room_id": "r-app", "instance_id": approved.InstanceID})
		var st rooms.AppStatus
		return res.OK && json.Unmarshal(res.Result, &st) == nil && st.InstallState == rooms.InstallInstalled && st.Launcher.State == rooms.LauncherActive
	})
	if len(installed) != 1 || installed[prop.ProposalID] != approved.InstanceID {
		t.Fatalf("installed %v", installed)
	}
}
