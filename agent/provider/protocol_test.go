package provider

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/internal/testutil"
)

// responses are the answers the app received (messages with an id and no
// method).
func (app *fakeApp) responses() []message {
	app.mu.Lock()
	defer app.mu.Unlock()
	var out []message
	for _, m := range app.got {
		if m.Method == "" && len(m.ID) > 0 {
			out = append(out, m)
		}
	}
	return out
}

// TestBatchIsInvalidRequest (#28 §1.4): a JSON-RPC batch, or any JSON that
// is not one object, is answered with -32600 and id null, and the
// connection stays up (it was closed with 4003).
func TestBatchIsInvalidRequest(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	app := connectApp(t, ts, allCaps, roomAnswer("Team room"))
	for i, bad := range []string{
		`[{"jsonrpc":"2.0","id":5,"method":"rooms.changed","params":{"rooms":[]}}]`,
		` [] `,
		`42`,
		`{"jsonrpc":"2.0","id":6,"method":7}`,
	} {
		app.send(bad)
		testutil.Eventually(t, "an answer to "+bad, func() bool { return len(app.responses()) == i+1 })
		r := app.responses()[i]
		if string(r.ID) != "null" || r.Error == nil || r.Error.Code != rpcInvalidRequest || (bad[0] == '[' && !strings.Contains(r.Error.Message, "batch")) {
			t.Fatalf("answer to %s: id %s, error %+v; want -32600 with id null", bad, r.ID, r.Error)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ts.App().ReadRoom(ctx, "p1", "r1"); err != nil {
		t.Fatalf("the connection did not survive: %v", err)
	}
}

// TestOversizedMessageIs1009 (#28 §1.5): an app that writes a message over
// the limit (1 MiB) can finish writing it, then reads the close frame 1009;
// roomrelay closed at once before, so the app's write failed and a client
// that gives up on a failed write (node's ws) saw 1006.
func TestOversizedMessageIs1009(t *testing.T) {
	for _, size := range []int{1_200_000, 10_000_000} {
		for _, afterHello := range []bool{false, true} {
			ts := startServer(t, nil)
			conn, _, err := dial(t, ts, Subprotocol)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			if afterHello {
				if err := conn.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":1,"method":"provider.hello","params":{"protocol_versions":[1],"app":{"name":"Big","version":"1"}}}`)); err != nil {
					t.Fatal(err)
				}
				if _, _, err := conn.ReadMessage(); err != nil {
					t.Fatal(err)
				}
			}
			msg := `{"jsonrpc":"2.0","method":"rooms.changed","params":{"pad":"` + strings.Repeat("x", size) + `"}}`
			if err := conn.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
				t.Fatalf("%d bytes (after hello %v): the write failed: %v", size, afterHello, err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			for err == nil {
				_, _, err = conn.ReadMessage()
			}
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.CloseMessageTooBig {
				t.Fatalf("%d bytes (after hello %v): the app read %v, want close 1009", size, afterHello, err)
			}
		}
	}
}

// TestDeselectedAppIsClosed: when the owner switches to the builtin
// provider, the connected app is closed with 4004 and the reason naming the
// fix, not left connected serving nobody.
func TestDeselectedAppIsClosed(t *testing.T) {
	t.Parallel()
	var selected atomic.Bool
	selected.Store(true)
	ts := startServer(t, func(c *Config) { c.Selected = selected.Load })
	app := connectApp(t, ts, allCaps, roomAnswer("r"))
	ts.Reselect() // still selected: nothing happens
	if _, ok := ts.Connected(); !ok {
		t.Fatal("a selected app was closed")
	}
	selected.Store(false)
	ts.Reselect()
	if c := app.closeCode(t); c != CloseNotSelected {
		t.Fatalf("close %d, want %d", c, CloseNotSelected)
	}
	app.mu.Lock()
	defer app.mu.Unlock()
	var ce *websocket.CloseError
	if !errors.As(app.closeErr, &ce) || ce.Text != NotSelectedReason {
		t.Fatalf("close %v, want the reason %q", app.closeErr, NotSelectedReason)
	}
}
