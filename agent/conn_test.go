package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/relay"
)

func TestConnectHelloWelcomeAndCommandRoundTrip(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	var audits atomic.Int32
	a := newTestAgent(t, hub, "", func(c *Config) {
		c.OS = "testos"
		c.Policy = func() []relay.ProjectPolicy {
			return []relay.ProjectPolicy{{Project: "p1", Commands: []string{"echo"}}}
		}
		c.Audit = func(*relay.Command, *relay.Result, time.Duration, bool) { audits.Add(1) }
		c.Notes = []string{"no sandbox: test"}
	})
	a.Register("echo", func(ctx context.Context, cmd *relay.Command) (any, error) {
		var args map[string]any
		if err := json.Unmarshal(cmd.Args, &args); err != nil {
			return nil, err
		}
		return map[string]any{"echo": args["say"], "project": cmd.ProjectID}, nil
	})
	stop, _, _ := start(t, a)

	c := hub.next(t)
	if got := <-hub.auth; got != "Bearer tok-secret" {
		t.Errorf("Authorization = %q, want the bearer token", got)
	}
	h := <-hub.hellos
	if h.Protocol != relay.ProtocolVersion || h.DeviceID != "dev-1" || h.AgentVersion != "1.2.3" || h.OS != "testos" {
		t.Errorf("hello = %+v", h)
	}
	if len(h.Policy) != 1 || h.Policy[0].Project != "p1" || h.Policy[0].Commands[0] != "echo" {
		t.Errorf("hello policy = %+v", h.Policy)
	}
	eventually(t, "status online", func() bool { return a.Status().State == StateOnline })
	st := a.Status()
	if st.SessionID != "s1" || st.DeviceID != "dev-1" || st.ConnectedSince.IsZero() || st.PID == 0 {
		t.Errorf("status = %+v", st)
	}
	// Status() changes before the file is rewritten: wait for the file too.
	var fst Status
	var err error
	eventually(t, "status file online", func() bool {
		fst, err = ReadStatusFile(a.cfg.StateDir)
		return err == nil && fst.State == StateOnline
	})
	if fst.SessionID != "s1" || len(fst.Notes) != 1 || fst.Notes[0] != "no sandbox: test" {
		t.Errorf("status file = %+v", fst)
	}
	if m := fileMode(t, filepath.Join(a.cfg.StateDir, StatusFile)); m != 0o600 {
		t.Errorf("status file mode %v, want 0600", m)
	}

	c.send(command("c1", "echo", `{"say":"hi"}`))
	r := c.result(t)
	if r.ID != "c1" || !r.OK || r.Error != nil {
		t.Fatalf("result = %+v", r)
	}
	var got map[string]string
	if err := json.Unmarshal(r.Result, &got); err != nil || got["echo"] != "hi" || got["project"] != "p1" {
		t.Errorf("result body = %s (%v)", r.Result, err)
	}
	if audits.Load() != 1 {
		t.Errorf("audit calls = %d, want 1", audits.Load())
	}

	if err := stop(); err != nil {
		t.Errorf("Run = %v, want nil after cancel", err)
	}
	if code := c.closeCode(t); code != websocket.CloseNormalClosure {
		t.Errorf("close code = %d, want 1000", code)
	}
	if st := a.Status(); st.State != StateStopped {
		t.Errorf("state after stop = %q", st.State)
	}
	if fst, _ := ReadStatusFile(a.cfg.StateDir); fst.State != StateStopped {
		t.Errorf("status file after stop = %q", fst.State)
	}
}

func TestUnauthorizedIsNotRetried(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	hub.status = func(int) int { return http.StatusUnauthorized }
	a := newTestAgent(t, hub, "", nil)
	_, done, rerr := start(t, a)
	if err := runResult(t, done, rerr); !errors.Is(err, ErrNeedsEnrollment) {
		t.Fatalf("Run = %v, want ErrNeedsEnrollment", err)
	}
	if n := hub.dials.Load(); n != 1 {
		t.Errorf("dials = %d, want 1", n)
	}
	if st := a.Status(); st.State != StateNeedsEnrollment || !strings.Contains(st.LastError, "enroll") {
		t.Errorf("status = %+v", st)
	}
	if fst, err := ReadStatusFile(a.cfg.StateDir); err != nil || fst.State != StateNeedsEnrollment {
		t.Errorf("status file = %+v, %v", fst, err)
	}
}

func TestCloseReplacedReconnects(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	a := newTestAgent(t, hub, "", nil)
	start(t, a)
	c1 := hub.next(t)
	c1.closeWith(relay.CloseReplaced, "replaced by a newer session")
	hub.next(t)
	eventually(t, "online again", func() bool { return a.Status().State == StateOnline })
	if st := a.Status(); !strings.Contains(st.LastError, "replaced") || st.Reconnects != 1 {
		t.Errorf("status = %+v", st)
	}
}

