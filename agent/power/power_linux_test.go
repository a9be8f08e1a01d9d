package power

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/roomrelay/roomrelay/internal/testutil"
)

// patience bounds every wait so a broken watcher fails the test instead of
// hanging it; no assertion depends on how long anything takes.
const patience = 20 * time.Second

// startBus runs a private dbus-daemon and returns its address.
func startBus(t *testing.T) string {
	addr, _ := startBusKill(t)
	return addr
}

// startBusKill is startBus that also returns a function killing the daemon.
func startBusKill(t *testing.T) (string, func()) {
	t.Helper()
	return testutil.PrivateBus(t, "the logind path")
}

func connect(t *testing.T, addr string) *dbus.Conn {
	t.Helper()
	c, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// lock is one inhibitor lock handed out by the fake logind: it keeps the read
// end of a pipe whose write end went to the caller, as logind does with a FIFO.
type lock struct {
	what, who, why, mode string
	r, w                 *os.File
	ino                  uint64
}

// fakeLogind exports org.freedesktop.login1.Manager.Inhibit on a private bus.
type fakeLogind struct {
	conn  *dbus.Conn
	fail  *dbus.Error // returned by Inhibit when set
	locks chan *lock
	mu    sync.Mutex
	all   []*lock
}

func newFakeLogind(t *testing.T, addr string) *fakeLogind {
	t.Helper()
	f := &fakeLogind{conn: connect(t, addr), locks: make(chan *lock, 16)}
	if err := f.conn.Export(f, logindPath, managerIface); err != nil {
		t.Fatal(err)
	}
	reply, err := f.conn.RequestName(logindName, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own %s: %v %v", logindName, reply, err)
	}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, l := range f.all {
			l.r.Close()
			l.w.Close()
		}
	})
	return f
}

func (f *fakeLogind) Inhibit(what, who, why, mode string) (dbus.UnixFD, *dbus.Error) {
	if f.fail != nil {
		return 0, f.fail
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 0, dbus.MakeFailedError(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(r.Fd()), &st); err != nil {
		return 0, dbus.MakeFailedError(err)
	}
	l := &lock{what: what, who: who, why: why, mode: mode, r: r, w: w, ino: st.Ino}
	fd := w.Fd() // before the test can see (and close) w
	f.mu.Lock()
	f.all = append(f.all, l)
	f.mu.Unlock()
	f.locks <- l
	// godbus passes this descriptor as is; the test closes its copy once
	// the watcher holds its own (see holders).
	return dbus.UnixFD(fd), nil
}

func (f *fakeLogind) prepareForSleep(t *testing.T, start bool) {
	t.Helper()
	if err := f.conn.Emit(logindPath, prepareSignal, start); err != nil {
		t.Fatal(err)
	}
}

// holders counts this process's descriptors open on the lock's pipe. The
// watcher runs in the test process, so its received copy shows up here.
func holders(t *testing.T, l *lock) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("pipe:[%d]", l.ino)
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == want {
			n++
		}
	}
	return n
}

// waitFor is testutil.Eventually: one way to wait in every test package.
var waitFor = testutil.Eventually

func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(patience):
		t.Fatalf("gave up waiting for %s", what)
		panic("unreachable")
	}
}

// takeLock waits for the watcher's Inhibit call and for the watcher to hold
// the descriptor, then drops the fake's own copy of the write end, so that
// the read end sees EOF exactly when the watcher releases the lock.
func takeLock(t *testing.T, f *fakeLogind) *lock {
	t.Helper()
	l := recv(t, "the watcher's Inhibit call", f.locks)
	if l.what != "sleep" || l.mode != "delay" || l.who != "roomrelay" || l.why == "" {
		t.Errorf("Inhibit(%q, %q, %q, %q): want a delay lock on sleep by roomrelay", l.what, l.who, l.why, l.mode)
	}
	// read end + fake's write end + the watcher's received write end
	waitFor(t, "the watcher to receive the lock descriptor", func() bool { return holders(t, l) == 3 })
	l.w.Close()
	return l
}

// released reports whether the watcher closed its end: a read on the pipe
// returns EOF only when no write end is left open anywhere.
func released(t *testing.T, l *lock) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := l.r.Read(make([]byte, 1))
		ch <- err
	}()
	return ch
}

type event struct {
	kind        string
	hasDeadline bool
	holders     int // descriptors on the current lock while the callback runs
}

func TestSleepAndResumeWithInhibitor(t *testing.T) {
	addr := startBus(t)
	f := newFakeLogind(t, addr)

	events := make(chan event, 8)
	proceed := make(chan struct{})
	var current *lock // set by the test before each signal
	var mu sync.Mutex
	cfg := Config{
		BusAddress: addr,
		OnSleep: func(ctx context.Context) {
			_, dl := ctx.Deadline()
			mu.Lock()
			h := holders(t, current)
			mu.Unlock()
			events <- event{kind: "sleep", hasDeadline: dl, holders: h}
			<-proceed // the announcement takes a while
		},
		OnResume: func(ctx context.Context) { events <- event{kind: "resume"} },
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Watch(ctx, cfg) }()

	first := takeLock(t, f)
	mu.Lock()
	current = first
	mu.Unlock()
	rel := released(t, first)

	f.prepareForSleep(t, true)
	ev := recv(t, "OnSleep", events)
	if ev.kind != "sleep" || !ev.hasDeadline {
		t.Fatalf("first event %+v: want OnSleep with a bounded context", ev)
	}
	if ev.holders != 2 {
		t.Errorf("while OnSleep runs, %d descriptors are open on the lock pipe: want 2 (logind's read end and the watcher's lock)", ev.holders)
	}
	select {
	case err := <-rel:
		t.Fatalf("the inhibitor lock was released before OnSleep returned (read: %v)", err)
	default:
	}
	close(proceed)
	if err := recv(t, "the inhibitor lock to be released after OnSleep", rel); err != io.EOF {
		t.Fatalf("read on the lock pipe: %v, want EOF (lock released)", err)
	}

	f.prepareForSleep(t, false)
	if ev := recv(t, "OnResume", events); ev.kind != "resume" {
		t.Fatalf("after resume got %+v, want OnResume", ev)
	}
	second := takeLock(t, f)
	rel2 := released(t, second)

	cancel()
	if err := recv(t, "Watch to return", done); err != nil {
		t.Fatalf("Watch after cancel: %v", err)
	}
	if err := recv(t, "the re-taken lock to be released on exit", rel2); err != io.EOF {
		t.Fatalf("read on the second lock pipe: %v, want EOF", err)
	}
	select {
	case ev := <-events:
		t.Errorf("unexpected extra callback %+v", ev)
	default:
	}
}

