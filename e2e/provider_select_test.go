package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/agent/provider"
)

// helloApp dials the agent's provider websocket on its local API and says
// hello as "Select test" 2.5.0; it returns the connection and the hello's
// answer or the close error.
func helloApp(t *testing.T, ep localapi.Endpoint) (*websocket.Conn, error) {
	t.Helper()
	d := websocket.Dialer{NetDialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return localapi.Dial(ctx, ep)
	}, Subprotocols: []string{provider.Subprotocol}, HandshakeTimeout: 10 * time.Second}
	conn, _, err := d.Dial("ws://"+localapi.Host+localapi.Prefix+"provider", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":1,"method":"provider.hello","params":{"protocol_versions":[1],"app":{"name":"Select test","version":"2.5.0"},"capabilities":{}}}`)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			return conn, err
		}
		var m struct {
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(data, &m) == nil && m.Error == nil {
			_ = conn.SetReadDeadline(time.Time{})
			return conn, nil
		}
	}
}

// TestAppSelectsItself (#28 §2, §1.6): against the real binary, a desktop
// app the policy does not select is closed with 4004 and a reason naming
// the fix; it selects itself through PUT policy/provider (If-Match, audited
// with its pid, published as provider_selected), then its hello is
// accepted; `roomrelay status` (text and --json) names it; `roomrelay
// provider builtin` switches back and `policy show` says so.
func TestAppSelectsItself(t *testing.T) {
	w := startBinWorld(t, "")
	ctx := context.Background()
	c, _, err := localapi.Discover(ctx, filepath.Join(w.devHome, "config"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Name = "select-test/1"

	_, err = helloApp(t, c.Endpoint())
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != provider.CloseNotSelected || !strings.Contains(ce.Text, "roomrelay provider app") || !strings.Contains(ce.Text, "policy/provider") {
		t.Fatalf("hello while builtin is selected: %v; want close 4004 naming the fix", err)
	}

	stream, err := c.Stream(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	var sel localapi.ProviderSelection
	hdr, err := c.Do(ctx, "GET", "policy/provider", nil, &sel, nil)
	if err != nil || sel.Provider != "builtin" || hdr.Get("ETag") != `"`+sel.Revision+`"` {
		t.Fatalf("GET policy/provider: %+v %v (ETag %q)", sel, err, hdr.Get("ETag"))
	}
	var ae *localapi.APIError
	if _, err := c.Do(ctx, "PUT", "policy/provider", map[string]string{"provider": "app"}, nil, nil); !errors.As(err, &ae) || ae.Status != http.StatusPreconditionRequired {
		t.Fatalf("PUT without If-Match: %v, want 428", err)
	}
	if _, err := c.Do(ctx, "PUT", "policy/provider", map[string]string{"provider": "app"}, nil, http.Header{"If-Match": {`"stale"`}}); !errors.As(err, &ae) || ae.Status != http.StatusPreconditionFailed {
		t.Fatalf("PUT with a stale If-Match: %v, want 412", err)
	}
	var res localapi.ProviderSelection
	if _, err := c.Do(ctx, "PUT", "policy/provider", map[string]string{"provider": "app"}, &res, http.Header{"If-Match": {hdr.Get("ETag")}}); err != nil || !res.Changed || res.Provider != "app" {
		t.Fatalf("PUT policy/provider app: %+v %v", res, err)
	}
	// The event, with this process as the one that selected.
	sc := bufio.NewScanner(stream.Body)
	for {
		if !sc.Scan() {
			t.Fatalf("the event stream ended without provider_selected: %v", sc.Err())
		}
		var e struct {
			Type string                  `json:"type"`
			Data events.ProviderSelected `json:"data"`
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Type == events.TypeProviderSelected {
			if e.Data.Provider != "app" || e.Data.PID != os.Getpid() {
				t.Fatalf("provider_selected %s, want app by pid %d", sc.Bytes(), os.Getpid())
			}
			break
		}
	}
	// The audit line (the log file, as `roomrelay audit --json` reads it)
	// names the caller.
	found := false
	for _, line := range strings.Split(w.run(w.devHome, "audit", "--json"), "\n") {
		var e struct {
			Command string `json:"command"`
			Detail  string `json:"detail"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Command == "localapi.select_provider" &&
			strings.Contains(e.Detail, "provider=app") && strings.Contains(e.Detail, "pid="+strconv.Itoa(os.Getpid())) {
			found = true
		}
	}
	if !found {
		t.Fatal("no audit line localapi.select_provider with this pid")
	}

	// Selected now: the hello is accepted (the agent reloads the policy it
	// saved; retried until it has).
	var appConn *websocket.Conn
	eventually(t, "the app's hello accepted", func() bool {
		conn, err := helloApp(t, c.Endpoint())
		appConn = conn
		return err == nil
	})
	out := w.run(w.devHome, "status")
	if !strings.Contains(out, `provider:    app: "Select test" 2.5.0, pid `+strconv.Itoa(os.Getpid())) {
		t.Fatalf("status does not name the provider app:\n%s", out)
	}
	var st struct {
		Provider *localapi.ProviderState `json:"provider"`
	}
	if err := json.Unmarshal([]byte(w.run(w.devHome, "status", "--json")), &st); err != nil || st.Provider == nil ||
		st.Provider.App != "Select test" || st.Provider.Version != "2.5.0" || st.Provider.Selected != "app" || !st.Provider.Connected {
		t.Fatalf("status --json provider %+v (%v)", st.Provider, err)
	}
	if out := w.run(w.devHome, "policy", "show"); !strings.Contains(out, "# room provider: app") || !strings.Contains(out, "\nprovider app\n") {
		t.Fatalf("policy show:\n%s", out)
	}

	// The CLI switches back, through the running agent (audited too).
	if out := w.run(w.devHome, "provider", "builtin"); !strings.Contains(out, "room provider: builtin") {
		t.Fatalf("provider builtin: %s", out)
	}
	// The connected app is told at once: 4004, with the fix.
	_ = appConn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for err = nil; err == nil; _, _, err = appConn.ReadMessage() {
	}
	if !errors.As(err, &ce) || ce.Code != provider.CloseNotSelected || ce.Text != provider.NotSelectedReason {
		t.Fatalf("the app connected when builtin was selected: %v; want close 4004", err)
	}
	var show struct {
		Provider string `json:"provider"`
	}
	if err := json.Unmarshal([]byte(w.run(w.devHome, "policy", "show", "--json")), &show); err != nil || show.Provider != "builtin" {
		t.Fatalf("policy show --json provider %q (%v)", show.Provider, err)
	}
	if out := w.run(w.devHome, "provider", "--json"); !strings.Contains(out, `"provider":"builtin"`) {
		t.Fatalf("provider --json: %s", out)
	}
}
