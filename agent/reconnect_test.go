package agent

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/relay"
)

func TestBackoffFullJitter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		pick func(n int64) int64 // the injected random source
	}{
		{"max", func(n int64) int64 { return n - 1 }},
		{"zero", func(n int64) int64 { return 0 }},
		{"third", func(n int64) int64 { return n / 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub := newTestHub(t)
			hub.status = func(int) int { return http.StatusServiceUnavailable }
			clk := newFakeClock()
			asked := make(chan int64, 100)
			a := newTestAgent(t, hub, "", func(c *Config) {
				c.Clock = clk
				c.Backoff = Backoff{Base: time.Second, Cap: 60 * time.Second, ResetAfter: 30 * time.Second}
				c.Rand = func(n int64) int64 { asked <- n; return tc.pick(n) }
			})
			start(t, a)
			for i := range 9 {
				want := min(time.Second<<i, 60*time.Second) // min(cap, base·2^n)
				n := <-asked
				if time.Duration(n-1) != want {
					t.Fatalf("failure %d: jitter range [0, %v], want [0, %v]", i+1, time.Duration(n-1), want)
				}
				d := clk.nextTimer(t)
				if d != time.Duration(tc.pick(n)) || d < 0 || d > want {
					t.Fatalf("failure %d: waited %v, want the random pick %v within [0, %v]", i+1, d, time.Duration(tc.pick(n)), want)
				}
				eventually(t, "backoff state", func() bool { return a.Status().State == StateBackoff })
				clk.Advance(d)
			}
		})
	}
}

func TestBackoffResetsOnlyAfterAStableConnection(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	// Dials 1–3 fail, 4 connects briefly, 5 connects for longer than ResetAfter.
	hub.status = func(n int) int {
		if n <= 3 {
			return http.StatusServiceUnavailable
		}
		return 0
	}
	clk := newFakeClock()
	a := newTestAgent(t, hub, "", func(c *Config) {
		c.Clock = clk
		c.Backoff = Backoff{Base: time.Second, Cap: 60 * time.Second, ResetAfter: 30 * time.Second}
		c.Rand = func(n int64) int64 { return n - 1 } // always the upper bound
	})
	start(t, a)
	for _, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if d := clk.nextTimer(t); d != want {
			t.Fatalf("backoff %v, want %v", d, want)
		}
		clk.Advance(want)
	}
	c4 := hub.next(t)
	eventually(t, "online", func() bool { return a.Status().State == StateOnline })
	clk.Advance(5 * time.Second) // short-lived: no reset
	c4.closeWith(websocket.CloseInternalServerErr, "hub trouble")
	if d := clk.nextTimer(t); d != 8*time.Second {
		t.Fatalf("after a short connection: backoff %v, want 8s (not reset)", d)
	}
	clk.Advance(8 * time.Second)
	c5 := hub.next(t)
	eventually(t, "online", func() bool { return a.Status().State == StateOnline })
	clk.Advance(31 * time.Second) // stable: reset
	c5.closeWith(websocket.CloseInternalServerErr, "hub trouble")
	if d := clk.nextTimer(t); d != time.Second {
		t.Fatalf("after a stable connection: backoff %v, want 1s (reset)", d)
	}
	if st := a.Status(); st.Reconnects != 1 {
		t.Errorf("reconnects = %d, want 1", st.Reconnects)
	}
}

// backingOff starts an agent whose first dial is refused (503), under the
// fake clock, and returns it waiting out a backoff of exactly wait.
func backingOff(t *testing.T, wait time.Duration) (*testHub, *fakeClock, *Agent) {
	t.Helper()
	hub := newTestHub(t)
	hub.status = func(n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return 0
	}
	clk := newFakeClock()
	a := newTestAgent(t, hub, "", func(c *Config) {
		c.Clock = clk
		c.Backoff = Backoff{Base: wait, Cap: time.Hour, ResetAfter: time.Hour}
		c.Rand = func(n int64) int64 { return n - 1 }
	})
	start(t, a)
	if d := clk.nextTimer(t); d != wait {
		t.Fatalf("backoff %v, want %v", d, wait)
	}
	eventually(t, "backoff state", func() bool { return a.Status().State == StateBackoff })
	return hub, clk, a
}

