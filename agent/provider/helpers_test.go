package provider

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
)

// testServer serves a Server on the local API's real transport: a unix
// socket, or the named pipe on Windows.
type testServer struct {
	*Server
	ep localapi.Endpoint
	// dialer, when set, connects to the server instead of ep (the
	// in-memory listener of a synctest bubble).
	dialer func(ctx context.Context) (net.Conn, error)

	mu    sync.Mutex
	rooms [][]Room
	moves []bool
}

func startServer(t testing.TB, mod func(*Config)) *testServer {
	t.Helper()
	ts := newTestServer(mod)
	// A short directory: a unix socket path has a ~104-byte limit.
	dir, err := os.MkdirTemp("", "rrprov")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, ep, err := localapi.Listen(localapi.ListenConfig{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ts.ep = ep
	ts.serve(t, ln)
	return ts
}

// startPipeServer is startServer on an in-memory listener, for a
// testing/synctest bubble (create it inside the bubble): the same server and
// websocket client, with a net.Pipe for the socket so the bubble's clock runs.
func startPipeServer(t testing.TB, mod func(*Config)) *testServer {
	t.Helper()
	ts := newTestServer(mod)
	ln := testutil.NewPipeListener()
	ts.dialer = func(ctx context.Context) (net.Conn, error) { return ln.Dial(ctx, "", "") }
	ts.serve(t, ln)
	return ts
}

func (ts *testServer) serve(t testing.TB, ln net.Listener) {
	hs := &http.Server{Handler: ts.Server, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() { defer close(served); _ = hs.Serve(ln) }()
	t.Cleanup(func() {
		ts.Server.Close()
		hs.Close()
		<-served
	})
}

func newTestServer(mod func(*Config)) *testServer {
	ts := &testServer{}
	cfg := Config{Version: "test", Projects: func() []string { return []string{"p1"} },
		OnRooms: func(r []Room) { ts.mu.Lock(); ts.rooms = append(ts.rooms, r); ts.mu.Unlock() },
		OnChange: func(c bool, _ AppInfo) {
			ts.mu.Lock()
			ts.moves = append(ts.moves, c)
			ts.mu.Unlock()
		}}
	if mod != nil {
		mod(&cfg)
	}
	ts.Server = New(cfg)
	return ts
}

func (ts *testServer) lastRooms() []Room {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.rooms) == 0 {
		return nil
	}
	return ts.rooms[len(ts.rooms)-1]
}

// fakeApp is a provider client: it says hello and answers requests with
// answer (nil result and nil error: no answer at all).
type fakeApp struct {
	t    testing.TB
	conn *websocket.Conn
	wmu  sync.Mutex

	mu       sync.Mutex
	got      []message // requests and notifications received
	closeErr error     // why reading ended
	done     chan struct{}
}

// answerFunc returns the raw JSON of a response to m (result or error
// object), or "" to stay silent.
type answerFunc func(app *fakeApp, m message) string

func dial(t testing.TB, ts *testServer, protos ...string) (*websocket.Conn, *http.Response, error) {
	d := websocket.Dialer{
		NetDialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			if ts.dialer != nil {
				return ts.dialer(ctx)
			}
			return localapi.Dial(ctx, ts.ep)
		},
		Subprotocols:     protos,
		HandshakeTimeout: 5 * time.Second,
	}
	return d.Dial("ws://localapi/localapi/v1/provider", nil)
}

// connectApp dials, says hello with caps, and serves answer until closed.
func connectApp(t testing.TB, ts *testServer, caps Capabilities, answer answerFunc) *fakeApp {
	t.Helper()
	ts.Server.mu.Lock()
	before := ts.Server.conns
	ts.Server.mu.Unlock()
	conn, _, err := dial(t, ts, Subprotocol)
	if err != nil {
		t.Fatal(err)
	}
	app := &fakeApp{t: t, conn: conn, done: make(chan struct{})}
	hello, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": MethodHello,
		"params": map[string]any{"protocol_versions": []int{1}, "app": map[string]string{"name": "Fake", "version": "1"}, "capabilities": caps}})
	if err := conn.WriteMessage(websocket.TextMessage, hello); err != nil {
		t.Fatal(err)
	}
	_, data, err := conn.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	var m message
	if err := json.Unmarshal(data, &m); err != nil || m.Error != nil {
		t.Fatalf("hello answer %s: %v", data, err)
	}
	go app.serve(answer)
	t.Cleanup(func() { conn.Close(); <-app.done })
	// Wait until the server has registered it (hello's answer is written
	// before register).
	deadline := time.Now().Add(5 * time.Second)
	for {
		if num, ok := ts.connection(); ok && num > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the app never became the provider")
		}
		time.Sleep(time.Millisecond)
	}
	return app
}

func (app *fakeApp) serve(answer answerFunc) {
	defer close(app.done)
	for {
		_, data, err := app.conn.ReadMessage()
		if err != nil {
			app.mu.Lock()
			app.closeErr = err
			app.mu.Unlock()
			return
		}
		var m message
		if err := json.Unmarshal(data, &m); err != nil {
			continue
		}
		app.mu.Lock()
		app.got = append(app.got, m)
		app.mu.Unlock()
		if len(m.ID) == 0 || answer == nil {
			continue
		}
		if a := answer(app, m); a != "" {
			app.send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,` + a + `}`)
		}
	}
}

func (app *fakeApp) send(s string) {
	app.wmu.Lock()
	defer app.wmu.Unlock()
	_ = app.conn.WriteMessage(websocket.TextMessage, []byte(s))
}

func (app *fakeApp) received(method string) []message {
	app.mu.Lock()
	defer app.mu.Unlock()
	var out []message
	for _, m := range app.got {
		if m.Method == method {
			out = append(out, m)
		}
	}
	return out
}

// closeCode waits for the app's connection to end and returns the close code
// the server sent (0 when none).
func (app *fakeApp) closeCode(t testing.TB) int {
	t.Helper()
	select {
	case <-app.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the app's connection did not end")
	}
	app.mu.Lock()
	defer app.mu.Unlock()
	var ce *websocket.CloseError
	if errors.As(app.closeErr, &ce) {
		return ce.Code
	}
	return 0
}

func code(err error) relay.Code {
	var e *relay.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
