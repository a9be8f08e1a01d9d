package hub

import (
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

func TestConnectRoundTripCleanClose(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{Heartbeat: 2 * time.Minute}) // offline can only come from the close
	dev, tok := th.enroll("p1")
	if p := th.presence(dev); p.State != hubapi.StateOffline {
		t.Fatalf("never-connected device is %s, want offline", p.State)
	}
	a := dialAgent(t, th.wsURL(), tok, dev)
	if a.welcome.SessionID == "" || a.welcome.HeartbeatMS != (2*time.Minute).Milliseconds() || a.welcome.ServerTime.IsZero() {
		t.Fatalf("welcome = %+v", a.welcome)
	}
	a.serve(echoHandler)

	p := th.waitState(dev, hubapi.StateOnline)
	if p.Session != a.welcome.SessionID {
		t.Errorf("presence session %q, welcome said %q", p.Session, a.welcome.SessionID)
	}
	d, err := th.cl.Device(context.Background(), dev)
	if err != nil {
		t.Fatal(err)
	}
	if d.AgentVersion != "test" || len(d.Policy) != 1 || d.Policy[0].Project != "p1" {
		t.Errorf("device did not record hello: %+v", d)
	}

	th.roundTrip(dev)
	// A device-side failure keeps its code and maps to its status.
	res, status := th.command(dev, hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoomAppStatus})
	if status != http.StatusForbidden || res.OK || res.Error.Code != relay.CodeCommandNotAllowed || res.Error.Message != "not allowed here" {
		t.Errorf("failing command: %d %+v", status, res)
	}
	// A project the device is not enrolled for is refused by the hub.
	res, status = th.command(dev, hubapi.CommandRequest{ProjectID: "other", Name: relay.CmdReadRoom})
	if status != http.StatusForbidden || res.Error == nil || res.Error.Code != relay.CodeNotEnrolled {
		t.Errorf("unenrolled project: %d %+v", status, res)
	}

	// Clean close: offline at once (the 5-minute read deadline cannot be it).
	_ = a.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(time.Second))
	p = th.waitState(dev, hubapi.StateOffline)
	if p.LastSeen.IsZero() {
		t.Error("offline without last_seen")
	}
}

// routing runs the command path with the agent on one hub and the request
// posted to another (the same hub when a == b).
func routing(t *testing.T, a, b *testHub) {
	dev, tok := a.enroll("p1")
	ag := dialAgent(t, a.wsURL(), tok, dev)
	ag.serve(echoHandler)
	b.waitState(dev, hubapi.StateOnline)
	b.roundTrip(dev)

	// 20 concurrent commands, each answered with its own args.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			args := json.RawMessage(`{"i":` + string(rune('0'+i%10)) + `}`)
			res, status, err := b.cl.Command(context.Background(), dev, hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoom, Args: args})
			if err != nil || status != 200 || string(res.Result) != string(args) {
				t.Errorf("concurrent command %d: %v %d %+v", i, err, status, res)
			}
		})
	}
	wg.Wait()
}

func TestRoutingEmbedded(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	routing(t, th, th)
}

func TestRoutingExternalNATSTwoNodes(t *testing.T) {
	t.Parallel()
	url := startExternalNATS(t)
	a := startHub(t, Config{NATSURL: url, NodeName: "a"})
	b := startHub(t, Config{NATSURL: url, NodeName: "b"})
	routing(t, a, b)

	// The device reconnects to node b: node a's socket is replaced.
	dev, tok := a.enroll("p1")
	old := dialAgent(t, a.wsURL(), tok, dev)
	old.serve(echoHandler)
	waitFor(t, "old session online", func() bool { return a.presence(dev).Session == old.welcome.SessionID })
	nw := dialAgent(t, b.wsURL(), tok, dev)
	nw.serve(echoHandler)
	if code, reason := old.closeCode(); code != relay.CloseReplaced {
		t.Fatalf("old session closed with %d %q, want %d", code, reason, relay.CloseReplaced)
	}
	waitFor(t, "old session gone from node a", func() bool { return len(a.localSessions(dev)) == 0 })
	p := a.presence(dev)
	if p.State != hubapi.StateOnline || p.Session != nw.welcome.SessionID || p.Node != "b" {
		t.Fatalf("after takeover presence = %+v, want online on b with session %s", p, nw.welcome.SessionID)
	}
	a.roundTrip(dev)
}

