package agent

import (
	"context"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// liveTickers counts the fake clock's running tickers: the wall-clock wake
// detector's is the only one the agent makes.
func (f *fakeClock) liveTickers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range f.tickers {
		if !t.stopped {
			n++
		}
	}
	return n
}

// TestOSWakeNoticesStopTheTick: where the OS reports sleep and wake
// (logind, Windows' notifications), the wall-clock detector's tick, an idle
// agent's largest source of wakeups, stops; Resume alone then replaces a
// connection that may have died in the sleep, at once (no tick, no timer:
// the fake clock never moves); when the notices end, the tick comes back.
func TestOSWakeNoticesStopTheTick(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	clk := newFakeClock()
	a := newTestAgent(t, hub, "", func(c *Config) { c.Clock = clk })
	start(t, a)
	c1 := hub.next(t)
	eventually(t, "online", func() bool { return a.Status().State == StateOnline })
	eventually(t, "the detector ticking", func() bool { return clk.liveTickers() == 1 })

	a.SetOSWakeNotices(true)
	eventually(t, "the tick stopped", func() bool { return clk.liveTickers() == 0 })

	// The OS says the machine woke, with no sleep announced before (the
	// announcement was cut short): the old connection is replaced.
	a.Resume()
	c2 := hub.next(t)
	if code := c1.closeCode(t); code != websocket.CloseGoingAway {
		t.Errorf("old connection closed with %d, want 1001", code)
	}
	eventually(t, "online again", func() bool { return a.Status().State == StateOnline })

	a.SetOSWakeNotices(false)
	eventually(t, "the detector ticking again", func() bool { return clk.liveTickers() == 1 })
	clk.JumpWall(time.Hour)
	clk.Tick()
	c3 := hub.next(t)
	if code := c2.closeCode(t); code != websocket.CloseGoingAway {
		t.Errorf("second connection closed with %d, want 1001", code)
	}
	if c3.n != 3 {
		t.Errorf("connection number %d, want 3", c3.n)
	}
}

// TestResumeAfterAnnouncedSleepNeedsNoTick: the usual sleep with the OS's
// notices on: announced, held, and Resume reconnects without the detector.
func TestResumeAfterAnnouncedSleepNeedsNoTick(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	clk := newFakeClock()
	a := newTestAgent(t, hub, "", func(c *Config) { c.Clock = clk })
	a.SetOSWakeNotices(true)
	start(t, a)
	hub.next(t)
	eventually(t, "online", func() bool { return a.Status().State == StateOnline })
	if n := clk.liveTickers(); n != 0 {
		t.Fatalf("%d tickers with the OS's notices on, want 0", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := a.AnnounceSleep(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "sleeping state", func() bool { return a.Status().State == StateSleeping })
	a.Resume()
	hub.next(t)
	eventually(t, "online again", func() bool { return a.Status().State == StateOnline })
	if n := hub.dials.Load(); n != 2 {
		t.Errorf("dials = %d, want 2", n)
	}
}
