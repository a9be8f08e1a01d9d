package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/relay"

	"github.com/roomrelay/roomrelay/internal/testutil"
)

// waitFor is the generous overall bound for anything a test waits on. Tests
// never assert elapsed time; this only keeps a broken test from hanging.
const waitFor = 10 * time.Second

// ---- a scripted hub ----

// testHub is a small websocket server speaking the relay protocol, driven by
// the test: it answers each dial with an HTTP status or an upgrade, reads
// hello, optionally sends welcome, and hands the connection to the test.
type testHub struct {
	t   testing.TB
	srv *httptest.Server

	dials atomic.Int32
	// status, if set, decides the HTTP status for dial n (1-based); 0 upgrades.
	status      func(n int) int
	heartbeatMS atomic.Int64
	noWelcome   atomic.Bool

	auth   chan string
	hellos chan *relay.Hello
	conns  chan *hubConn

	mu  sync.Mutex
	all []*hubConn
}

type hubConn struct {
	t      testing.TB
	ws     *websocket.Conn
	n      int
	frames chan relay.Frame
	done   chan struct{} // reader ended
	err    error         // why, set before done closes
	frozen atomic.Bool
}

func newTestHub(t testing.TB) *testHub {
	t.Helper()
	h := &testHub{
		t:      t,
		auth:   make(chan string, 100),
		hellos: make(chan *relay.Hello, 100),
		conns:  make(chan *hubConn, 100),
	}
	h.heartbeatMS.Store(25000)
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(func() {
		h.mu.Lock()
		for _, c := range h.all {
			c.ws.Close()
		}
		h.mu.Unlock()
		h.srv.Close()
	})
	return h
}

func (h *testHub) serve(w http.ResponseWriter, r *http.Request) {
	n := int(h.dials.Add(1))
	if r.URL.Path != relay.ConnectPath {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	select { // never block a handler: httptest.Close waits for them
	case h.auth <- r.Header.Get("Authorization"):
	default:
	}
	if h.status != nil {
		if code := h.status(n); code != 0 {
			if code == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="roomrelay"`)
			}
			http.Error(w, http.StatusText(code), code)
			return
		}
	}
	up := websocket.Upgrader{Subprotocols: []string{relay.Subprotocol}}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	ws.SetReadDeadline(time.Now().Add(waitFor))
	_, data, err := ws.ReadMessage()
	if err != nil {
		ws.Close()
		return
	}
	ws.SetReadDeadline(time.Time{})
	f, err := relay.Decode(data, 0)
	hello, ok := f.(*relay.Hello)
	if err != nil || !ok {
		ws.Close()
		return
	}
	select {
	case h.hellos <- hello:
	default:
	}
	c := &hubConn{t: h.t, ws: ws, n: n, frames: make(chan relay.Frame, 100), done: make(chan struct{})}
	h.mu.Lock()
	h.all = append(h.all, c)
	h.mu.Unlock()
	if !h.noWelcome.Load() {
		c.send(&relay.Welcome{SessionID: fmt.Sprintf("s%d", n), HeartbeatMS: h.heartbeatMS.Load(), ServerTime: time.Now()})
	}
	ws.SetPingHandler(func(msg string) error {
		if c.frozen.Load() {
			return nil // silent loss: no pong
		}
		return ws.WriteControl(websocket.PongMessage, []byte(msg), time.Now().Add(time.Second))
	})
	go c.read()
	h.conns <- c
}

func (h *testHub) url() string { return h.srv.URL }

// next returns the next connection that got past hello.
func (h *testHub) next(t testing.TB) *hubConn {
	t.Helper()
	select {
	case c := <-h.conns:
		return c
	case <-time.After(waitFor):
		t.Fatalf("no connection from the agent (dials so far: %d)", h.dials.Load())
		return nil
	}
}

func (c *hubConn) read() {
	defer close(c.done)
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			c.err = err
			return
		}
		f, err := relay.Decode(data, 0)
		if err != nil {
			c.err = err
			return
		}
		c.frames <- f
	}
}

var hubWriteMu sync.Mutex // test hub writes come from the test goroutine and handler

func (c *hubConn) send(f relay.Frame) {
	b, err := relay.Encode(f)
	if err != nil {
		c.t.Errorf("encode: %v", err)
		return
	}
	hubWriteMu.Lock()
	defer hubWriteMu.Unlock()
	if err := c.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		c.t.Logf("hub write: %v", err)
	}
}

func (c *hubConn) closeWith(code int, reason string) {
	c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
}

// frame returns the next frame the agent sent on this connection.
func (c *hubConn) frame(t testing.TB) relay.Frame {
	t.Helper()
	select {
	case f := <-c.frames:
		return f
	case <-c.done:
		// Frames read before the close may still be buffered.
		select {
		case f := <-c.frames:
			return f
		default:
		}
		t.Fatalf("connection %d ended while waiting for a frame: %v", c.n, c.err)
	case <-time.After(waitFor):
		t.Fatalf("no frame from the agent on connection %d", c.n)
	}
	return nil
}

// result returns the next result frame, skipping events.
func (c *hubConn) result(t testing.TB) *relay.Result {
	t.Helper()
	for {
		if r, ok := c.frame(t).(*relay.Result); ok {
			return r
		}
	}
}

// closeCode waits for the connection to end and returns the agent's close code.
func (c *hubConn) closeCode(t testing.TB) int {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(waitFor):
		t.Fatalf("connection %d did not end", c.n)
	}
	var ce *websocket.CloseError
	if errors.As(c.err, &ce) {
		return ce.Code
	}
	return -1
}

func command(id, name string, args string) *relay.Command {
	c := &relay.Command{ID: id, ProjectID: "p1", Name: name, Deadline: time.Now().Add(time.Minute)}
	if args != "" {
		c.Args = json.RawMessage(args)
	}
	return c
}

// ---- agents under test ----

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func newTestAgent(t testing.TB, hub *testHub, dir string, mut func(*Config)) *Agent {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	cfg := Config{
		HubURL:   hub.url(),
		DeviceID: "dev-1",
		Token:    "tok-secret",
		StateDir: dir,
		Version:  "1.2.3",
		Backoff:  Backoff{Base: 5 * time.Millisecond, Cap: 20 * time.Millisecond, ResetAfter: time.Hour},
		Logger:   testLogger(t),
	}
	if mut != nil {
		mut(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return a
}

// start runs a in the background. stop cancels it and returns Run's error;
// done is closed when Run returned by itself or not, and err is then valid.
func start(t testing.TB, a *Agent) (stop func() error, done <-chan struct{}, err func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan struct{})
	var runErr error
	go func() { runErr = a.Run(ctx); close(ch) }()
	err = func() error { <-ch; return runErr }
	stop = func() error {
		cancel()
		select {
		case <-ch:
		case <-time.After(waitFor):
			t.Fatal("Run did not return after cancel")
		}
		return runErr
	}
	t.Cleanup(func() { stop() })
	return stop, ch, err
}

// runResult waits for Run to return by itself.
func runResult(t testing.TB, done <-chan struct{}, err func() error) error {
	t.Helper()
	select {
	case <-done:
		return err()
	case <-time.After(waitFor):
		t.Fatal("Run did not return by itself")
		return nil
	}
}

// eventually is testutil.Eventually: one way to wait in every test package.
var eventually = testutil.Eventually

// fileMode is path's permission bits; 0600 on Windows, which has none (Go
// says 0666 for every writable file): there the folder's ACL decides.
func fileMode(t testing.TB, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "windows" {
		return 0o600
	}
	return st.Mode().Perm()
}

// ---- a fake clock ----

// fakeClock moves only when the test says so; its timers fire only in Advance. Advance moves the wall and the
// monotonic clock together; JumpWall moves only the wall clock, as a wake
// from sleep does.
type fakeClock struct {
	mu      sync.Mutex
	wall    time.Time
	mono    time.Duration
	timers  []*fakeTimer
	tickers []*fakeTicker
	created chan time.Duration // the duration of every NewTimer
}

func newFakeClock() *fakeClock {
	return &fakeClock{wall: time.Now().Round(0), created: make(chan time.Duration, 1000)}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wall
}

func (f *fakeClock) Monotonic() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mono
}

func (f *fakeClock) After(d time.Duration) <-chan time.Time { return f.NewTimer(d).C() }

func (f *fakeClock) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	// Even a zero timer waits for the test's next Advance, so the agent can
	// never run ahead of the test.
	t := &fakeTimer{clk: f, c: make(chan time.Time, 1), at: f.mono + d}
	f.timers = append(f.timers, t)
	f.mu.Unlock()
	f.created <- d
	return t
}

func (f *fakeClock) NewTicker(d time.Duration) Ticker {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTicker{clk: f, c: make(chan time.Time, 1), period: d, next: f.mono + d}
	f.tickers = append(f.tickers, t)
	return t
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wall = f.wall.Add(d)
	f.mono += d
	keep := f.timers[:0]
	for _, t := range f.timers {
		if t.stopped {
			continue
		}
		if t.at <= f.mono {
			t.fired = true
			t.c <- f.wall
			continue
		}
		keep = append(keep, t)
	}
	f.timers = keep
	for _, t := range f.tickers {
		if !t.stopped && t.next <= f.mono {
			t.next = f.mono + t.period
			select {
			case t.c <- f.wall:
			default:
			}
		}
	}
}

func (f *fakeClock) JumpWall(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wall = f.wall.Add(d)
}

// Tick fires every live ticker once, as if its period had passed on the
// monotonic clock (which a sleeping machine does not advance).
func (f *fakeClock) Tick() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.tickers {
		if !t.stopped {
			select {
			case t.c <- f.wall:
			default:
			}
		}
	}
}

// nextTimer returns the duration of the next timer the agent creates.
func (f *fakeClock) nextTimer(t testing.TB) time.Duration {
	t.Helper()
	select {
	case d := <-f.created:
		return d
	case <-time.After(waitFor):
		t.Fatal("the agent created no timer")
		return 0
	}
}

type fakeTimer struct {
	clk     *fakeClock
	c       chan time.Time
	at      time.Duration
	stopped bool
	fired   bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }
func (t *fakeTimer) Stop() bool {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	was := !t.stopped && !t.fired
	t.stopped = true
	return was
}

type fakeTicker struct {
	clk     *fakeClock
	c       chan time.Time
	period  time.Duration
	next    time.Duration
	stopped bool
}

func (t *fakeTicker) C() <-chan time.Time { return t.c }
func (t *fakeTicker) Stop() {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	t.stopped = true
}