func TestWallClockJumpSkipsBackoff(t *testing.T) {
	t.Parallel()
	hub, clk, _ := backingOff(t, time.Minute)
	// The machine slept for an hour: the wall clock moved, the monotonic did not.
	clk.JumpWall(time.Hour)
	clk.Tick()
	hub.next(t) // reconnected without the backoff timer firing
	if n := hub.dials.Load(); n != 2 {
		t.Errorf("dials = %d, want 2", n)
	}
}

// TestRetryNowSkipsBackoff: `roomrelay reconnect` while the agent waits
// out a long backoff makes it dial at once; online, it changes nothing.
func TestRetryNowSkipsBackoff(t *testing.T) {
	t.Parallel()
	hub, _, a := backingOff(t, time.Hour)
	a.RetryNow()
	c := hub.next(t) // dialled again without the hour passing
	eventually(t, "online", func() bool { return a.Status().State == StateOnline })
	a.RetryNow() // online: no new session
	c.send(command("after", "none", ""))
	c.result(t)
	if n := hub.dials.Load(); n != 2 {
		t.Errorf("dials = %d, want 2", n)
	}
}

func TestWallClockJumpReplacesAPossiblyDeadConnection(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	clk := newFakeClock()
	a := newTestAgent(t, hub, "", func(c *Config) { c.Clock = clk })
	start(t, a)
	c1 := hub.next(t)
	eventually(t, "online", func() bool { return a.Status().State == StateOnline })
	clk.Tick() // no jump: nothing happens
	clk.JumpWall(2 * time.Hour)
	clk.Tick()
	c2 := hub.next(t)
	if code := c1.closeCode(t); code != websocket.CloseGoingAway {
		t.Errorf("old connection closed with %d, want 1001", code)
	}
	if c2.n != 2 {
		t.Errorf("connection number %d, want 2", c2.n)
	}
}

