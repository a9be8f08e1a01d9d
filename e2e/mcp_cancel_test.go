package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestMCPCancelReachesApp (#28 §1.1): a read_room the desktop app answers
// slowly is cancelled in the app ($/cancelRequest naming the agent's
// request) when the MCP caller closes its HTTP request, and when it sends
// notifications/cancelled naming its JSON-RPC id in a POST of its own.
// Real hub, real agent, the app on the provider websocket, raw MCP HTTP.
// The latency is logged, not asserted (the goal is under 100 ms).
func TestMCPCancelReachesApp(t *testing.T) {
	h := startHub(t, hub.Config{})
	_, sock := appDevice(t, h)
	app := connectDesktopApp(t, sock, map[string]string{})
	eventually(t, "the app's room never reached the hub's directory", func() bool {
		rs, err := h.Rooms(context.Background(), "p")
		return err == nil && len(rs) == 1 && rs[0].Presence.App == hubapi.AppOpen
	})
	app.mu.Lock()
	app.hold, app.cancels = make(chan string, 4), make(chan string, 4)
	app.mu.Unlock()
	tok := clientToken(t, h, "p", hubapi.ScopeRead).Token

	send := func(ctx context.Context, body string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL()+"/mcp", bytes.NewReader([]byte(body)))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		return http.DefaultClient.Do(req)
	}
	start := func(id int) (string, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			resp, err := send(ctx, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"read_room","arguments":{"room_id":"r-app"}}}`, id))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		select {
		case rid := <-app.hold:
			return rid, cancel
		case <-time.After(10 * time.Second):
			t.Fatal("the app never got rooms.read")
		}
		return "", cancel
	}
	wantCancel := func(what, rid string, sent time.Time) {
		t.Helper()
		select {
		case got := <-app.cancels:
			if got != rid {
				t.Fatalf("%s: $/cancelRequest of %s, want %s", what, got, rid)
			}
			t.Logf("%s: the app's $/cancelRequest %v after the caller's cancel", what, time.Since(sent).Round(100*time.Microsecond))
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the app got no $/cancelRequest", what)
		}
	}

	rid, stop := start(1)
	sent := time.Now()
	stop()
	wantCancel("HTTP request closed", rid, sent)

	rid, stop = start(2)
	defer stop()
	sent = time.Now()
	resp, err := send(context.Background(), `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	wantCancel("notifications/cancelled", rid, sent)
}
