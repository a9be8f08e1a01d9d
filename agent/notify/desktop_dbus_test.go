//go:build linux || freebsd || netbsd || openbsd || dragonfly

package notify

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/roomrelay/roomrelay/internal/testutil"
)

// startBus runs a private session bus (testutil.PrivateBus).
func startBus(t *testing.T) string {
	t.Helper()
	addr, _ := testutil.PrivateBus(t, "the D-Bus notifier")
	return addr
}

// call is one Notify a fake server received.
type call struct {
	app, summary, body string
	replaces           uint32
	actions            []string
	hints              map[string]dbus.Variant
	expire             int32
}

// fakeServer is an org.freedesktop.Notifications server on a private bus
// that records what it is sent.
type fakeServer struct {
	caps  []string
	block chan struct{} // when set, Notify waits on it
	calls chan call
}

// newFakeServer serves on addr; a non-nil block holds every Notify until
// it is closed.
func newFakeServer(t *testing.T, addr string, block chan struct{}, caps ...string) *fakeServer {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f := &fakeServer{caps: caps, block: block, calls: make(chan call, 16)}
	if err := conn.Export(f, notifPath, notifIface); err != nil {
		t.Fatal(err)
	}
	reply, err := conn.RequestName(notifName, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own %s: %v %v", notifName, reply, err)
	}
	return f
}

func (f *fakeServer) GetCapabilities() ([]string, *dbus.Error) { return f.caps, nil }

func (f *fakeServer) Notify(app string, replaces uint32, icon, summary, body string, actions []string, hints map[string]dbus.Variant, expire int32) (uint32, *dbus.Error) {
	if f.block != nil {
		<-f.block
	}
	f.calls <- call{app: app, summary: summary, body: body, replaces: replaces, actions: actions, hints: hints, expire: expire}
	return 7, nil
}

func (f *fakeServer) next(t *testing.T) call {
	t.Helper()
	select {
	case c := <-f.calls:
		return c
	case <-time.After(patience):
		t.Fatal("the fake notification server got no Notify call")
		panic("unreachable")
	}
}

// hostile is a note whose network-supplied names carry a bidi override, a
// terminal escape, a newline and a zero-width space.
var hostile = Note{ProposalID: "prop_1", Project: "p1",
	Room: "Kitchen\u202e\x1b[2J\nwall", App: "Standup\u200b timer\x07", From: "MCP client token \"ci\"\u2066"}

func checkText(t *testing.T, what, s string) {
	t.Helper()
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x200b {
			t.Errorf("%s %q holds %U", what, s, r)
		}
	}
}

// TestDBusNotify: a note reaches the session bus's notification server as
// one Notify from "roomrelay" naming the room, the app and how to review,
// with the names cleaned.
func TestDBusNotify(t *testing.T) {
	addr := startBus(t)
	f := newFakeServer(t, addr, nil)
	n := Desktop(Config{BusAddress: addr})
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := n.Notify(ctx, hostile); err != nil {
		t.Fatal(err)
	}
	c := f.next(t)
	if c.app != "roomrelay" || c.replaces != 0 || len(c.actions) != 0 || c.expire != -1 {
		t.Errorf("Notify(app %q, replaces %d, actions %q, expire %d)", c.app, c.replaces, c.actions, c.expire)
	}
	for _, want := range []string{"Kitchen[2J wall", "Standup timer"} {
		if !strings.Contains(c.summary, want) || !strings.Contains(c.body, want) {
			t.Errorf("summary %q / body %q: want %q in both", c.summary, c.body, want)
		}
	}
	if !strings.Contains(c.body, "roomrelay review --web") || !strings.Contains(c.body, `MCP client token "ci"`) {
		t.Errorf("body %q: want the review command and who proposed it", c.body)
	}
	checkText(t, "summary", c.summary)
	checkText(t, "body", c.body)
	select {
	case extra := <-f.calls:
		t.Errorf("a second Notify for one note: %+v", extra)
	default:
	}
}

// TestDBusBodyMarkupEscaped: where the server renders body markup, a name
// with markup shows as text, not as a link; the summary is plain text
// either way.
func TestDBusBodyMarkupEscaped(t *testing.T) {
	addr := startBus(t)
	f := newFakeServer(t, addr, nil, "body", "body-markup")
	note := Note{ProposalID: "prop_2", Room: `<a href="https://evil.example">Kitchen</a>`, App: "A & B"}
	if err := Desktop(Config{BusAddress: addr}).Notify(context.Background(), note); err != nil {
		t.Fatal(err)
	}
	c := f.next(t)
	if strings.Contains(c.body, "<a") || !strings.Contains(c.body, "&lt;a href=") || !strings.Contains(c.body, "A &amp; B") {
		t.Errorf("body %q: markup not escaped", c.body)
	}
	if !strings.Contains(c.summary, `<a href="https://evil.example">`) {
		t.Errorf("summary %q: plain text changed", c.summary)
	}
}

// TestDBusFailures: no notification server, and no bus, are ErrUnavailable;
// a server that never answers is cut off by the context (ErrTimeout).
func TestDBusFailures(t *testing.T) {
	addr := startBus(t)
	ctx := context.Background()
	if err := Desktop(Config{BusAddress: addr}).Notify(ctx, hostile); !errors.Is(err, ErrUnavailable) {
		t.Errorf("no server on the bus: %v, want ErrUnavailable", err)
	}
	gone := "unix:path=" + filepath.Join(t.TempDir(), "no-bus")
	if err := Desktop(Config{BusAddress: gone}).Notify(ctx, hostile); !errors.Is(err, ErrUnavailable) {
		t.Errorf("no bus: %v, want ErrUnavailable", err)
	}
	block := make(chan struct{})
	defer close(block)
	newFakeServer(t, addr, block)
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := Desktop(Config{BusAddress: addr}).Notify(tctx, hostile)
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("server that never answers: %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > patience/2 {
		t.Errorf("Notify returned after %v, not at its context's deadline", d)
	}
}

// TestDBusNoBusIsNotLaunched: with no session bus in the environment the
// notifier fails at once instead of starting one: dbus-launch would leave a
// stray dbus-daemon behind for every note. A stand-in dbus-launch first in
// PATH records whether it ran.
func TestDBusNoBusIsNotLaunched(t *testing.T) {
	// godbus also finds a bus at /run/user/UID/bus; with one there the
	// notifier would (rightly) use it, and this test could not tell.
	for _, f := range []string{"bus", "dbus-session"} {
		if _, err := os.Stat(filepath.Join("/run/user", strconv.Itoa(os.Getuid()), f)); err == nil {
			t.Skipf("this user has a session bus (/run/user/%d/%s): nothing to test", os.Getuid(), f)
		}
	}
	bin := t.TempDir()
	marker := filepath.Join(bin, "launched")
	script := "#!/bin/sh\necho launched > '" + marker + "'\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "dbus-launch"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	err := Desktop(Config{}).Notify(context.Background(), hostile)
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("no session bus: %v, want ErrUnavailable", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the notifier ran dbus-launch to start a session bus")
	}
}
