package provider

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
)

var allCaps = Capabilities{Install: true, Files: true, BuildState: true, Notifications: true}

// roomAnswer answers rooms.read for any room with name.
func roomAnswer(name string) answerFunc {
	return func(_ *fakeApp, m message) string {
		var p struct {
			RoomID string `json:"room_id"`
		}
		_ = json.Unmarshal(m.Params, &p)
		b, _ := json.Marshal(map[string]any{"id": p.RoomID, "name": name, "app_count": 2})
		return `"result":` + string(b)
	}
}

func TestReadRoomThroughTheApp(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	app := connectApp(t, ts, allCaps, roomAnswer("Team room"))
	app.send(`{"jsonrpc":"2.0","method":"rooms.changed","params":{"rooms":[{"id":"r1","project":"p1","name":"Team room"},{"id":"bad id","project":"p1","name":"x"},{"id":"r1","project":"p1","name":"dup"}]}}`)
	testutil.Eventually(t, "the directory never arrived", func() bool { return len(ts.lastRooms()) > 0 })
	if got := ts.lastRooms(); len(got) != 1 || got[0] != (Room{ID: "r1", Project: "p1", Name: "Team room"}) {
		t.Fatalf("directory %+v, want the one valid entry", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := ts.App().ReadRoom(ctx, "p1", "r1")
	if err != nil {
		t.Fatal(err)
	}
	if r != (rooms.RoomSummary{ID: "r1", Name: "Team room", Project: "p1", Kind: "local", AppCount: 2}) {
		t.Fatalf("read %+v", r)
	}
	reqs := app.received(MethodRoomsRead)
	var p map[string]any
	if len(reqs) != 1 || json.Unmarshal(reqs[0].Params, &p) != nil {
		t.Fatalf("requests %+v", reqs)
	}
	dl, _ := ctx.Deadline()
	if p["project"] != "p1" || p["room_id"] != "r1" || int64(p["deadline_ms"].(float64)) != dl.UnixMilli() {
		t.Fatalf("params %v, want project, room and the command's deadline %d", p, dl.UnixMilli())
	}
}

func TestNoAppIsAppNotRunning(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	_, err := ts.App().ReadRoom(context.Background(), "p1", "r1")
	if code(err) != relay.CodeAppNotRunning || !relay.CodeAppNotRunning.Retryable() {
		t.Fatalf("err %v, want app_not_running", err)
	}
	if _, err := ts.App().AppFiles(context.Background(), "p1", "r1", "a1"); code(err) != relay.CodeAppNotRunning {
		t.Fatalf("files: %v", err)
	}
}

func TestNewestProviderWins(t *testing.T) {
	ts := startServer(t, nil)
	first := connectApp(t, ts, allCaps, roomAnswer("first"))
	second := connectApp(t, ts, allCaps, roomAnswer("second"))
	if c := first.closeCode(t); c != CloseReplaced {
		t.Fatalf("the first provider was closed with %d, want %d replaced", c, CloseReplaced)
	}
	r, err := ts.App().ReadRoom(context.Background(), "p1", "r1")
	if err != nil || r.Name != "second" {
		t.Fatalf("read %+v %v, want the second provider's answer", r, err)
	}
	_ = second
	// The replaced one's end is not "the app went away".
	ts.mu.Lock()
	moves := append([]bool(nil), ts.moves...)
	ts.mu.Unlock()
	if len(moves) != 2 || !moves[0] || !moves[1] {
		t.Fatalf("provider changes %v, want connected twice and no disconnect", moves)
	}
	if _, ok := ts.Connected(); !ok {
		t.Fatal("no provider after the replacement")
	}
}

// TestAppGoneMidCall: the app takes the request and closes; the call fails
// with app_not_running at once, not at its (one minute) deadline.
func TestAppGoneMidCall(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	connectApp(t, ts, allCaps, func(app *fakeApp, m message) string {
		app.conn.Close()
		return ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := ts.App().ReadRoom(ctx, "p1", "r1")
	if code(err) != relay.CodeAppNotRunning || ctx.Err() != nil {
		t.Fatalf("err %v (ctx %v), want app_not_running before the deadline", err, ctx.Err())
	}
	testutil.Eventually(t, "still connected", func() bool { _, ok := ts.Connected(); return !ok })
}

func TestCancelBecomesCancelRequest(t *testing.T) {
	ts := startServer(t, nil)
	app := connectApp(t, ts, allCaps, func(*fakeApp, message) string { return "" }) // never answers
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		testutil.Eventually(t, "no request", func() bool { return len(app.received(MethodAppsList)) == 1 })
		cancel()
	}()
	_, err := ts.App().ListRoomApps(ctx, "p1", "r1", 10, "")
	if err == nil || ctx.Err() == nil {
		t.Fatalf("err %v", err)
	}
	testutil.Eventually(t, "no $/cancelRequest", func() bool { return len(app.received(MethodCancel)) == 1 })
	var p struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(app.received(MethodCancel)[0].Params, &p)
	var reqID string
	_ = json.Unmarshal(app.received(MethodAppsList)[0].ID, &reqID)
	if p.ID != reqID || reqID == "" {
		t.Fatalf("cancel names %q, the request was %q", p.ID, reqID)
	}
}

// TestHostileProvider: whatever the app answers, the result carries only
// roomrelay's fields, bounded, or the call fails cleanly; the server keeps
// serving the next app.
func TestHostileProvider(t *testing.T) {
	t.Parallel()
	bigName := strings.Repeat("n", 300<<10)
	cases := []struct {
		name   string
		answer string // the response body after the id; "" for raw below
		raw    string // a whole message instead
		want   relay.Code
		check  func(t *testing.T, r rooms.RoomSummary)
	}{
		{name: "extra fields", answer: `"result":{"id":"r1","name":"ok","app_count":1,"secret":"LEAKMARK","files":{"a":"LEAKMARK"}}`,
			check: func(t *testing.T, r rooms.RoomSummary) {
				b, _ := json.Marshal(r)
				if strings.Contains(string(b), "LEAKMARK") {
					t.Fatalf("leaked: %s", b)
				}
			}},
		{name: "long name cut", answer: `"result":{"id":"r1","name":"` + bigName + `","app_count":1}`,
			check: func(t *testing.T, r rooms.RoomSummary) {
				if len(r.Name) != relay.MaxRoomNameBytes {
					t.Fatalf("name of %d bytes", len(r.Name))
				}
			}},
		{name: "control and bidi characters", answer: `"result":{"id":"r1","name":"a\u202eb\u0007c","app_count":1}`,
			check: func(t *testing.T, r rooms.RoomSummary) {
				if r.Name != "abc" {
					t.Fatalf("name %q", r.Name)
				}
			}},
		{name: "10 MB name", raw: `{"jsonrpc":"2.0","id":"ID","result":{"id":"r1","name":"` + strings.Repeat("x", 10<<20) + `"}}`, want: relay.CodeInternal},
		{name: "garbage", raw: "\x00\xffnot json at all", want: relay.CodeInternal},
		{name: "wrong type", answer: `"result":{"id":"r1","name":42,"app_count":1}`, want: relay.CodeInternal},
		{name: "result not an object", answer: `"result":"LEAKMARK"`, want: relay.CodeInternal},
		{name: "another room", answer: `"result":{"id":"r2","name":"x","app_count":1}`, want: relay.CodeInternal},
		{name: "negative count", answer: `"result":{"id":"r1","name":"x","app_count":-1}`, want: relay.CodeInternal},
		{name: "not found", answer: `"error":{"code":-32000,"message":"LEAKMARK","data":{"code":"not_found"}}`, want: relay.CodeNotFound},
		{name: "invalid args", answer: `"error":{"code":-32000,"message":"LEAKMARK","data":{"code":"invalid_args"}}`, want: relay.CodeInvalidArgs},
		{name: "other error", answer: `"error":{"code":-32000,"message":"LEAKMARK","data":{"code":"project_not_enabled"}}`, want: relay.CodeInternal},
		{name: "error without data", answer: `"error":{"code":7,"message":"LEAKMARK"}`, want: relay.CodeInternal},
	}
	ts := startServer(t, nil)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			app := connectApp(t, ts, allCaps, func(app *fakeApp, m message) string {
				if c.raw != "" {
					app.send(strings.Replace(c.raw, `"ID"`, string(m.ID), 1))
					return ""
				}
				return c.answer
			})
			_ = app
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r, err := ts.App().ReadRoom(ctx, "p1", "r1")
			if c.want != "" {
				if code(err) != c.want || ctx.Err() != nil {
					t.Fatalf("err %v, want %s", err, c.want)
				}
				if strings.Contains(err.Error(), "LEAKMARK") {
					t.Fatalf("the app's text reached the error: %v", err)
				}
				if c.want == relay.CodeNotFound && err.Error() != relay.RoomNotFound("r1").Error() {
					t.Fatalf("not_found text %q is not the allowlist's", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, r)
		})
	}
}

func TestNeverAnsweringProviderEndsAtTheDeadline(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	app := connectApp(t, ts, allCaps, func(*fakeApp, message) string { return "" })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := ts.App().ReadRoom(ctx, "p1", "r1")
	if err == nil || ctx.Err() == nil {
		t.Fatalf("err %v before the deadline", err)
	}
	testutil.Eventually(t, "no $/cancelRequest after the deadline", func() bool { return len(app.received(MethodCancel)) == 1 })
	// The session survives a slow answer: the app is still the provider.
	if _, ok := ts.Connected(); !ok {
		t.Fatal("a silent app was dropped")
	}
}

func TestRequestsInFlightAreBounded(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *Config) { c.MaxInFlight = 2 })
	release := make(chan struct{})
	app := connectApp(t, ts, allCaps, func(app *fakeApp, m message) string {
		go func() {
			<-release
			app.send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"id":"r1","name":"n","app_count":0}}`)
		}()
		return ""
	})
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := ts.App().ReadRoom(context.Background(), "p1", "r1")
			errs <- err
		}()
	}
	testutil.Eventually(t, "two requests", func() bool { return len(app.received(MethodRoomsRead)) == 2 })
	time.Sleep(20 * time.Millisecond) // a third would have been sent by now
	if n := len(app.received(MethodRoomsRead)); n != 2 {
		t.Fatalf("%d requests in flight, want at most 2", n)
	}
	close(release)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestHelloRefusals(t *testing.T) {
	t.Run("no subprotocol", func(t *testing.T) {
		ts := startServer(t, nil)
		_, resp, err := dial(t, ts)
		if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("err %v resp %v", err, resp)
		}
	})
	for _, c := range []struct {
		name     string
		first    string
		selected bool
		want     int
	}{
		{"unsupported version", `{"jsonrpc":"2.0","id":1,"method":"provider.hello","params":{"protocol_versions":[2]}}`, true, CloseUnsupported},
		{"not selected", `{"jsonrpc":"2.0","id":1,"method":"provider.hello","params":{"protocol_versions":[1]}}`, false, CloseNotSelected},
		{"not hello first", `{"jsonrpc":"2.0","id":1,"method":"rooms.changed","params":{}}`, true, CloseProtocolError},
		{"garbage first", `{{{`, true, CloseProtocolError},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := startServer(t, func(cfg *Config) { cfg.Selected = func() bool { return c.selected } })
			conn, _, err := dial(t, ts, Subprotocol)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.WriteMessage(websocket.TextMessage, []byte(c.first))
			for {
				if _, _, err = conn.ReadMessage(); err != nil {
					break
				}
			}
			ce, ok := err.(*websocket.CloseError)
			if !ok || ce.Code != c.want {
				t.Fatalf("ended with %v, want close %d", err, c.want)
			}
			if _, ok := ts.Connected(); ok {
				t.Fatal("a refused app became the provider")
			}
		})
	}
}

func TestSilentConnectionIsDropped(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.Heartbeat = 20 * time.Millisecond })
	conn, _, err := dial(t, ts, Subprotocol)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":1,"method":"provider.hello","params":{"protocol_versions":[1]}}`))
	// This client never reads again, so it never answers a ping.
	testutil.Eventually(t, "never connected", func() bool { _, ok := ts.Connected(); return ok })
	testutil.Eventually(t, "a provider that answers no ping stays connected", func() bool { _, ok := ts.Connected(); return !ok })
}