func TestCloseRevokedNeedsEnrollment(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	a := newTestAgent(t, hub, "", nil)
	_, done, rerr := start(t, a)
	c1 := hub.next(t)
	c1.closeWith(relay.CloseRevoked, "device revoked")
	if err := runResult(t, done, rerr); !errors.Is(err, ErrNeedsEnrollment) {
		t.Fatalf("Run = %v, want ErrNeedsEnrollment", err)
	}
	if st := a.Status(); st.State != StateNeedsEnrollment {
		t.Errorf("state = %q", st.State)
	}
	if n := hub.dials.Load(); n != 1 {
		t.Errorf("dials = %d, want 1", n)
	}
}

func TestCloseVersionStops(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	hub.noWelcome.Store(true)
	a := newTestAgent(t, hub, "", nil)
	_, done, rerr := start(t, a)
	c1 := hub.next(t)
	c1.closeWith(relay.CloseVersion, "agent speaks protocol 1, hub speaks 2: upgrade the older side")
	if err := runResult(t, done, rerr); !errors.Is(err, ErrProtocolVersion) || !strings.Contains(err.Error(), "hub speaks 2") {
		t.Fatalf("Run = %v, want ErrProtocolVersion with the hub's reason", err)
	}
	if st := a.Status(); st.State != StateError {
		t.Errorf("state = %q", st.State)
	}
}

func TestHubRestartBackOnline(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	// Dial 1 works; the "restarting" hub refuses dials 2–3; dial 4 works.
	hub.status = func(n int) int {
		if n == 2 || n == 3 {
			return http.StatusBadGateway
		}
		return 0
	}
	a := newTestAgent(t, hub, "", nil)
	start(t, a)
	c1 := hub.next(t)
	c1.ws.UnderlyingConn().Close() // the process died: no close frame
	c4 := hub.next(t)
	if c4.n != 4 {
		t.Errorf("connected on dial %d, want 4", c4.n)
	}
	eventually(t, "online again", func() bool { return a.Status().State == StateOnline })
}

func TestSilentLossIsNoticedWithinTheReadDeadline(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	hub.heartbeatMS.Store(100)
	a := newTestAgent(t, hub, "", nil)
	start(t, a)
	c1 := hub.next(t)
	// Pings are answered for a while: the connection stays up.
	eventually(t, "online", func() bool { return a.Status().State == StateOnline })
	c1.frozen.Store(true) // the hub stops answering pings and sends nothing
	c2 := hub.next(t)
	if c2.n != 2 {
		t.Errorf("reconnected on dial %d", c2.n)
	}
	eventually(t, "online again", func() bool { return a.Status().Reconnects == 1 })
	if st := a.Status(); !strings.Contains(st.LastError, "read deadline") {
		t.Errorf("last error = %q, want it to name the read deadline", st.LastError)
	}
}

func TestHeartbeatKeepsAQuietConnectionUp(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	hub.heartbeatMS.Store(100)
	a := newTestAgent(t, hub, "", nil)
	start(t, a)
	c1 := hub.next(t)
	// Let several read deadlines (250 ms) pass with only pings and pongs.
	for range 10 {
		time.Sleep(100 * time.Millisecond)
		select {
		case <-c1.done:
			t.Fatalf("connection ended: %v", c1.err)
		default:
		}
	}
	if n := hub.dials.Load(); n != 1 {
		t.Errorf("dials = %d, want 1", n)
	}
}

