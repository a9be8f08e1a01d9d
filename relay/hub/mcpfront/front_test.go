package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/cli"
	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/internal/testutil/testhub"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

const admin = "rra_front-test"

// frontHub is a real hub (embedded NATS) with the front mounted, and a
// scripted device: each room "code-<code>" answers every command with that
// error code, room "silent" never answers, room "ok" echoes.
type frontHub struct {
	url   string
	cl    *hubclient.Client
	write string
	read  string
	dev   string
	front *Front
}

// serveFront runs a hub (embedded NATS) with the front mounted, served on
// a loopback port until the test ends.
func serveFront(t *testing.T, hcfg hub.Config, fcfg Config) *testutil.Server {
	t.Helper()
	srv, _ := serveFrontF(t, hcfg, fcfg)
	return srv
}

// serveFrontF is serveFront, with the front.
func serveFrontF(t *testing.T, hcfg hub.Config, fcfg Config) (*testutil.Server, *Front) {
	t.Helper()
	hcfg.DataDir, hcfg.AdminToken = t.TempDir(), admin
	if hcfg.Heartbeat == 0 {
		hcfg.Heartbeat = time.Minute
	}
	h, err := hub.New(hcfg)
	if err != nil {
		t.Fatal(err)
	}
	fcfg.Hub = h
	f, err := New(fcfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	f.Mount(mux)
	mux.Handle("/", h.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	<-h.Ready()
	srv := testutil.Serve(t, "", mux)
	t.Cleanup(func() { cancel(); <-done; srv.Close() })
	return srv, f
}

func startFront(t *testing.T, fcfg Config) *frontHub {
	t.Helper()
	srv, f := serveFrontF(t, hub.Config{}, fcfg)
	ctx := context.Background()
	fh := &frontHub{url: srv.URL(), cl: hubclient.New(srv.URL(), admin), front: f}
	pc, err := fh.cl.Pair(ctx, "p1", 0)
	if err != nil {
		t.Fatal(err)
	}
	en, err := fh.cl.Enroll(ctx, pc.Code, "fake", "linux", "")
	if err != nil {
		t.Fatal(err)
	}
	rooms := []relay.RoomEntry{{Project: "p1", RoomID: "ok", Name: "ok"}, {Project: "p1", RoomID: "silent", Name: "silent"}}
	for _, c := range relay.Codes() {
		rooms = append(rooms, relay.RoomEntry{Project: "p1", RoomID: "code-" + string(c), Name: string(c)})
	}
	fakeDevice(t, srv.URL(), en.Token, en.DeviceID, rooms)
	fh.dev = en.DeviceID
	for _, s := range []string{hubapi.ScopeWrite, hubapi.ScopeRead} {
		tok, err := fh.cl.CreateClientToken(ctx, "p1", s, "")
		if err != nil {
			t.Fatal(err)
		}
		if s == hubapi.ScopeWrite {
			fh.write = tok.Token
		} else {
			fh.read = tok.Token
		}
	}
	return fh
}

func fakeDevice(t *testing.T, hubURL, token, dev string, rooms []relay.RoomEntry) {
	t.Helper()
	testhub.FakeDevice(t, hubURL, admin, token, dev, rooms, func(cmd *relay.Command) *relay.Result {
		var a struct {
			RoomID string `json:"room_id"`
		}
		_ = json.Unmarshal(cmd.Args, &a)
		switch {
		case a.RoomID == "silent":
			return nil
		case a.RoomID == "hostile":
			b, _ := json.Marshal(map[string]any{"id": "hostile", "name": hostileName, "app_count": 0, "pending_proposals": 0})
			return &relay.Result{ID: cmd.ID, OK: true, Result: b}
		case a.RoomID == "hostile-error":
			return &relay.Result{ID: cmd.ID, Error: relay.Errorf(relay.CodeNotFound, "%s", hostileName)}
		case strings.HasPrefix(a.RoomID, "code-"):
			return &relay.Result{ID: cmd.ID, Error: relay.Errorf(relay.Code(strings.TrimPrefix(a.RoomID, "code-")), "the device says so")}
		}
		return &relay.Result{ID: cmd.ID, OK: true, Result: json.RawMessage(`{"id":"ok","name":"ok","app_count":0,"pending_proposals":0}`)}
	})
}

func session(t *testing.T, url, token string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "front-test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url + Path, HTTPClient: &http.Client{Transport: hubclient.Bearer{Token: token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args any) (bool, string) {
	t.Helper()
	r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if r.IsError && r.StructuredContent != nil {
		t.Errorf("%s: error result with structuredContent", name)
	}
	var text string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	return r.IsError, text
}

// TestEveryDeviceCodeIsAToolError: whatever code the device answers with
// reaches the model as isError with the code first and relay's hint after
// it, the hub's HTTP API with relay's status and retryability, and the CLI's
// `hub call` with relay's exit code (the hub and CLI surfaces of relay's code
// table; agent/localapi's TestEveryDeviceCodeOnTheLocalAPI is the local
// API's); a device that never answers is expired.
func TestEveryDeviceCodeIsAToolError(t *testing.T) {
	fh := startFront(t, Config{CommandTimeout: 300 * time.Millisecond})
	cs := session(t, fh.url, fh.write)
	deadline := time.Now().Add(10 * time.Second)
	for {
		isErr, _ := callTool(t, cs, relay.CmdReadRoom, map[string]any{"room_id": "ok"})
		if !isErr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fake device's rooms never reached the directory")
		}
		time.Sleep(20 * time.Millisecond)
	}
	home := t.TempDir()
	for _, c := range relay.Codes() {
		isErr, text := callTool(t, cs, relay.CmdReadRoom, map[string]any{"room_id": "code-" + string(c)})
		if !isErr || !strings.HasPrefix(text, string(c)+": the device says so.") || c.Hint() == "" || !strings.HasSuffix(text, c.Hint()) {
			t.Errorf("%s: isError=%v %q", c, isErr, text)
		}
		args := json.RawMessage(`{"room_id":"code-` + string(c) + `"}`)
		res, status, err := fh.cl.Command(context.Background(), fh.dev, hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoom, Args: args})
		if err != nil || res.OK || res.Error == nil || res.Error.Code != c || status != c.HTTPStatus() || res.Error.Retryable != c.Retryable() {
			t.Errorf("%s through the hub's API: %d %+v %v; want %d, retryable %v", c, status, res, err, c.HTTPStatus(), c.Retryable())
		}
		// The CLI: `roomrelay hub call` prints the result and exits with
		// the code's exit code from the table (never 1 for a code in it).
		var out, errb bytes.Buffer
		exit := cli.Main(context.Background(), []string{"hub", "call", fh.dev, relay.CmdReadRoom, "--project", "p1",
			"--args", string(args), "--hub", fh.url, "--admin-token", admin, "--home", home}, &cli.Env{Stdout: &out, Stderr: &errb})
		var printed relay.Result
		if exit != c.ExitCode() || exit == relay.ExitFailed || json.Unmarshal(out.Bytes(), &printed) != nil ||
			printed.Error == nil || printed.Error.Code != c {
			t.Errorf("%s through `roomrelay hub call`: exit %d, want %d; stdout %s stderr %s", c, exit, c.ExitCode(), out.String(), errb.String())
		}
	}
	isErr, text := callTool(t, cs, relay.CmdReadRoom, map[string]any{"room_id": "silent"})
	if !isErr || !strings.HasPrefix(text, "expired: ") {
		t.Errorf("silent device: isError=%v %q", isErr, text)
	}
}

func TestTokenLimiter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newTokenLimiter(60, 2, func() time.Time { return now })
	for i := range 2 {
		if ok, _ := l.allow("a"); !ok {
			t.Fatalf("call %d in the burst refused", i)
		}
	}
	ok, wait := l.allow("a")
	if ok || wait != time.Second {
		t.Fatalf("over the burst: %v %v, want refused with 1s", ok, wait)
	}
	if ok, _ := l.allow("b"); !ok {
		t.Fatal("another token limited")
	}
	now = now.Add(time.Second)
	if ok, _ := l.allow("a"); !ok {
		t.Fatal("no refill after a second at 60/min")
	}
}