func TestStaleCloseKeepsNewerSession(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	dev, tok := th.enroll("p1")
	old := dialAgent(t, th.wsURL(), tok, dev)
	old.serve(echoHandler)
	// Online means the old session's setup is complete (it holds an epoch);
	// two sessions racing through setup are ordered by their presence writes.
	waitFor(t, "old session online", func() bool { return th.presence(dev).Session == old.welcome.SessionID })
	nw := dialAgent(t, th.wsURL(), tok, dev)
	nw.serve(echoHandler)
	if code, _ := old.closeCode(); code != relay.CloseReplaced {
		t.Fatalf("old session closed with %d, want %d", code, relay.CloseReplaced)
	}
	// The old session's cleanup has run once only one session is left.
	waitFor(t, "one session", func() bool { return th.sessionCount() == 1 })
	p := th.presence(dev)
	if p.State != hubapi.StateOnline || p.Session != nw.welcome.SessionID {
		t.Fatalf("presence after stale close = %+v, want online with %s", p, nw.welcome.SessionID)
	}
	th.roundTrip(dev)
}

func TestPresenceSleeping(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{Heartbeat: 100 * time.Millisecond})
	dev, tok := th.enroll("p1")
	a := dialAgent(t, th.wsURL(), tok, dev)
	if err := a.write(mustEncode(t, &relay.Event{Event: relay.EventSleeping, Time: time.Now()})); err != nil {
		t.Fatal(err)
	}
	a.serve(echoHandler) // still answering pings: sleeping until the socket goes
	p := th.waitState(dev, hubapi.StateSleeping)
	if p.Session != a.welcome.SessionID {
		t.Errorf("sleeping presence names session %q", p.Session)
	}
	// The refresher keeps a live sleeping session sleeping.
	time.Sleep(500 * time.Millisecond)
	if p := th.presence(dev); p.State != hubapi.StateSleeping {
		t.Errorf("after a few heartbeats state = %s, want sleeping", p.State)
	}
	a.conn.Close() // the machine suspends: no close frame
	th.waitState(dev, hubapi.StateOffline)
}

func TestSilentLossGoesOffline(t *testing.T) {
	t.Parallel()
	// 300 ms, not 100: with a 250 ms read deadline the healthy device's
	// session was once dropped too on a machine starved by other builds.
	th := startHub(t, Config{Heartbeat: 300 * time.Millisecond})
	dev, tok := th.enroll("p1")
	other, otok := th.enroll("p1")
	proxy := testutil.NewProxy(t, th.Addr())
	a := dialAgent(t, "ws://"+proxy.Addr()+relay.ConnectPath, tok, dev)
	a.serve(echoHandler)
	b := dialAgent(t, th.wsURL(), otok, other)
	b.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)

	proxy.Blackhole(true) // no FIN, no RST: only the read deadline can tell
	p := th.waitState(dev, hubapi.StateOffline)
	if p.LastSeen.IsZero() {
		t.Error("offline without last_seen")
	}
	th.roundTrip(other)
}

func TestStaleRecordFromDeadNodeReadsOffline(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	th := startHub(t, Config{Heartbeat: time.Minute, Now: clock})
	dev, tok := th.enroll("p1")
	a := dialAgent(t, th.wsURL(), tok, dev)
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)
	// Nothing refreshed the record for longer than its bound (the refresh
	// interval, a heartbeat and the read deadline plus grace), as when the
	// node holding the socket dies and no liveness record tells of it.
	now.Add(int64(th.Hub.presenceStaleAfter() + time.Minute))
	p := th.presence(dev)
	if p.State != hubapi.StateOffline || p.LastSeen.IsZero() {
		t.Fatalf("stale record reads %+v, want offline with last_seen", p)
	}
}

func TestBadFrames(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{MaxFrame: 4096})
	good, gtok := th.enroll("p1")
	ga := dialAgent(t, th.wsURL(), gtok, good)
	ga.serve(echoHandler)
	bad, btok := th.enroll("p1")

	cases := []struct {
		name  string
		hello bool // send a valid hello first
		frame string
		want  int
	}{
		{"malformed JSON before hello", false, `{"type":"hello",`, relay.CloseInvalidPayload},
		{"not hello first", false, `{"type":"result","id":"x","ok":true}`, relay.CloseProtocolError},
		{"other protocol version", false, `{"type":"hello","protocol":2,"device_id":"` + bad + `"}`, relay.CloseVersion},
		{"hello for another device", false, `{"type":"hello","protocol":1,"device_id":"dev-someoneelse"}`, websocket.ClosePolicyViolation},
		{"oversized before hello", false, `{"type":"hello","pad":"` + strings.Repeat("x", 5000) + `"}`, relay.CloseTooBig},
		{"malformed JSON", true, `{"type":`, relay.CloseInvalidPayload},
		{"wrong field type", true, `{"type":"result","id":7}`, relay.CloseInvalidPayload},
		{"unknown frame type", true, `{"type":"teleport"}`, relay.CloseProtocolError},
		{"missing field", true, `{"type":"result","ok":true}`, relay.CloseProtocolError},
		{"hub-only frame", true, `{"type":"drain","after_ms":1}`, relay.CloseProtocolError},
		{"second hello", true, string(mustEncode(t, helloFor(bad))), relay.CloseProtocolError},
		{"oversized", true, `{"type":"event","event":"x","data":"` + strings.Repeat("x", 5000) + `"}`, relay.CloseTooBig},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var conn *websocket.Conn
			if c.hello {
				conn = dialAgent(t, th.wsURL(), btok, bad).conn
			} else {
				var err error
				conn, _, err = dialRaw(th.wsURL(), btok, []string{relay.Subprotocol})
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
			}
			if err := conn.WriteMessage(websocket.TextMessage, []byte(c.frame)); err != nil {
				t.Fatal(err)
			}
			code, reason := readClose(t, conn)
			if code != c.want {
				t.Fatalf("closed with %d %q, want %d", code, reason, c.want)
			}
			if c.want != relay.CloseTooBig && reason == "" {
				t.Error("close without a reason")
			}
			th.roundTrip(good) // the hub keeps serving others
		})
	}
}

func TestUpgradeRefusals(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	good, gtok := th.enroll("p1")
	ga := dialAgent(t, th.wsURL(), gtok, good)
	ga.serve(echoHandler)
	revoked, rtok := th.enroll("p1")
	if _, err := th.cl.Revoke(context.Background(), revoked); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name      string
		token     string
		protos    []string
		status    int
		wwwAuth   string // substring of WWW-Authenticate
		errorCode string
	}{
		{"no subprotocol", gtok, nil, http.StatusUpgradeRequired, "", "subprotocol_required"},
		{"wrong subprotocol", gtok, []string{"roomrelay.v2"}, http.StatusUpgradeRequired, "", "subprotocol_required"},
		{"missing token", "", []string{relay.Subprotocol}, http.StatusUnauthorized, `Bearer realm="roomrelay"`, "unauthorized"},
		{"wrong token", "rrd_nope", []string{relay.Subprotocol}, http.StatusUnauthorized, `error="invalid_token"`, "invalid_token"},
		{"revoked token", rtok, []string{relay.Subprotocol}, http.StatusUnauthorized, `error="invalid_token"`, "revoked"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, resp, err := dialRaw(th.wsURL(), c.token, c.protos)
			if err == nil {
				conn.Close()
				t.Fatal("upgrade succeeded")
			}
			if resp == nil || resp.StatusCode != c.status {
				t.Fatalf("response %v, want status %d", resp, c.status)
			}
			if got := resp.Header.Get("WWW-Authenticate"); !strings.Contains(got, c.wwwAuth) || (c.status == 401 && got == "") {
				t.Errorf("WWW-Authenticate = %q, want it to contain %q", got, c.wwwAuth)
			}
			var eb hubapi.ErrorBody
			if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil || eb.Error.Code != c.errorCode {
				t.Errorf("body error code %q (%v), want %q", eb.Error.Code, err, c.errorCode)
			}
			if c.status == http.StatusUpgradeRequired && !strings.Contains(eb.Error.Message, relay.Subprotocol) {
				t.Errorf("426 body does not name the subprotocol: %q", eb.Error.Message)
			}
			th.roundTrip(good)
		})
	}
	// A plain GET (no websocket at all).
	resp, err := http.Get(th.URL() + relay.ConnectPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Errorf("plain GET: %d, want 426", resp.StatusCode)
	}
}

