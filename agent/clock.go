package agent

import "time"

// Clock is the agent's view of time, injectable so tests can drive backoff
// waits and wall-clock jumps without sleeping. It governs backoff and drain
// waits, the wake detector, command deadlines and the times in Status.
// Socket deadlines and ping intervals use the real clock, because the kernel
// enforces them against real time anyway.
type Clock interface {
	// Now returns the current wall-clock time.
	Now() time.Time
	// Monotonic returns time elapsed since an arbitrary fixed origin on a
	// clock that, unlike the wall clock, does not advance while the machine
	// sleeps and is not stepped by NTP or the user.
	Monotonic() time.Duration
	After(d time.Duration) <-chan time.Time
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
}

// Timer is the part of *time.Timer the agent uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// Ticker is the part of *time.Ticker the agent uses.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// RealClock returns the system clock.
func RealClock() Clock { return realClock{origin: time.Now()} }

type realClock struct{ origin time.Time }

func (realClock) Now() time.Time { return time.Now() }

// Monotonic relies on Go's monotonic reading, which on Linux (CLOCK_MONOTONIC),
// macOS and Windows does not count time spent suspended.
func (c realClock) Monotonic() time.Duration             { return time.Since(c.origin) }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (realClock) NewTimer(d time.Duration) Timer         { return realTimer{time.NewTimer(d)} }
func (realClock) NewTicker(d time.Duration) Ticker       { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }
