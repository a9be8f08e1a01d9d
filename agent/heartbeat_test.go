package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
)

// Heartbeat timing in virtual time: the agent and a minimal hub run inside a
// synctest bubble, connected through an in-memory listener (no sockets), so
// read deadlines and ping tickers fire on the bubble's exact fake clock.

// pipeHub is the smallest hub the heartbeat needs: it upgrades, reads hello,
// sends welcome with its heartbeat, then answers pings (until silenced) and
// records when each one arrived.
type pipeHub struct {
	hbMS      int64
	pingEvery time.Duration // the hub pings at this interval when > 0, as relay/hub does
	ln        *testutil.PipeListener
	dials     atomic.Int32
	conns     chan *pipeConn
	gone      chan struct{} // closed at cleanup: handlers stop handing out conns
}

type pipeConn struct {
	n      int
	at     time.Time // welcome sent
	silent atomic.Bool
	pongs  atomic.Int32  // answers to the hub's pings
	done   chan struct{} // the agent's side went away
	endAt  time.Time     // when; set before done closes

	mu       sync.Mutex
	pings    []time.Time
	lastSent time.Time // welcome or the last pong
}

// newPipeHub serves a hub asking for heartbeatMS on an in-memory listener;
// call it inside the bubble.
func newPipeHub(t *testing.T, heartbeatMS int64) *pipeHub {
	h := &pipeHub{hbMS: heartbeatMS, ln: testutil.NewPipeListener(), conns: make(chan *pipeConn, 16), gone: make(chan struct{})}
	srv := &http.Server{Handler: h}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(h.ln) }()
	t.Cleanup(func() {
		close(h.gone)
		srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("hub Serve = %v", err)
		}
	})
	return h
}

func (h *pipeHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := int(h.dials.Add(1))
	up := websocket.Upgrader{Subprotocols: []string{relay.Subprotocol}}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer ws.Close()
	_, data, err := ws.ReadMessage()
	if err != nil {
		return
	}
	if f, err := relay.Decode(data, 0); err != nil {
		return
	} else if _, ok := f.(*relay.Hello); !ok {
		return
	}
	b, _ := relay.Encode(&relay.Welcome{SessionID: fmt.Sprintf("s%d", n), HeartbeatMS: h.hbMS, ServerTime: time.Now()})
	if ws.WriteMessage(websocket.TextMessage, b) != nil {
		return
	}
	c := &pipeConn{n: n, at: time.Now(), lastSent: time.Now(), done: make(chan struct{})}
	ws.SetPingHandler(func(msg string) error {
		silent := c.silent.Load()
		c.mu.Lock()
		c.pings = append(c.pings, time.Now())
		if !silent {
			c.lastSent = time.Now()
		}
		c.mu.Unlock()
		if silent {
			return nil // a silent loss: no pong, nothing else either
		}
		return ws.WriteControl(websocket.PongMessage, []byte(msg), time.Now().Add(time.Second))
	})
	ws.SetPongHandler(func(string) error { c.pongs.Add(1); return nil })
	if h.pingEvery > 0 {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			t := time.NewTicker(h.pingEvery)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					if ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second)) != nil {
						return
					}
				}
			}
		}()
	}
	select {
	case h.conns <- c:
	case <-h.gone: // a failing test left connections unclaimed
		return
	}
	for { // only control frames are expected; read until the agent goes
		if _, _, err := ws.ReadMessage(); err != nil {
			break
		}
	}
	c.endAt = time.Now()
	close(c.done)
}

// next returns the next connection past hello, failing after a virtual minute.
func (h *pipeHub) next(t *testing.T) *pipeConn {
	t.Helper()
	select {
	case c := <-h.conns:
		return c
	case <-time.After(time.Minute):
		t.Fatalf("no connection from the agent (dials: %d)", h.dials.Load())
		return nil
	}
}

func (c *pipeConn) snapshot() (pings []time.Time, lastSent time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.pings...), c.lastSent
}

// startPipeAgent runs an agent that dials h through its listener (Config.Dial
// is the seam: the URL's host is never resolved). Backoff is always exactly
// one second. Run is stopped and checked at cleanup.
func startPipeAgent(t *testing.T, h *pipeHub) *Agent {
	t.Helper()
	d := &websocket.Dialer{NetDialContext: h.ln.Dial, Subprotocols: []string{relay.Subprotocol}}
	a, err := New(Config{
		HubURL:   "http://127.0.0.1:1",
		DeviceID: "dev-1",
		Token:    "tok-secret",
		StateDir: t.TempDir(),
		Backoff:  Backoff{Base: time.Second, Cap: time.Second, ResetAfter: time.Hour},
		Rand:     func(n int64) int64 { return n - 1 },
		Dial:     d.DialContext,
		Logger:   testLogger(t),
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	return a
}

// TestVirtualSilentHubLostAtReadDeadline guards the read deadline: a hub that
// goes silent is declared lost 2.5 heartbeats after its last frame (not
// sooner, and within one more heartbeat), and the agent reconnects.
func TestVirtualSilentHubLostAtReadDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hb = 10 * time.Second
		h := newPipeHub(t, hb.Milliseconds())
		a := startPipeAgent(t, h)
		c1 := h.next(t)
		every := pingAfterSilence(hb)
		time.Sleep(2*every + hb/2) // the agent's pings at every and 2*every, both answered
		c1.silent.Store(true)
		if _, last := c1.snapshot(); last.Sub(c1.at) != 2*every {
			t.Fatalf("last pong %v after welcome, want two pings' worth (%v)", last.Sub(c1.at), 2*every)
		}
		select {
		case <-c1.done:
		case <-time.After(20 * hb):
			t.Fatal("a silent hub was never declared lost")
		}
		_, last := c1.snapshot()
		if lost, deadline := c1.endAt.Sub(last), hb*5/2; lost < deadline || lost > deadline+hb {
			t.Errorf("declared lost %v after the last frame, want within [%v, %v]", lost, deadline, deadline+hb)
		}

		c2 := h.next(t)
		if d := c2.at.Sub(c1.endAt); d <= 0 || d > time.Second {
			t.Errorf("reconnected %v after the loss, want within the first backoff (1s)", d)
		}
		synctest.Wait()
		if st := a.Status(); st.State != StateOnline || st.Reconnects != 1 || !strings.Contains(st.LastError, "read deadline") {
			t.Errorf("status = %s, %d reconnects, last error %q; want online, 1, the read deadline", st.State, st.Reconnects, st.LastError)
		}
	})
}

// TestVirtualQuietHubKeepsSessionUp guards the agent's ping: a live hub that
// only answers pings (it sends none) keeps one session up for 50 of the
// agent's pings, one after each pingAfterSilence of silence (until #30.6 the
// agent pinged every heartbeat whatever the hub sent: see
// TestVirtualPingingHubIsNotPinged).
func TestVirtualQuietHubKeepsSessionUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hb = 10 * time.Second
		every := pingAfterSilence(hb)
		h := newPipeHub(t, hb.Milliseconds())
		a := startPipeAgent(t, h)
		c := h.next(t)
		time.Sleep(50*every + hb/2)
		select {
		case <-c.done:
			t.Fatalf("session ended after %v", c.endAt.Sub(c.at))
		default:
		}
		pings, _ := c.snapshot()
		if len(pings) != 50 {
			t.Errorf("%d pings in 50 silences of %v, want 50", len(pings), every)
		}
		prev := c.at
		for i, p := range pings {
			if gap := p.Sub(prev); gap != every {
				t.Errorf("ping %d came %v after the previous frame, want pingAfterSilence (%v)", i+1, gap, every)
			}
			prev = p
		}
		if st := a.Status(); st.State != StateOnline || st.Reconnects != 0 || h.dials.Load() != 1 {
			t.Errorf("status %s, %d reconnects, %d dials; want online, 0, 1", st.State, st.Reconnects, h.dials.Load())
		}
	})
}

// TestVirtualHeartbeatIsClamped guards clampHeartbeat: the agent's pings
// (after pingAfterSilence of silence) follow the clamped interval whatever
// heartbeat the welcome asks for.
func TestVirtualHeartbeatIsClamped(t *testing.T) {
	for _, tc := range []struct {
		name  string
		askMS int64
		want  time.Duration
	}{
		{"too small", 1, 10 * time.Millisecond},
		{"in range", 30_000, 30 * time.Second},
		{"too large", (24 * time.Hour).Milliseconds(), 10 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newPipeHub(t, tc.askMS)
				startPipeAgent(t, h)
				c := h.next(t)
				every := pingAfterSilence(tc.want)
				time.Sleep(3*every + tc.want/2)
				pings, _ := c.snapshot()
				var got []time.Duration
				for _, p := range pings {
					got = append(got, p.Sub(c.at))
				}
				want := []time.Duration{every, 2 * every, 3 * every}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("welcome asked %dms: pings at %v after welcome, want %v", tc.askMS, got, want)
				}
			})
		})
	}
}

// TestVirtualPingingHubIsNotPinged: against a hub that pings every heartbeat
// (as relay/hub does) the agent's pongs keep both read deadlines fed, and
// the agent sends no ping of its own in 50 heartbeats: an idle agent's
// network wakeups are the hub's pings alone.
func TestVirtualPingingHubIsNotPinged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hb = 10 * time.Second
		h := newPipeHub(t, hb.Milliseconds())
		h.pingEvery = hb
		a := startPipeAgent(t, h)
		c := h.next(t)
		time.Sleep(50*hb + hb/2)
		select {
		case <-c.done:
			t.Fatalf("session ended after %v", c.endAt.Sub(c.at))
		default:
		}
		if pings, _ := c.snapshot(); len(pings) != 0 {
			t.Errorf("the agent pinged %d times a hub that pings it, want 0", len(pings))
		}
		if n := c.pongs.Load(); n != 50 {
			t.Errorf("%d pongs to the hub's 50 pings, want 50", n)
		}
		if st := a.Status(); st.State != StateOnline || st.Reconnects != 0 || h.dials.Load() != 1 {
			t.Errorf("status %s, %d reconnects, %d dials; want online, 0, 1", st.State, st.Reconnects, h.dials.Load())
		}
	})
}