func TestDeviceOfflineVersusExpired(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	dev, tok := th.enroll("p1")
	res, status := th.command(dev, hubapi.CommandRequest{ID: "c-offline", ProjectID: "p1", Name: relay.CmdReadRoom})
	if status != http.StatusServiceUnavailable || res.Error == nil || res.Error.Code != relay.CodeDeviceOffline || !res.Error.Retryable || res.ID != "c-offline" {
		t.Fatalf("not connected: %d %+v", status, res)
	}

	a := dialAgent(t, th.wsURL(), tok, dev)
	var got atomic.Int32
	a.serve(func(c *relay.Command) *relay.Result {
		got.Add(1)
		if c.Deadline.IsZero() {
			t.Error("command without deadline")
		}
		return nil // never answers
	})
	th.waitState(dev, hubapi.StateOnline)
	res, status = th.command(dev, hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoom, TimeoutMS: 300})
	if status != http.StatusGatewayTimeout || res.Error == nil || res.Error.Code != relay.CodeExpired {
		t.Fatalf("silent agent: %d %+v", status, res)
	}
	if got.Load() != 1 {
		t.Errorf("agent saw %d commands, want 1", got.Load())
	}
	if _, status := th.command("dev-nosuchdevice", hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoom}); status != http.StatusNotFound {
		t.Errorf("unknown device: %d, want 404", status)
	}
	if res, status := th.command(dev, hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoom, Args: json.RawMessage(`[1]`)}); status != http.StatusBadRequest || res.Error.Code != relay.CodeInvalidArgs {
		t.Errorf("array args: %d %+v", status, res)
	}
}

func TestRevoke(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	dev, tok := th.enroll("p1")
	a := dialAgent(t, th.wsURL(), tok, dev)
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)
	d, err := th.cl.Revoke(context.Background(), dev)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Revoked || d.RevokedAt.IsZero() {
		t.Errorf("revoke answered %+v", d)
	}
	if code, reason := a.closeCode(); code != relay.CloseRevoked {
		t.Fatalf("socket closed with %d %q, want %d", code, reason, relay.CloseRevoked)
	}
	_, resp, err := dialRaw(th.wsURL(), tok, []string{relay.Subprotocol})
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("revoked token dial: %v %v", err, resp)
	}
	res, status := th.command(dev, hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoom})
	if status != http.StatusForbidden || res.Error.Code != relay.CodeNotEnrolled {
		t.Errorf("command to revoked device: %d %+v", status, res)
	}
	pc, err := th.cl.Pair(context.Background(), "p2", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := th.cl.Enroll(context.Background(), pc.Code, "", "", tok); !hubclient.IsCode(err, "revoked") {
		t.Errorf("enroll with a revoked token: %v", err)
	}
	th.waitState(dev, hubapi.StateOffline)
}

func TestRestartKeepsState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	th := startHub(t, Config{DataDir: dir})
	dev, tok := th.enroll("p1")
	pc, err := th.cl.Pair(context.Background(), "p2", 0)
	if err != nil {
		t.Fatal(err)
	}
	th.stop()

	th2 := startHub(t, Config{DataDir: dir})
	devs, err := th2.cl.Devices(context.Background())
	if err != nil || len(devs) != 1 || devs[0].ID != dev {
		t.Fatalf("devices after restart: %v %+v", err, devs)
	}
	a := dialAgent(t, th2.wsURL(), tok, dev)
	a.serve(echoHandler)
	th2.roundTrip(dev)
	// A pairing code issued before the restart still works once.
	if _, err := th2.cl.Enroll(context.Background(), pc.Code, "", "", tok); err != nil {
		t.Errorf("pairing code after restart: %v", err)
	}
}

func TestShutdownDrainsAgents(t *testing.T) {
	before := runtime.NumGoroutine()
	th := startHub(t, Config{DrainSpread: 300 * time.Millisecond, DrainGrace: 200 * time.Millisecond})
	var agents []*fakeAgent
	for range 3 {
		dev, tok := th.enroll("p1")
		a := dialAgent(t, th.wsURL(), tok, dev)
		a.serve(echoHandler)
		agents = append(agents, a)
	}
	// Until a node hears its own beat it cannot tell it is alone.
	waitFor(t, "the node to hear itself", func() bool { return th.nodes.hearsSelf(time.Now()) })
	th.stop()
	for _, a := range agents {
		code, _ := a.closeCode()
		if code != relay.CloseGoingAway {
			t.Errorf("closed with %d, want %d", code, relay.CloseGoingAway)
		}
		a.mu.Lock()
		var drain *relay.Drain
		for _, f := range a.frames {
			if d, ok := f.(*relay.Drain); ok {
				drain = d
			}
		}
		a.mu.Unlock()
		// The only node: back after the grace (its restart) plus a share
		// of the spread.
		if drain == nil || drain.AfterMS < 200 || drain.AfterMS > 500 {
			t.Errorf("drain frame %+v, want after_ms in [200,500]", drain)
		}
		a.conn.Close()
	}
	// Every goroutine the hub or its NATS started has ended: none has a
	// frame in this package (the tests' own aside) or in nats-io.
	http.DefaultClient.CloseIdleConnections()
	var left []string
	waitFor(t, "the hub's goroutines to end", func() bool { left = hubGoroutines(); return len(left) == 0 })
	t.Logf("goroutines: %d before the hub, %d after it stopped", before, runtime.NumGoroutine())
}

