package allowlist

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

func code(err error) relay.Code {
	if err == nil {
		return ""
	}
	var e *relay.Error
	if !errors.As(err, &e) {
		return "not a *relay.Error"
	}
	return e.Code
}

func TestZeroPolicyDeniesEverything(t *testing.T) {
	for _, p := range []*Policy{{}, New()} {
		for _, c := range relay.CommandNames() {
			if got := code(p.Decide("p", c, json.RawMessage(`{"room_id":"r"}`))); got != relay.CodeProjectNotEnabled {
				t.Errorf("%s: %s", c, got)
			}
		}
		if s := p.Summary(); len(s) != 0 {
			t.Errorf("summary %v", s)
		}
	}
}

func TestEnableDisable(t *testing.T) {
	var p Policy // the zero value is usable
	if err := p.Enable("proj", nil, nil); err != nil {
		t.Fatal(err)
	}
	info, _ := p.Project("proj")
	if !slices.Equal(info.Commands, DefaultCommands) || len(info.Rooms) != 0 || info.Rate.String() != "120/min burst 30" ||
		info.Rate.Events != 120 || info.Rate.PerSeconds != 60 || info.Rate.Burst != 30 {
		t.Errorf("default enable: %+v", info)
	}
	for _, c := range relay.CommandNames() {
		want := relay.Code("")
		if !relay.ReadOnlyCommand(c) {
			want = relay.CodeCommandNotAllowed
		}
		if got := code(p.Decide("proj", c, json.RawMessage(`{"room_id":"any-room"}`))); got != want {
			t.Errorf("default enable, %s: %q, want %q", c, got, want)
		}
	}

	// Re-enabling replaces commands and rooms (deduplicated, ordered) and keeps bounds.
	p.projects["proj"].max = map[string]int{BoundListLimit: 5}
	err := p.Enable("proj", []string{relay.CmdSmokeRunRoomApp, relay.CmdReadRoom, relay.CmdReadRoom}, []string{"r2", "r1", "r2"})
	if err != nil {
		t.Fatal(err)
	}
	info, _ = p.Project("proj")
	want := ProjectInfo{Project: "proj", Enabled: true, Commands: []string{"read_room", "smoke_run_room_app"},
		Rooms: []string{"r1", "r2"}, Rate: rateInfo(DefaultRate), Max: map[string]int{BoundListLimit: 5}}
	if !reflect.DeepEqual(info, want) {
		t.Errorf("got %+v\nwant %+v", info, want)
	}
	if got := code(p.Decide("proj", relay.CmdReadRoom, json.RawMessage(`{"room_id":"r3"}`))); got != relay.CodeNotFound {
		t.Errorf("room outside the list: %q", got)
	}
	if got := p.Summary(); !reflect.DeepEqual(got, []relay.ProjectPolicy{{Project: "proj", Commands: []string{"read_room", "smoke_run_room_app"}}}) {
		t.Errorf("summary %v", got)
	}

	// The copy handed out cannot change the policy.
	info.Commands[0] = relay.CmdProposeRoomSnippetApp
	info.Max[BoundListLimit] = 50
	p.Summary()[0].Commands[0] = relay.CmdProposeRoomSnippetApp
	if got := code(p.Decide("proj", relay.CmdProposeRoomSnippetApp, json.RawMessage(`{"room_id":"r1"}`))); got != relay.CodeCommandNotAllowed {
		t.Errorf("editing a copy widened the policy: %q", got)
	}
	if n, _ := p.Max("proj", BoundListLimit); n != 5 {
		t.Errorf("editing a copy changed a bound: %d", n)
	}

	if err := p.Disable("proj"); err != nil {
		t.Fatal(err)
	}
	if got := code(p.Decide("proj", relay.CmdReadRoom, json.RawMessage(`{"room_id":"r1"}`))); got != relay.CodeProjectNotEnabled {
		t.Errorf("after disable: %q", got)
	}
	if len(p.Summary()) != 0 {
		t.Error("a disabled project is in the summary")
	}
	if info, ok := p.Project("proj"); !ok || info.Enabled || info.Max[BoundListLimit] != 5 {
		t.Errorf("disable should keep the block: %+v", info)
	}
	if err := p.Disable("nope"); err == nil {
		t.Error("disabling an unknown project succeeded")
	}

	for _, bad := range []struct {
		project     string
		cmds, rooms []string
		msg         string
	}{
		{"", nil, nil, "invalid project id ''"},
		{"a b", nil, nil, "invalid project id 'a b'"},
		{"p", []string{"read_rooms"}, nil, "unknown command 'read_rooms'"},
		{"p", nil, []string{"*"}, "invalid room id '*'"},
		{"p", nil, []string{"../r"}, "invalid room id '../r'"},
	} {
		err := p.Enable(bad.project, bad.cmds, bad.rooms)
		if err == nil || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("Enable(%q, %v, %v) = %v, want %q", bad.project, bad.cmds, bad.rooms, err, bad.msg)
		}
	}
	if _, ok := p.Project("p"); ok {
		t.Error("a refused Enable left a project behind")
	}
}

// TestHiddenRoomLooksMissing: a room the policy hides gets the very error a
// room that does not exist gets, so a caller cannot probe for rooms.
func TestHiddenRoomLooksMissing(t *testing.T) {
	p := New()
	if err := p.Enable("proj", nil, []string{"visible"}); err != nil {
		t.Fatal(err)
	}
	got := p.Decide("proj", relay.CmdReadRoom, json.RawMessage(`{"room_id":"secret"}`))
	if !reflect.DeepEqual(got, relay.RoomNotFound("secret")) {
		t.Errorf("got %#v, want %#v", got, relay.RoomNotFound("secret"))
	}
}

// TestOnlyEnableAndDisableEdit guards the rule that the policy changes only
// through the owner's local calls (the CLI and the local API, agent/localapi:
// Enable, Disable, ApplyEnable, SetProject, SetProvider): adding a method to *Policy
// means deciding here whether it edits, and an editing one must not be
// reachable from the agent's network path.
func TestOnlyEnableAndDisableEdit(t *testing.T) {
	var got []string
	typ := reflect.TypeFor[*Policy]()
	for i := range typ.NumMethod() {
		got = append(got, typ.Method(i).Name)
	}
	want := []string{"ApplyEnable", "Decide", "Disable", "Enable", "InFlight", "Marshal", "Max", "Notifications", "Pending", "Project", "Projects", "Provider", "RateOf", "Save", "ServesRoom", "SetProject", "SetProvider", "Summary"} // Provider, Pending read; SetProvider edits (roomrelay provider, PUT policy/provider)
	if !slices.Equal(got, want) {
		t.Errorf("*Policy methods %v, want %v: classify the new one as reader or editor", got, want)
	}
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestLimiter(t *testing.T) {
	p, err := Parse([]byte("project fast\n enabled yes\n commands read_room\n rate 2/s burst 3\n" +
		"project slow\n enabled yes\n commands read_room\n rate 1/h burst 1\n" +
		"project off\n enabled no\n rate 1/h burst 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := NewLimiter(clk.now)

	for i := range 3 { // the burst
		if err := l.Allow(p, "fast", relay.CmdReadRoom); err != nil {
			t.Fatalf("burst call %d: %v", i, err)
		}
	}
	err = l.Allow(p, "fast", relay.CmdReadRoom)
	if code(err) != relay.CodeRateLimited || !strings.Contains(err.Error(), "2/s burst 3 for reads; retry in 1s") {
		t.Fatalf("over the burst: %v", err)
	}
	if !relay.AsError(err).Retryable {
		t.Error("rate_limited should be retryable")
	}
	clk.advance(499 * time.Millisecond) // not yet a whole token
	if code(l.Allow(p, "fast", relay.CmdReadRoom)) != relay.CodeRateLimited {
		t.Error("a token appeared early")
	}
	clk.advance(time.Millisecond)
	if err := l.Allow(p, "fast", relay.CmdReadRoom); err != nil {
		t.Errorf("after 500ms at 2/s: %v", err)
	}
	clk.advance(time.Hour) // refills to the burst, no further
	for i := range 3 {
		if err := l.Allow(p, "fast", relay.CmdReadRoom); err != nil {
			t.Fatalf("after an idle hour, call %d: %v", i, err)
		}
	}
	if code(l.Allow(p, "fast", relay.CmdReadRoom)) != relay.CodeRateLimited {
		t.Error("bucket overfilled past its burst")
	}

	// Projects are independent.
	if err := l.Allow(p, "slow", relay.CmdReadRoom); err != nil {
		t.Fatal(err)
	}
	err = l.Allow(p, "slow", relay.CmdReadRoom)
	if code(err) != relay.CodeRateLimited || !strings.Contains(err.Error(), "retry in 3600s") {
		t.Errorf("slow: %v", err)
	}
	// A clock stepping back adds no tokens.
	clk.advance(-2 * time.Hour)
	if code(l.Allow(p, "slow", relay.CmdReadRoom)) != relay.CodeRateLimited {
		t.Error("a clock step back added tokens")
	}

	// Not enabled or unknown: one shared bucket of refusals at the default
	// rate, whose refusal names no project.
	refused := 0
	for i := range DefaultRate.Burst + 5 {
		name := "off"
		if i%2 == 1 {
			name = "unknown"
		}
		if err := l.Allow(p, name, relay.CmdReadRoom); err != nil {
			refused++
			if strings.Contains(err.Error(), name) {
				t.Errorf("the refusal names the project: %v", err)
			}
		}
	}
	if refused != 5 {
		t.Errorf("%d of %d refusals limited, want 5 past the burst of %d", refused, DefaultRate.Burst+5, DefaultRate.Burst)
	}
	if l.buckets.Len() != 3 {
		t.Errorf("%d buckets, want 3 (fast, slow, refused)", l.buckets.Len())
	}
	// Writes have a bucket of their own: a drained read bucket does not
	// refuse them, and they do not refill reads.
	if err := l.Allow(p, "slow", relay.CmdProposeRoomSnippetApp); err != nil {
		t.Errorf("a write behind exhausted reads: %v", err)
	}
	if err := l.Allow(p, "slow", relay.CmdProposeRoomSnippetApp); code(err) != relay.CodeRateLimited || !strings.Contains(err.Error(), "for writes") {
		t.Errorf("second write at 1/h: %v", err)
	}

	// A reload with a lower burst caps the bucket.
	clk.advance(10 * time.Hour)
	p2, _ := Parse([]byte("project fast\n enabled yes\n rate 2/s burst 1\n"))
	if l.Allow(p2, "fast", relay.CmdReadRoom) != nil || code(l.Allow(p2, "fast", relay.CmdReadRoom)) != relay.CodeRateLimited {
		t.Error("the new burst of 1 was not applied")
	}
}

func TestSaveLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "conf", "policy")
	p, err := Load(path)
	if err != nil || len(p.Projects()) != 0 {
		t.Fatalf("missing file: %v %v", p, err)
	}
	if err := p.Enable("proj", []string{relay.CmdListRoomApps}, []string{"r1"}); err != nil {
		t.Fatal(err)
	}
	if err := p.Save(path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %04o, want 0600", fi.Mode().Perm())
	}
	q, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(q.Projects(), p.Projects()) {
		t.Errorf("loaded %v, saved %v", q.Projects(), p.Projects())
	}
	// Saving again replaces the file and leaves no temporary behind.
	if err := q.Disable("proj"); err != nil {
		t.Fatal(err)
	}
	if err := q.Save(path); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want the policy alone", len(entries))
	}
	r, err := Load(path)
	if err != nil || len(r.Summary()) != 0 {
		t.Errorf("after disable+save: %v %v", r.Summary(), err)
	}

	if err := os.WriteFile(path, []byte("project p\n enabled maybe\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path)
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line != 2 || pe.Directive != "enabled" {
		t.Errorf("bad file: %v", err)
	}
	if runtime.GOOS != "windows" {
		if err := os.Chmod(path, 0o666); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
			t.Errorf("world-writable file: %v", err)
		}
	}
}

// TestNotifications: desktop notifications of proposals are on unless the
// policy says "notify off"; a policy edited through Enable keeps the
// setting.
func TestNotifications(t *testing.T) {
	for src, want := range map[string]bool{
		"":                        true,
		"version 1\n":             true,
		"notify on\n":             true,
		"notify off\n":            false,
		"version 1\nnotify off\n": false,
	} {
		p, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if got := p.Notifications(); got != want {
			t.Errorf("%q: Notifications() = %v, want %v", src, got, want)
		}
	}
	if !(*Policy)(nil).Notifications() || !New().Notifications() {
		t.Error("no policy: notifications should be on")
	}
	p, _ := Parse([]byte("notify off\n"))
	if err := p.Enable("proj", nil, nil); err != nil {
		t.Fatal(err)
	}
	q, err := Parse(p.Marshal())
	if err != nil || q.Notifications() {
		t.Errorf("after Enable and a round trip: notifications %v, err %v\n%s", q.Notifications(), err, p.Marshal())
	}
}

// TestProvider: the room provider is builtin unless the policy says
// "provider app"; the choice survives an edit; anything else is refused.
func TestProvider(t *testing.T) {
	for src, want := range map[string]string{
		"":                          ProviderBuiltin,
		"provider builtin\n":        ProviderBuiltin,
		"provider app\n":            ProviderApp,
		"version 1\nprovider app\n": ProviderApp,
	} {
		p, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if got := p.Provider(); got != want {
			t.Errorf("%q: Provider() = %q, want %q", src, got, want)
		}
	}
	for _, src := range []string{"provider cloud\n", "provider\n", "provider app\nprovider app\n", "project p\n  enabled yes\nprovider app\n"} {
		if _, err := Parse([]byte(src)); err == nil || !strings.Contains(err.Error(), "provider") {
			t.Errorf("%q: err %v, want a refusal naming provider", src, err)
		}
	}
	p, _ := Parse([]byte("provider app\n"))
	if err := p.Enable("proj", nil, nil); err != nil {
		t.Fatal(err)
	}
	q, err := Parse(p.Marshal())
	if err != nil || q.Provider() != ProviderApp {
		t.Errorf("after Enable and a round trip: provider %q, err %v\n%s", q.Provider(), err, p.Marshal())
	}
}

// TestPendingBounds: the pending bounds default, can be raised up to
// MaxPending and lowered, and survive Marshal.
func TestPendingBounds(t *testing.T) {
	p, err := Parse([]byte("project a\n enabled yes\nproject b\n enabled yes\n max pending.room 3\n max pending.project 500\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r, pr := p.Pending("a"); r != DefaultPendingPerRoom || pr != DefaultPendingPerProject {
		t.Errorf("defaults: %d %d", r, pr)
	}
	if r, pr := p.Pending("b"); r != 3 || pr != 500 {
		t.Errorf("set: %d %d", r, pr)
	}
	q, err := Parse(p.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if r, pr := q.Pending("b"); r != 3 || pr != 500 {
		t.Errorf("after Marshal: %d %d", r, pr)
	}
	if _, err := Parse([]byte("project a\n enabled yes\n max pending.room 1001\n")); err == nil || !strings.Contains(err.Error(), "from 1 to 1000") {
		t.Errorf("above MaxPending: %v", err)
	}
}

// TestSetProvider: the selection is written as the provider directive, and
// only builtin or app is accepted.
func TestSetProvider(t *testing.T) {
	p := New()
	if err := p.Enable("proj", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.SetProvider("cloud"); err == nil {
		t.Fatal("SetProvider(cloud) accepted")
	}
	if err := p.SetProvider(ProviderApp); err != nil {
		t.Fatal(err)
	}
	back, err := Parse(p.Marshal())
	if err != nil || back.Provider() != ProviderApp {
		t.Fatalf("marshalled policy reads back provider %q (%v):\n%s", back.Provider(), err, p.Marshal())
	}
}
