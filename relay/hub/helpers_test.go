package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

const testAdmin = "rra_test-admin-token"

// testLogWriter forwards hub logs to the test log until the test is over.
type testLogWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

type testHub struct {
	*Hub
	srv    *testutil.Server
	t      testing.TB
	cl     *hubclient.Client
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// startHub runs a hub until the test ends (or stop is called), served on a
// loopback port.
func startHub(t testing.TB, cfg Config) *testHub {
	t.Helper()
	if cfg.NATSURL == "" && cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.NATSURL != "" && cfg.Replicas == 0 {
		cfg.Replicas = 1 // the tests' external NATS is one server
	}
	if cfg.AdminToken == "" {
		cfg.AdminToken = testAdmin
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = time.Minute // long: nothing in a test ends by deadline unless it asks
	}
	if cfg.DrainSpread == 0 {
		cfg.DrainSpread = 50 * time.Millisecond
	}
	if cfg.DrainGrace == 0 {
		cfg.DrainGrace = 100 * time.Millisecond
	}
	lw := &testLogWriter{t: t}
	if cfg.Logger == nil {
		level := slog.LevelWarn
		if testing.Verbose() {
			level = slog.LevelDebug
		}
		cfg.Logger = slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: level}))
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatalf("hub.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	th := &testHub{Hub: h, t: t, cancel: cancel, done: make(chan error, 1)}
	go func() { th.done <- h.Run(ctx) }()
	select {
	case <-h.Ready():
	case err := <-th.done:
		cancel()
		t.Fatalf("hub.Run ended before ready: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("hub not ready after 30s")
	}
	th.srv = testutil.Serve(t, "", h.Handler())
	th.cl = hubclient.New(th.URL(), cfg.AdminToken)
	t.Cleanup(func() {
		th.stop()
		lw.mu.Lock()
		lw.done = true
		lw.mu.Unlock()
	})
	return th
}

// stop cancels Run, waits for it, and closes the listener.
func (th *testHub) stop() {
	th.once.Do(func() {
		th.cancel()
		select {
		case err := <-th.done:
			if err != nil {
				th.t.Errorf("hub.Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			th.t.Error("hub.Run did not return 30s after cancel")
		}
		th.srv.Close()
	})
}

func (th *testHub) Addr() string { return th.srv.Addr() }
func (th *testHub) URL() string  { return th.srv.URL() }

func (th *testHub) wsURL() string { return "ws://" + th.Addr() + relay.ConnectPath }

// enroll pairs and enrolls a new device for project.
func (th *testHub) enroll(project string) (devID, token string) {
	th.t.Helper()
	ctx := context.Background()
	pc, err := th.cl.Pair(ctx, project, 0)
	if err != nil {
		th.t.Fatalf("pair: %v", err)
	}
	en, err := th.cl.Enroll(ctx, pc.Code, "test-device", "linux", "")
	if err != nil {
		th.t.Fatalf("enroll: %v", err)
	}
	return en.DeviceID, en.Token
}

func (th *testHub) presence(id string) hubapi.Presence {
	th.t.Helper()
	d, err := th.cl.Device(context.Background(), id)
	if err != nil {
		th.t.Fatalf("device %s: %v", id, err)
	}
	return d.Presence
}

// waitFor is testutil.Eventually: one way to wait in every test package.
var waitFor = testutil.Eventually

func (th *testHub) waitState(id, state string) hubapi.Presence {
	th.t.Helper()
	var p hubapi.Presence
	waitFor(th.t, id+" "+state, func() bool { p = th.presence(id); return p.State == state })
	return p
}

// fakeAgent speaks the protocol with a raw gorilla client.
type fakeAgent struct {
	t       testing.TB
	conn    *websocket.Conn
	dev     string
	welcome *relay.Welcome

	wmu sync.Mutex // serializes writes: serve's answers and the test's own frames

	mu     sync.Mutex
	frames []relay.Frame // non-command frames seen by serve
	done   chan struct{}
	err    error // why serve ended
}

// deviceRecord reads dev's record from the bucket.
func (th *testHub) deviceRecord(dev string) *deviceRec {
	th.t.Helper()
	d, _, err := getJSON[deviceRec](context.Background(), th.st.devices, dev)
	if err != nil {
		th.t.Fatal(err)
	}
	return d
}

func dialRaw(url, token string, subprotocols []string) (*websocket.Conn, *http.Response, error) {
	d := websocket.Dialer{Subprotocols: subprotocols, HandshakeTimeout: 10 * time.Second}
	hdr := http.Header{}
	if token != "" {
		hdr.Set("Authorization", "Bearer "+token)
	}
	return d.Dial(url, hdr)
}

func mustEncode(t testing.TB, f relay.Frame) []byte {
	t.Helper()
	b, err := relay.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func helloFor(dev string) *relay.Hello {
	return &relay.Hello{Protocol: relay.ProtocolVersion, AgentVersion: "test", DeviceID: dev, OS: "linux",
		Policy: []relay.ProjectPolicy{{Project: "p1", Commands: []string{relay.CmdReadRoom}}}}
}

// dialAgent connects, says hello and reads welcome.
func dialAgent(t testing.TB, url, token, dev string) *fakeAgent {
	t.Helper()
	return dialAgentHello(t, url, token, helloFor(dev))
}

// dialAgentHello is dialAgent with a hello of the test's.
func dialAgentHello(t testing.TB, url, token string, hello *relay.Hello) *fakeAgent {
	t.Helper()
	a, err := dialAgentErr(t, url, token, hello)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// dialAgentErr is dialAgentHello returning its error, for goroutines other
// than the test's (which must not call t.Fatal).
func dialAgentErr(t testing.TB, url, token string, hello *relay.Hello) (*fakeAgent, error) {
	dev := hello.DeviceID
	conn, resp, err := dialRaw(url, token, []string{relay.Subprotocol})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		return nil, fmt.Errorf("dial: %w (status %d)", err, status)
	}
	a := &fakeAgent{t: t, conn: conn, dev: dev, done: make(chan struct{})}
	t.Cleanup(func() { conn.Close() })
	b, err := relay.Encode(hello)
	if err == nil {
		err = conn.WriteMessage(websocket.TextMessage, b)
	}
	if err != nil {
		return nil, fmt.Errorf("write hello: %w", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, data, err := conn.ReadMessage()
	if err != nil {
		return nil, fmt.Errorf("read welcome: %w", err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	f, err := relay.Decode(data, 0)
	if err != nil {
		return nil, fmt.Errorf("decode welcome: %w", err)
	}
	w, ok := f.(*relay.Welcome)
	if !ok {
		return nil, fmt.Errorf("first frame is %s, want welcome", f.FrameType())
	}
	a.welcome = w
	return a, nil
}

// echoHandler answers every command with its args.
func echoHandler(c *relay.Command) *relay.Result {
	if c.Name == relay.CmdReadRoomAppStatus {
		return &relay.Result{ID: c.ID, Error: relay.Errorf(relay.CodeCommandNotAllowed, "not allowed here")}
	}
	return &relay.Result{ID: c.ID, OK: true, Result: c.Args}
}

// serve answers commands with handle (nil result: no answer) until the
// connection ends. Pings are answered by gorilla while reading.
func (a *fakeAgent) serve(handle func(*relay.Command) *relay.Result) {
	go func() {
		defer close(a.done)
		for {
			_, data, err := a.conn.ReadMessage()
			if err != nil {
				a.mu.Lock()
				a.err = err
				a.mu.Unlock()
				return
			}
			f, err := relay.Decode(data, 0)
			if err != nil {
				a.mu.Lock()
				a.err = err
				a.mu.Unlock()
				return
			}
			cmd, ok := f.(*relay.Command)
			if !ok {
				a.mu.Lock()
				a.frames = append(a.frames, f)
				a.mu.Unlock()
				continue
			}
			go func() {
				res := handle(cmd)
				if res == nil {
					return
				}
				b, _ := relay.Encode(res)
				_ = a.write(b)
			}()
		}
	}()
}

// write sends one text frame; safe alongside serve's answers.
func (a *fakeAgent) write(b []byte) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return a.conn.WriteMessage(websocket.TextMessage, b)
}

// closeCode waits for serve to end and returns the close code the hub sent.
func (a *fakeAgent) closeCode() (int, string) {
	a.t.Helper()
	select {
	case <-a.done:
	case <-time.After(20 * time.Second):
		a.t.Fatal("agent connection still open after 20s")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var ce *websocket.CloseError
	if errors.As(a.err, &ce) {
		return ce.Code, ce.Text
	}
	return -1, fmt.Sprint(a.err)
}

// readClose reads until the hub closes and returns its close code.
func readClose(t testing.TB, conn *websocket.Conn) (int, string) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		_, _, err := conn.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code, ce.Text
		}
		return -1, err.Error()
	}
}

// command posts a command through th and returns the result and status.
func (th *testHub) command(dev string, req hubapi.CommandRequest) (*relay.Result, int) {
	th.t.Helper()
	res, status, err := th.cl.Command(context.Background(), dev, req)
	if err != nil {
		th.t.Fatalf("command: %v", err)
	}
	return res, status
}

// roundTrip asserts that an echo command comes back unchanged.
func (th *testHub) roundTrip(dev string) {
	th.t.Helper()
	args := json.RawMessage(`{"n":42,"s":"héllo"}`)
	res, status := th.command(dev, hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoom, Args: args})
	if status != http.StatusOK || !res.OK || string(res.Result) != string(args) {
		th.t.Fatalf("round trip: status %d result %+v (error %v)", status, res, res.Error)
	}
}

// startExternalNATS runs a separate nats-server with JetStream on a random
// loopback port, as a cluster would be to the hub.
func startExternalNATS(t testing.TB) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(20 * time.Second) {
		t.Fatal("external nats-server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns.ClientURL()
}

// cutOffPair is two nodes on one NATS server, node a reaching it through a
// proxy the test can cut, and a device whose session is on a.
type cutOffPair struct {
	a, b     *testHub
	ns       *server.Server
	px       *testutil.Proxy
	dev, tok string
	agent    *fakeAgent
}

func startCutOffPair(t *testing.T) cutOffPair {
	t.Helper()
	ns := startNATS(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	c := cutOffPair{ns: ns, px: testutil.NewProxy(t, ns.Addr().String())}
	c.a = startHub(t, Config{NATSURL: "nats://" + c.px.Addr(), NodeName: "a"})
	c.b = startHub(t, Config{NATSURL: ns.ClientURL(), NodeName: "b"})
	c.dev, c.tok = c.a.enroll("p1")
	c.agent = dialAgent(t, c.a.wsURL(), c.tok, c.dev)
	c.agent.serve(echoHandler)
	c.a.waitState(c.dev, hubapi.StateOnline)
	return c
}

// cut closes a's NATS connection, makes its redials reach nothing, and
// waits until a knows it is cut off.
func (c cutOffPair) cut(t *testing.T) {
	t.Helper()
	c.px.SetTarget(testutil.ClosedAddr(t))
	c.px.Reset()
	c.a.waitMetric("roomrelay_hub_nats_connected", "", 0)
}

// heal lets a's redials reach NATS again.
func (c cutOffPair) heal() { c.px.SetTarget(c.ns.Addr().String()) }