// hubGoroutines returns the stacks of live goroutines that run hub or NATS
// code, other than test functions.
func hubGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		ours := strings.Contains(g, "github.com/roomrelay/roomrelay/relay/hub.") && !strings.Contains(g, "relay/hub.Test") &&
			!strings.Contains(g, "relay/hub.(*fakeAgent)") && !strings.Contains(g, "relay/hub.waitFor")
		if ours || strings.Contains(g, "github.com/nats-io/") {
			out = append(out, g)
		}
	}
	return out
}

func TestCodesAndStatusMap(t *testing.T) {
	t.Parallel()
	for _, c := range relay.Codes() {
		s := StatusFor(&relay.Result{ID: "x", Error: relay.Errorf(c, "m")})
		if s < 400 {
			t.Errorf("%s maps to %d", c, s)
		}
	}
	if StatusFor(&relay.Result{ID: "x", OK: true}) != 200 {
		t.Error("ok is not 200")
	}
	for range 100 {
		c := newPairingCode()
		if n, ok := normalizeCode(c); !ok || n != c {
			t.Fatalf("code %q normalizes to %q %v", c, n, ok)
		}
	}
	if n, ok := normalizeCode("abcd-ef1o"); !ok || n != "ABCD-EF10" {
		t.Errorf("look-alikes: %q %v", n, ok)
	}
	for _, bad := range []string{"", "ABC", "ABCD-EFGU", "ABCD-EFGH-1", "ÄBCD-EFGH"} {
		if _, ok := normalizeCode(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
	if id := newID("dev-"); !deviceIDRe.MatchString(id) || len(id) != 20 {
		t.Errorf("device id %q", id)
	}
}

func TestConcurrentSessionsOneSurvives(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	dev, tok := th.enroll("p1")
	for round := range 5 {
		var agents [2]*fakeAgent
		var errs [2]error
		var wg sync.WaitGroup
		for i := range agents {
			// Not dialAgent: t.Fatal must not run on these goroutines.
			wg.Go(func() { agents[i], errs[i] = dialAgentErr(t, th.wsURL(), tok, helloFor(dev)) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, a := range agents {
			a.serve(echoHandler)
		}
		waitFor(t, "one session left", func() bool { return len(th.localSessions(dev)) == 1 })
		survivor := th.localSessions(dev)[0].id
		var lost *fakeAgent
		for _, a := range agents {
			if a.welcome.SessionID != survivor {
				lost = a
			}
		}
		if code, _ := lost.closeCode(); code != relay.CloseReplaced {
			t.Fatalf("round %d: loser closed with %d, want %d", round, code, relay.CloseReplaced)
		}
		waitFor(t, "presence names the survivor", func() bool {
			p := th.presence(dev)
			return p.State == hubapi.StateOnline && p.Session == survivor
		})
		th.roundTrip(dev)
	}
}

func TestHelloTimeout(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{HelloTimeout: 200 * time.Millisecond})
	good, gtok := th.enroll("p1")
	ga := dialAgent(t, th.wsURL(), gtok, good)
	ga.serve(echoHandler)
	dev, tok := th.enroll("p1")
	conn, _, err := dialRaw(th.wsURL(), tok, []string{relay.Subprotocol})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if code, reason := readClose(t, conn); code != relay.CloseProtocolError || !strings.Contains(reason, "hello") {
		t.Fatalf("silent agent closed with %d %q", code, reason)
	}
	if p := th.presence(dev); p.State != hubapi.StateOffline {
		t.Errorf("agent without hello is %s", p.State)
	}
	th.roundTrip(good)
}
