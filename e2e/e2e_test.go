// Package e2e runs the real hub and the real device agent together over
// loopback websockets, on embedded and on external NATS.
package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/notify"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/internal/testutil/testhub"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hub/mcpfront"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

const adminToken = "rra_e2e-admin"

func logger(t testing.TB) *slog.Logger {
	if os.Getenv("E2E_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// runningHub is a hub started for a test.
type runningHub struct {
	*testhub.Hub
	client *hubclient.Client
}

// stop stops the hub (it drains its agents), then its listener.
func (r *runningHub) stop(testing.TB) { r.Stop() }

func startHub(t testing.TB, cfg hub.Config) *runningHub { return startHubAt(t, cfg, "") }

// startHubAt serves the hub (and its MCP front) on addr ("" for any port).
func startHubAt(t testing.TB, cfg hub.Config, addr string) *runningHub {
	return startHubFront(t, cfg, addr, mcpfront.Config{})
}

// startHubFront is startHubAt with the MCP front's config. Unless set, the
// front's per-token rate is high (tests make many calls) and its progress
// interval short.
func startHubFront(t testing.TB, cfg hub.Config, addr string, fcfg mcpfront.Config) *runningHub {
	t.Helper()
	cfg.AdminToken = adminToken
	if cfg.NATSURL != "" && cfg.Replicas == 0 {
		cfg.Replicas = 1 // externalNATS is one server
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 2 * time.Second
	}
	if cfg.DrainSpread == 0 {
		cfg.DrainSpread = 50 * time.Millisecond
	}
	if cfg.DrainGrace == 0 {
		cfg.DrainGrace = 200 * time.Millisecond
	}
	cfg.Logger = logger(t)
	if fcfg.TokenRate == 0 {
		fcfg.TokenRate, fcfg.TokenBurst = 1_000_000, 100_000
	}
	if fcfg.ProgressEvery == 0 {
		fcfg.ProgressEvery = 200 * time.Millisecond
	}
	th := testhub.Start(t, cfg, testhub.Options{Addr: addr, Handler: func(h *hub.Hub) http.Handler { return mountHub(h, fcfg) }})
	return &runningHub{Hub: th, client: hubclient.New(th.URL(), adminToken)}
}

// device is an enrolled agent with its own directories.
type device struct {
	id, token string
	home      string
	d         *daemon.Daemon
	cancel    context.CancelFunc
	done      chan error
}

func (dv *device) policyPath() string { return filepath.Join(dv.home, "config", daemon.PolicyFile) }

// enable edits the owner's policy file, as `roomrelay enable` does.
func (dv *device) enable(t testing.TB, project string, commands ...string) {
	t.Helper()
	p, err := allowlist.Load(dv.policyPath())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Enable(project, commands, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Save(dv.policyPath()); err != nil {
		t.Fatal(err)
	}
}

func enroll(t testing.TB, h *runningHub, project string) *device {
	t.Helper()
	ctx := context.Background()
	pc, err := h.client.Pair(ctx, project, 0)
	if err != nil {
		t.Fatal(err)
	}
	enr, err := hubclient.New(h.URL(), "").Enroll(ctx, pc.Code, "e2e-laptop", "linux", "")
	if err != nil {
		t.Fatal(err)
	}
	return &device{id: enr.DeviceID, token: enr.Token, home: t.TempDir()}
}

// start opens and runs the device's daemon against hubURL.
func (dv *device) start(t testing.TB, hubURL string) {
	t.Helper()
	d, err := daemon.Open(context.Background(), daemon.Config{
		ConfigDir: filepath.Join(dv.home, "config"), StateDir: filepath.Join(dv.home, "state"), DataDir: filepath.Join(dv.home, "data"),
		HubURL: hubURL, DeviceID: dv.id, Token: dv.token, Version: "e2e", OS: "linux", Logger: logger(t),
		Tick: 50 * time.Millisecond,
		// No desktop notifications from tests on a developer's machine.
		Notifier: notify.Func(func(context.Context, notify.Note) error { return nil }),
		Agent: func(c *agent.Config) {
			c.Backoff = agent.Backoff{Base: 20 * time.Millisecond, Cap: 200 * time.Millisecond, ResetAfter: time.Second}
			c.ShutdownGrace = 500 * time.Millisecond
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	dv.d, dv.cancel, dv.done = d, cancel, make(chan error, 1)
	go func() { dv.done <- d.Run(ctx) }()
	t.Cleanup(func() { dv.stop(t) })
}

func (dv *device) stop(t testing.TB) error {
	if dv.d == nil {
		return nil
	}
	dv.cancel()
	var err error
	select {
	case err = <-dv.done:
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not stop")
	}
	dv.d.Close()
	dv.d = nil
	return err
}

// eventually is testutil.Eventually: one way to wait in every test package.
var eventually = testutil.Eventually

func presence(t testing.TB, h *runningHub, id string) string {
	t.Helper()
	d, err := h.client.Device(context.Background(), id)
	if err != nil {
		t.Fatalf("device %s: %v", id, err)
	}
	return d.Presence.State
}

func waitState(t testing.TB, h *runningHub, id, state string) {
	t.Helper()
	eventually(t, "device "+state, func() bool { return presence(t, h, id) == state })
}

func call(t testing.TB, h *runningHub, dev, project, name string, args any) (*relay.Result, int) {
	t.Helper()
	raw, _ := json.Marshal(args)
	res, status, err := h.client.Command(context.Background(), dev, hubapi.CommandRequest{ProjectID: project, Name: name, Args: raw, TimeoutMS: 10000})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	// A real device's result matches the command's published result
	// schema (relay/schemas/NAME.result.json, the MCP outputSchema).
	if _, bench := t.(*testing.B); !bench && res.OK && relay.KnownCommand(name) {
		if err := relay.ValidateResult(name, res.Result); err != nil {
			t.Errorf("%s: the result does not match its result schema: %v\nresult: %s", name, err, res.Result)
		}
	}
	return res, status
}

func seedRoom(t testing.TB, dv *device, project, room string) {
	t.Helper()
	ctx := context.Background()
	s := dv.d.Store()
	if _, err := s.CreateProject(ctx, project, project); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRoom(ctx, rooms.NewRoom{ID: room, ProjectID: project, Name: "Standup"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddApp(ctx, rooms.NewApp{ProjectID: project, RoomID: room, Name: "Timer", Source: rooms.SourceSnippet,
		Files: map[string]string{"src/App.tsx": "export default function App(){return null}"}}); err != nil {
		t.Fatal(err)
	}
}

// externalNATS starts a separate nats-server with JetStream on a loopback port.
func externalNATS(t testing.TB) string {
	t.Helper()
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

// TestRoundTrip: connect, hello/welcome, command round trip through the hub,
// clean close → offline at once. Run on embedded and on external NATS.
func TestRoundTrip(t *testing.T) {
	for _, mode := range []string{"embedded", "external"} {
		t.Run(mode, func(t *testing.T) {
			cfg := hub.Config{DataDir: t.TempDir(), Heartbeat: time.Minute}
			if mode == "external" {
				cfg.NATSURL = externalNATS(t)
			}
			h := startHub(t, cfg)
			dv := enroll(t, h, "proj-a")
			dv.enable(t, "proj-a")
			dv.start(t, h.URL())
			seedRoom(t, dv, "proj-a", "room-1")
			waitState(t, h, dv.id, hubapi.StateOnline)

			d, err := h.client.Device(context.Background(), dv.id)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Policy) != 1 || d.Policy[0].Project != "proj-a" || d.AgentVersion != "e2e" {
				t.Fatalf("hello did not reach the hub: %+v", d)
			}
			res, status := call(t, h, dv.id, "proj-a", relay.CmdReadRoom, map[string]string{"room_id": "room-1"})
			if !res.OK || status != 200 {
				t.Fatalf("read_room: %d %+v", status, res.Error)
			}
			var rr rooms.RoomSummary
			if err := json.Unmarshal(res.Result, &rr); err != nil || rr.ID != "room-1" || rr.AppCount != 1 || rr.Kind != "local" {
				t.Fatalf("read_room result %s (%v)", res.Result, err)
			}
			// A heartbeat of a minute means only the clean close can make it
			// offline before the test's limit.
			if err := dv.stop(t); err != nil {
				t.Fatalf("agent Run: %v", err)
			}
			waitState(t, h, dv.id, hubapi.StateOffline)
			res, status = call(t, h, dv.id, "proj-a", relay.CmdReadRoom, map[string]string{"room_id": "room-1"})
			if res.OK || res.Error.Code != relay.CodeDeviceOffline || status != 503 {
				t.Fatalf("offline device: %d %+v", status, res.Error)
			}
		})
	}
}

// TestSilentLossAndRecovery: a proxy that stops forwarding bytes (no FIN, no
// RST). The hub marks the device offline within its read deadline; when the
// network comes back the agent is online again by itself.
func TestSilentLossAndRecovery(t *testing.T) {
	h := startHub(t, hub.Config{DataDir: t.TempDir(), Heartbeat: 150 * time.Millisecond})
	proxy := testutil.NewProxy(t, strings.TrimPrefix(h.URL(), "http://"))
	dv := enroll(t, h, "proj-a")
	dv.start(t, "http://"+proxy.Addr())
	waitState(t, h, dv.id, hubapi.StateOnline)
	first := mustDevice(t, h, dv.id).Presence.Session

	proxy.Blackhole(true)
	waitState(t, h, dv.id, hubapi.StateOffline)
	proxy.Blackhole(false)
	proxy.Reset() // connections made while blackholed are half-dead
	eventually(t, "a new session", func() bool {
		p := mustDevice(t, h, dv.id).Presence
		return p.State == hubapi.StateOnline && p.Session != first
	})
}

func mustDevice(t testing.TB, h *runningHub, id string) *hubapi.Device {
	t.Helper()
	d, err := h.client.Device(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestHubRestart: the hub goes away and comes back on the same address and
// data dir; the agent reconnects by itself and commands work again.
func TestHubRestart(t *testing.T) {
	dir, addr := t.TempDir(), freeLoopbackAddr(t)
	h := startHubAt(t, hub.Config{DataDir: dir}, addr)
	dv := enroll(t, h, "proj-a")
	dv.enable(t, "proj-a")
	dv.start(t, h.URL())
	seedRoom(t, dv, "proj-a", "room-1")
	waitState(t, h, dv.id, hubapi.StateOnline)

	h.stop(t)
	h2 := startHubAt(t, hub.Config{DataDir: dir}, addr)
	waitState(t, h2, dv.id, hubapi.StateOnline)
	res, _ := call(t, h2, dv.id, "proj-a", relay.CmdReadRoom, map[string]string{"room_id": "room-1"})
	if !res.OK {
		t.Fatalf("after restart: %+v", res.Error)
	}
	if st := dv.d.Agent().Status(); st.Reconnects < 1 {
		t.Fatalf("agent status shows %d reconnects", st.Reconnects)
	}
}

// TestRevokeStopsAgent: a revoked device is disconnected and its agent stops
// with needs_enrollment instead of retrying.
func TestRevokeStopsAgent(t *testing.T) {
	h := startHub(t, hub.Config{DataDir: t.TempDir()})
	dv := enroll(t, h, "proj-a")
	dv.start(t, h.URL())
	waitState(t, h, dv.id, hubapi.StateOnline)
	if _, err := h.client.Revoke(context.Background(), dv.id); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-dv.done:
		if !errors.Is(err, agent.ErrNeedsEnrollment) {
			t.Fatalf("agent ended with %v, want ErrNeedsEnrollment", err)
		}
		dv.done <- err // for stop()
	case <-time.After(30 * time.Second):
		t.Fatal("agent kept running after revoke")
	}
	if st := dv.d.Agent().Status(); st.State != agent.StateNeedsEnrollment {
		t.Fatalf("status %q", st.State)
	}
}

// mountHub is what `roomrelay hub` serves: the MCP front and the hub.
func mountHub(h *hub.Hub, fcfg mcpfront.Config) http.Handler {
	fcfg.Hub = h
	fcfg.Logger = slog.New(slog.DiscardHandler)
	front, err := mcpfront.New(fcfg)
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	front.Mount(mux)
	mux.Handle("/", h.Handler())
	return mux
}

// freeLoopbackAddr is a loopback address free now, for a hub that restarts
// on the same address.
func freeLoopbackAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