func TestEventsQueuedOfflineAreSentInOrderAfterReconnect(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	var open atomic.Bool
	hub.status = func(int) int {
		if open.Load() {
			return 0
		}
		return http.StatusServiceUnavailable
	}
	dir := t.TempDir()
	a := newTestAgent(t, hub, dir, nil)
	stop, _, _ := start(t, a)
	eventually(t, "a failed dial", func() bool { return hub.dials.Load() >= 1 })
	for _, name := range []string{"e1", "e2"} {
		if err := a.SendEvent(context.Background(), relay.Event{Event: name, Data: json.RawMessage(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// The queue survives an agent restart.
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if m := fileMode(t, filepath.Join(dir, OutboxFile)); m != 0o600 {
		t.Errorf("outbox mode %v", m)
	}
	b := newTestAgent(t, hub, dir, nil)
	if st := b.Status(); st.QueuedEvents != 2 {
		t.Errorf("queued after restart = %d, want 2", st.QueuedEvents)
	}
	if err := b.SendEvent(context.Background(), relay.Event{Event: "e3"}); err != nil {
		t.Fatal(err)
	}
	start(t, b)
	open.Store(true)
	c := hub.next(t)
	for _, want := range []string{"e1", "e2", "e3"} {
		ev, ok := c.frame(t).(*relay.Event)
		if !ok || ev.Event != want || ev.Time.IsZero() {
			t.Fatalf("got %+v, want event %s", ev, want)
		}
	}
	eventually(t, "queue empty", func() bool { return b.Status().QueuedEvents == 0 })
	// Online, an event goes straight out.
	if err := b.SendEvent(context.Background(), relay.Event{Event: "e4"}); err != nil {
		t.Fatal(err)
	}
	if ev, ok := c.frame(t).(*relay.Event); !ok || ev.Event != "e4" {
		t.Fatalf("got %+v, want e4", ev)
	}
}

func TestOutboxIsBounded(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	a := newTestAgent(t, hub, "", func(c *Config) { c.MaxQueuedEvents = 2 })
	ctx := context.Background()
	for range 2 {
		if err := a.SendEvent(ctx, relay.Event{Event: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.SendEvent(ctx, relay.Event{Event: "x"}); !errors.Is(err, ErrOutboxFull) {
		t.Fatalf("third event: %v, want ErrOutboxFull", err)
	}
}

func TestShutdownLetsInFlightCommandsAnswer(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	a := newTestAgent(t, hub, "", nil)
	started := make(chan struct{})
	a.Register("slow", func(ctx context.Context, cmd *relay.Command) (any, error) {
		close(started)
		time.Sleep(50 * time.Millisecond) // finishes within the shutdown grace
		return "done", nil
	})
	stop, _, _ := start(t, a)
	c := hub.next(t)
	c.send(command("c1", "slow", ""))
	<-started
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if r := c.result(t); !r.OK || string(r.Result) != `"done"` {
		t.Errorf("result = %+v", r)
	}
	if code := c.closeCode(t); code != websocket.CloseNormalClosure {
		t.Errorf("close code = %d", code)
	}
}

func TestShutdownCancelsACommandThatOutlivesTheGrace(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	a := newTestAgent(t, hub, "", func(c *Config) { c.ShutdownGrace = 50 * time.Millisecond })
	started := make(chan struct{})
	a.Register("forever", func(ctx context.Context, cmd *relay.Command) (any, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	stop, _, _ := start(t, a)
	c := hub.next(t)
	c.send(command("c1", "forever", ""))
	<-started
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if n := a.cmds.inFlight(); n != 0 {
		t.Errorf("in flight after Run = %d", n)
	}
}

func TestRunEndsAllGoroutines(t *testing.T) {
	hub := newTestHub(t)
	hub.heartbeatMS.Store(50)
	base := runtime.NumGoroutine()
	a := newTestAgent(t, hub, "", nil)
	a.Register("echo", func(ctx context.Context, cmd *relay.Command) (any, error) { return 1, nil })
	stop, _, _ := start(t, a)
	c := hub.next(t)
	c.send(command("c1", "echo", ""))
	c.result(t)
	if err := a.SendEvent(context.Background(), relay.Event{Event: "e"}); err != nil {
		t.Fatal(err)
	}
	c.frame(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	c.closeCode(t)
	// The hub's per-connection reader has ended too (closeCode waited for it).
	eventually(t, "goroutines back to baseline", func() bool { return runtime.NumGoroutine() <= base })
}

func TestConnectURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want, err string
	}{
		{"https://hub.example.com", "wss://hub.example.com/v1/agent/connect", ""},
		{"https://hub.example.com/base/", "wss://hub.example.com/base/v1/agent/connect", ""},
		{"wss://hub.example.com:8443", "wss://hub.example.com:8443/v1/agent/connect", ""},
		{"http://127.0.0.1:8080", "ws://127.0.0.1:8080/v1/agent/connect", ""},
		{"ws://localhost:1", "ws://localhost:1/v1/agent/connect", ""},
		{"http://[::1]:9", "ws://[::1]:9/v1/agent/connect", ""},
		{"http://hub.example.com", "", "not encrypted"},
		{"ws://10.0.0.1", "", "not encrypted"},
		{"ftp://hub.example.com", "", "scheme"},
		{"hub.example.com", "", "no host"},
		{"https://user:pw@hub.example.com", "", "credentials"},
	} {
		got, err := ConnectURL(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ConnectURL(%q) = %q, %v; want error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ConnectURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	_, err := New(Config{HubURL: "http://hub.example.com", StateDir: t.TempDir()})
	if err == nil {
		t.Fatal("New accepted a plain-http remote hub and no identity")
	}
	for _, want := range []string{"not encrypted", "device id", "token"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestReadStatusFileMissing(t *testing.T) {
	t.Parallel()
	if _, err := ReadStatusFile(t.TempDir()); err == nil {
		t.Fatal("no error for a missing status file")
	}
}
