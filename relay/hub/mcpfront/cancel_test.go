package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/internal/testutil/testhub"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestCancelReachesDevice: a tools/call the device answers slowly is
// cancelled on the device (the hub's cancel frame) when the MCP caller
// closes its HTTP request, and when it sends notifications/cancelled
// naming the request, in a POST of its own to this node or to another
// node of the cluster. A cancel from another token naming the same id
// cancels nothing. Real sockets throughout: two hub nodes on one
// nats-server, raw MCP HTTP requests, a device on a websocket. The
// latencies are logged, not asserted.
func TestCancelReachesDevice(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(20 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	fcfg := Config{CommandTimeout: 2 * time.Minute} // the device never answers "slow": only a cancel ends it
	a := serveFront(t, hub.Config{NATSURL: ns.ClientURL(), NodeName: "a", Replicas: 1}, fcfg).URL()
	b := serveFront(t, hub.Config{NATSURL: ns.ClientURL(), NodeName: "b", Replicas: 1}, fcfg).URL()

	ctx := context.Background()
	cl := hubclient.New(a, admin)
	pc, err := cl.Pair(ctx, "p1", 0)
	if err != nil {
		t.Fatal(err)
	}
	en, err := cl.Enroll(ctx, pc.Code, "slow", "linux", "")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 8)
	cancels := make(chan string, 8)
	rooms := []relay.RoomEntry{{Project: "p1", RoomID: "slow", Name: "slow"}, {Project: "p1", RoomID: "ok", Name: "ok"}}
	testhub.FakeDeviceCancels(t, a, admin, en.Token, en.DeviceID, rooms, func(cmd *relay.Command) *relay.Result {
		if bytes.Contains(cmd.Args, []byte(`"slow"`)) {
			got <- cmd.ID
			return nil // answers never: a handler still running
		}
		return &relay.Result{ID: cmd.ID, OK: true, Result: []byte(`{"id":"ok","name":"ok","project":"p1","kind":"local","app_count":0,"pending_proposals":0}`)}
	}, func(c *relay.Cancel) { cancels <- c.ID })
	tok, err := cl.CreateClientToken(ctx, "p1", hubapi.ScopeRead, "caller")
	if err != nil {
		t.Fatal(err)
	}
	other, err := cl.CreateClientToken(ctx, "p1", hubapi.ScopeRead, "another caller")
	if err != nil {
		t.Fatal(err)
	}
	// The directory reaches node b too before a call is routed from it.
	for _, u := range []string{a, b} {
		testutil.Eventually(t, "room ok answers through "+u, func() bool {
			resp, body := postMCP(t, context.Background(), u, tok.Token, callBody(100, "ok"))
			return resp.StatusCode == 200 && bytes.Contains(body, []byte(`"app_count"`)) && !bytes.Contains(body, []byte(`"isError":true`))
		})
	}

	// start sends a slow read_room with JSON-RPC id and returns once the
	// device has it; cancel ends the HTTP request.
	start := func(id int) (cmdID string, cancel context.CancelFunc) {
		rctx, cancel := context.WithCancel(context.Background())
		go func() {
			req, _ := http.NewRequestWithContext(rctx, http.MethodPost, a+Path, bytes.NewReader(callBody(id, "slow")))
			setHeaders(req, tok.Token)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		select {
		case cmdID = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the device never got the command")
		}
		return cmdID, cancel
	}
	wantCancel := func(what, cmdID string, sent time.Time) {
		t.Helper()
		select {
		case id := <-cancels:
			if id != cmdID {
				t.Fatalf("%s: cancel of %s, want %s", what, id, cmdID)
			}
			t.Logf("%s: the device's cancel frame %v after the caller's cancel", what, time.Since(sent).Round(100*time.Microsecond))
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the device got no cancel frame", what)
		}
	}
	cancelled := func(id int) []byte {
		return fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"the user pressed Esc"}}`, id)
	}

	// 1. The HTTP request ends.
	cmd, stop := start(1)
	sent := time.Now()
	stop()
	wantCancel("HTTP request closed", cmd, sent)

	// 2. notifications/cancelled to the same node, the call's request open.
	cmd, stop = start(2)
	sent = time.Now()
	if resp, body := postMCP(t, ctx, a, tok.Token, cancelled(2)); resp.StatusCode/100 != 2 {
		t.Fatalf("notifications/cancelled: %d %s", resp.StatusCode, body)
	}
	wantCancel("notifications/cancelled, same node", cmd, sent)
	stop()

	// 3. notifications/cancelled to another node.
	cmd, stop = start(3)
	sent = time.Now()
	if resp, body := postMCP(t, ctx, b, tok.Token, cancelled(3)); resp.StatusCode/100 != 2 {
		t.Fatalf("notifications/cancelled on node b: %d %s", resp.StatusCode, body)
	}
	wantCancel("notifications/cancelled, other node", cmd, sent)
	stop()

	// 4. Another token naming the same request id cancels nothing: a call
	// routed after it reaches the device before any cancel frame (one
	// socket, frames in order), then the caller's own cancel does.
	cmd, stop = start(4)
	defer stop()
	postMCP(t, ctx, b, other.Token, cancelled(4))
	postMCP(t, ctx, a, other.Token, cancelled(4))
	if resp, body := postMCP(t, ctx, a, tok.Token, callBody(101, "ok")); resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"app_count"`)) {
		t.Fatalf("a call after the stranger's cancel: %d %s", resp.StatusCode, body)
	}
	select {
	case id := <-cancels:
		t.Fatalf("another token's notifications/cancelled cancelled %s", id)
	default:
	}
	sent = time.Now()
	postMCP(t, ctx, b, tok.Token, cancelled(4))
	wantCancel("after a stranger's cancel, the caller's own", cmd, sent)
}

func callBody(id int, room string) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"read_room","arguments":{"room_id":%q}}}`, id, room)
}

func setHeaders(req *http.Request, token string) {
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
}

func postMCP(t *testing.T, ctx context.Context, url, token string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+Path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	setHeaders(req, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// TestInflightBound: the registry keeps at most maxInflight calls, forgets
// a call when it ends, and cancels every call of one key.
func TestInflightBound(t *testing.T) {
	var r inflight
	var removes []func()
	for i := range maxInflight {
		rm, ok := r.add(fmt.Sprint("k", i), func() {})
		if !ok {
			t.Fatalf("call %d refused", i)
		}
		removes = append(removes, rm)
	}
	if _, ok := r.add("one more", func() {}); ok {
		t.Fatal("the registry grew past its bound")
	}
	for _, rm := range removes {
		rm()
	}
	if r.n != 0 || len(r.calls) != 0 {
		t.Fatalf("after every call ended: %d calls under %d keys", r.n, len(r.calls))
	}
	n := 0
	for range 2 {
		if _, ok := r.add("same", func() { n++ }); !ok {
			t.Fatal("refused")
		}
	}
	r.cancel("same")
	r.cancel("other")
	if n != 2 {
		t.Fatalf("cancelled %d of the key's 2 calls", n)
	}
	if callKey("t", json.RawMessage(`null`)) != "" || callKey("t", nil) != "" || callKey("t", json.RawMessage(`"`+strings.Repeat("x", maxRequestIDBytes)+`"`)) != "" {
		t.Error("a null, missing or oversized id got a key")
	}
	if callKey("t", json.RawMessage(` 7 `)) != callKey("t", json.RawMessage(`7`)) || callKey("t", json.RawMessage(`7`)) == callKey("t", json.RawMessage(`"7"`)) {
		t.Error("ids are not compared as JSON values")
	}
}