// TestIgnoresForgedSignal: PrepareForSleep from a process that does not own
// org.freedesktop.login1 must not make the agent announce sleep.
func TestIgnoresForgedSignal(t *testing.T) {
	addr := startBus(t)
	f := newFakeLogind(t, addr)
	forger := connect(t, addr)

	events := make(chan string, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, Config{BusAddress: addr,
			OnSleep:  func(context.Context) { events <- "sleep" },
			OnResume: func(context.Context) { events <- "resume" }})
	}()
	takeLock(t, f) // the watcher's match rule is in place once it asked for the lock

	if err := forger.Emit(logindPath, prepareSignal, true); err != nil {
		t.Fatal(err)
	}
	// A round trip through the bus from the forger: the daemon has routed
	// (or dropped) the forged signal before it answers this.
	if err := forger.BusObject().Call("org.freedesktop.DBus.GetId", 0).Err; err != nil {
		t.Fatal(err)
	}
	f.prepareForSleep(t, false)
	if got := recv(t, "a callback", events); got != "resume" {
		t.Fatalf("first callback %q: the forged PrepareForSleep(true) got through", got)
	}
	cancel()
	if err := recv(t, "Watch to return", done); err != nil {
		t.Fatal(err)
	}
}

func TestNoLogind(t *testing.T) {
	addr := startBus(t)
	err := Watch(context.Background(), Config{BusAddress: addr})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Watch on a bus without logind: %v, want ErrUnavailable", err)
	}
}

// TestInhibitRefused: logind may refuse the lock (policy); sleep and resume
// are still reported.
func TestInhibitRefused(t *testing.T) {
	addr := startBus(t)
	f := newFakeLogind(t, addr)
	f.fail = &dbus.Error{Name: "org.freedesktop.DBus.Error.AccessDenied", Body: []any{"not allowed"}}
	events := make(chan string, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, Config{BusAddress: addr,
			OnSleep:  func(context.Context) { events <- "sleep" },
			OnResume: func(context.Context) { events <- "resume" }})
	}()
	// No lock to wait for: retry the signal until the watcher's match rule
	// is in place and it reacts.
	var got string
	waitFor(t, "OnSleep without a lock", func() bool {
		f.prepareForSleep(t, true)
		select {
		case got = <-events:
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
	if got != "sleep" {
		t.Fatalf("got %q, want sleep", got)
	}
	f.prepareForSleep(t, false)
	for {
		ev := recv(t, "OnResume", events)
		if ev == "resume" {
			break
		}
	}
	cancel()
	if err := recv(t, "Watch to return", done); err != nil {
		t.Fatal(err)
	}
}

// TestBusGoesAway: a dead bus ends Watch with an error instead of leaving it
// waiting forever.
func TestBusGoesAway(t *testing.T) {
	addr, kill := startBusKill(t)
	f := newFakeLogind(t, addr)
	done := make(chan error, 1)
	go func() { done <- Watch(context.Background(), Config{BusAddress: addr}) }()
	takeLock(t, f)
	kill()
	if err := recv(t, "Watch to notice the bus is gone", done); err == nil {
		t.Fatal("Watch returned nil after the bus died")
	}
}

// TestReadyMeansHeard: OnReady (which stops the agent's wall-clock tick)
// comes once, and only when a signal sent from then on is heard: the first
// PrepareForSleep after it reaches OnSleep without a retry. Without logind
// it never comes, so the agent keeps its tick.
func TestReadyMeansHeard(t *testing.T) {
	addr := startBus(t)
	ready := make(chan struct{}, 2)
	if err := Watch(context.Background(), Config{BusAddress: addr, OnReady: func() { ready <- struct{}{} }}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Watch without logind: %v, want ErrUnavailable", err)
	}
	if len(ready) != 0 {
		t.Fatal("OnReady called without logind")
	}

	f := newFakeLogind(t, addr)
	events := make(chan string, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, Config{BusAddress: addr,
			OnReady:  func() { ready <- struct{}{} },
			OnSleep:  func(context.Context) { events <- "sleep" },
			OnResume: func(context.Context) { events <- "resume" }})
	}()
	takeLock(t, f)
	recv(t, "OnReady", ready)
	f.prepareForSleep(t, true)
	if ev := recv(t, "OnSleep", events); ev != "sleep" {
		t.Fatalf("got %q, want sleep", ev)
	}
	f.prepareForSleep(t, false)
	if ev := recv(t, "OnResume", events); ev != "resume" {
		t.Fatalf("got %q, want resume", ev)
	}
	takeLock(t, f) // re-taken after the resume
	cancel()
	if err := recv(t, "Watch to return", done); err != nil {
		t.Fatal(err)
	}
	if len(ready) != 0 {
		t.Error("OnReady called more than once")
	}
}