func TestSmallWallClockStepIsNotAWake(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	hub := newTestHub(t)
	a := newTestAgent(t, hub, "", func(c *Config) { c.Clock = clk })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.watchWallClock(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	eventually(t, "ticker", func() bool { clk.mu.Lock(); defer clk.mu.Unlock(); return len(clk.tickers) == 1 })
	clk.JumpWall(3 * time.Second) // an NTP step, below the threshold
	clk.Advance(5 * time.Second)  // a normal tick
	clk.JumpWall(11 * time.Second)
	clk.Advance(5 * time.Second)
	select {
	case <-a.wake:
	case <-time.After(waitFor):
		t.Fatal("an 11 s jump was not detected")
	}
	select {
	case <-a.wake:
		t.Fatal("a second wake signalled")
	default:
	}
}

func TestDrainIsObeyedWithoutBackoff(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	clk := newFakeClock()
	a := newTestAgent(t, hub, "", func(c *Config) {
		c.Clock = clk
		c.Rand = func(n int64) int64 { t.Error("drain must not use the jittered backoff"); return 0 }
	})
	start(t, a)
	c1 := hub.next(t)
	c1.send(&relay.Drain{AfterMS: 1500, Reason: "hub deploy"})
	if d := clk.nextTimer(t); d != 1500*time.Millisecond {
		t.Fatalf("waited %v after drain, want after_ms 1.5s", d)
	}
	// Make-before-break: until then the old session still serves.
	c1.send(command("before-move", relay.CmdReadRoom, `{"room_id":"nope"}`))
	if r := c1.result(t); r.ID != "before-move" {
		t.Fatalf("result on the draining session: %+v", r)
	}
	clk.Advance(1500 * time.Millisecond)
	c2 := hub.next(t)
	// The old one closes (normally) once the new one is up and the hub said
	// nothing more comes on the old one.
	c1.send(&relay.Drain{Reason: relay.DrainHandedOver})
	if code := c1.closeCode(t); code != websocket.CloseNormalClosure {
		t.Errorf("close code of the drained session = %d, want 1000", code)
	}
	c2.send(command("after-move", relay.CmdReadRoom, `{"room_id":"nope"}`))
	if r := c2.result(t); r.ID != "after-move" {
		t.Fatalf("result on the new session: %+v", r)
	}
}

// TestDrainThenCloseWaitsOutTheDelay: a lone hub node that drains sends
// the delay and closes at once (it has nowhere to move its agents); the
// agent keeps to what is left of the delay instead of backing off as after
// a crash, so a fleet comes back spread over the node's window.
func TestDrainThenCloseWaitsOutTheDelay(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	clk := newFakeClock()
	a := newTestAgent(t, hub, "", func(c *Config) {
		c.Clock = clk
		c.Rand = func(n int64) int64 {
			t.Error("a drain followed by a close must not use the jittered backoff")
			return 0
		}
	})
	start(t, a)
	c1 := hub.next(t)
	c1.send(&relay.Drain{AfterMS: 4000, Reason: "hub node shutting down"})
	if d := clk.nextTimer(t); d != 4*time.Second {
		t.Fatalf("move timer %v, want 4s", d)
	}
	clk.Advance(time.Second)
	c1.closeWith(websocket.CloseGoingAway, "hub shutting down")
	if d := clk.nextTimer(t); d != 3*time.Second {
		t.Fatalf("after the close the agent waits %v, want the 3s left of the drain delay", d)
	}
	clk.Advance(3 * time.Second)
	hub.next(t)
}

// TestDrainWaitIsBounded: a drain's after_ms is clamped (no overflow into a
// negative wait) and bounded by MaxDrainWait, so a hub cannot silence the
// agent for years (FuzzHubFrames found the stall).
func TestDrainWaitIsBounded(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ms   int64
		want time.Duration
	}{{1500, 1500 * time.Millisecond}, {-5, 0}, {99_999_999_999_999, 5 * time.Minute}, {1 << 62, 5 * time.Minute}} {
		if got := drainWait(c.ms, 5*time.Minute); got != c.want {
			t.Errorf("drainWait(%d) = %v, want %v", c.ms, got, c.want)
		}
	}
}

func TestAnnounceSleepAndResume(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	a := newTestAgent(t, hub, "", nil)
	start(t, a)
	c1 := hub.next(t)
	eventually(t, "online", func() bool { return a.Status().State == StateOnline })
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := a.AnnounceSleep(ctx); err != nil {
		t.Fatal(err)
	}
	if ev, ok := c1.frame(t).(*relay.Event); !ok || ev.Event != relay.EventSleeping {
		t.Fatalf("got %+v, want a sleeping event", ev)
	}
	if code := c1.closeCode(t); code != websocket.CloseNormalClosure {
		t.Errorf("close code = %d, want 1000", code)
	}
	eventually(t, "sleeping state", func() bool { return a.Status().State == StateSleeping })
	if n := hub.dials.Load(); n != 1 {
		t.Errorf("dials while held = %d, want 1", n)
	}
	a.Resume()
	hub.next(t)
	eventually(t, "online again", func() bool { return a.Status().State == StateOnline })
}

func TestBackoffMax(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: time.Second, Cap: 60 * time.Second}
	for n, want := range []time.Duration{1, 2, 4, 8, 16, 32, 60, 60} {
		if got := b.Max(n); got != want*time.Second {
			t.Errorf("Max(%d) = %v, want %v", n, got, want*time.Second)
		}
	}
	if got := b.Max(1000); got != 60*time.Second {
		t.Errorf("Max(1000) = %v (overflow?)", got)
	}
}

func TestAnnounceSleepWhileOfflineHoldsUntilWake(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	hub.status = func(n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return 0
	}
	clk := newFakeClock()
	a := newTestAgent(t, hub, "", func(c *Config) { c.Clock = clk })
	start(t, a)
	clk.nextTimer(t) // backing off after dial 1
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := a.AnnounceSleep(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "sleeping state", func() bool { return a.Status().State == StateSleeping })
	clk.Advance(time.Hour) // the backoff timer would have fired by now
	if n := hub.dials.Load(); n != 1 {
		t.Fatalf("dials while held = %d, want 1", n)
	}
	clk.JumpWall(8 * time.Hour) // woke up
	clk.Tick()
	hub.next(t)
	eventually(t, "online", func() bool { return a.Status().State == StateOnline })
}

// TestDrainLoopBacksOff: a hub that drains every session as soon as it is
// up (after_ms 0) once made the agent reconnect at dial speed, ~20 times a
// second, forever: a drain reset the failure count and dialled at once.
// A drained session that never stayed up for ResetAfter now counts as a
// failure: the first is free (a rolling deploy), then the waits follow the
// backoff, while the old session still serves.
func TestDrainLoopBacksOff(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	clk := newFakeClock()
	a := newTestAgent(t, hub, "", func(c *Config) {
		c.Clock = clk
		c.Backoff = Backoff{Base: time.Second, Cap: 60 * time.Second, ResetAfter: 30 * time.Second}
		c.Rand = func(n int64) int64 { return n - 1 } // always the upper bound
	})
	start(t, a)
	var prev *hubConn
	handOver := func(c *hubConn) {
		if prev != nil { // the old session may close now
			prev.send(&relay.Drain{Reason: relay.DrainHandedOver})
		}
		prev = c
	}
	drainNow := func() {
		t.Helper()
		c := hub.next(t)
		handOver(c)
		c.send(&relay.Drain{AfterMS: 0, Reason: "drain loop"})
		if d := clk.nextTimer(t); d != 0 {
			t.Fatalf("move timer %v, want 0", d)
		}
		clk.Advance(0)
	}
	drainNow() // the first early drain: dial at once
	for _, want := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second} {
		drainNow()
		if d := clk.nextTimer(t); d != want {
			t.Fatalf("after a session drained at once the agent waits %v, want the backoff's %v", d, want)
		}
		clk.Advance(want)
	}
	// A session that stayed up long enough resets the count: its drain is
	// free again.
	c := hub.next(t)
	handOver(c)
	eventually(t, "online", func() bool { return a.Status().SessionID == fmt.Sprintf("s%d", c.n) })
	clk.Advance(31 * time.Second)
	c.send(&relay.Drain{AfterMS: 0, Reason: "deploy"})
	if d := clk.nextTimer(t); d != 0 {
		t.Fatalf("move timer %v, want 0", d)
	}
	clk.Advance(0)
	handOver(hub.next(t))
}

// TestLastErrorIsStoredPrintable: a hub's close reason reaches status.json
// (and so `roomrelay status`, a desktop app) as one printable line, never
// with its escape sequences (#24 finding 6).
func TestLastErrorIsStoredPrintable(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	a := newTestAgent(t, hub, "", nil)
	start(t, a)
	c := hub.next(t)
	eventually(t, "online", func() bool { return a.Status().State == StateOnline })
	c.closeWith(websocket.CloseInternalServerErr, "\x1b]0;pwned\a\r\nok")
	eventually(t, "the close recorded", func() bool { return a.Status().LastError != "" })
	if got := a.Status().LastError; strings.ContainsAny(got, "\x1b\a\r\n") || !strings.Contains(got, "⟨U+001B⟩]0;pwned⟨U+0007⟩⟨U+000D⟩⟨U+000A⟩ok") {
		t.Errorf("last error stored as %q", got)
	}
}

// TestHelloCarriesTheAuditHead: the hello reports Config.AuditHead, the
// anchor the hub keeps off the device (#24 finding 12).
func TestHelloCarriesTheAuditHead(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	head := &relay.AuditHead{Seq: 42, Hash: strings.Repeat("ab", 32)}
	a := newTestAgent(t, hub, "", func(c *Config) { c.AuditHead = func() *relay.AuditHead { return head } })
	start(t, a)
	select {
	case h := <-hub.hellos:
		if h.AuditHead == nil || *h.AuditHead != *head {
			t.Fatalf("hello audit head %+v, want %+v", h.AuditHead, head)
		}
	case <-time.After(waitFor):
		t.Fatal("no hello")
	}
}
