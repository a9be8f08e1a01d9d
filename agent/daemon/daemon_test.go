package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent/provider"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/sandbox"
)

func openTest(t *testing.T) *Daemon {
	t.Helper()
	dir := t.TempDir()
	d, err := Open(context.Background(), Config{ConfigDir: filepath.Join(dir, "c"), StateDir: filepath.Join(dir, "s"), DataDir: filepath.Join(dir, "d"),
		HubURL: "http://127.0.0.1:1", DeviceID: "dev-test", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestIdleTickDoesNoWork: with nothing changed on disk, a housekeeping tick
// neither re-reads the policy nor queries the store.
func TestIdleTickDoesNoWork(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	pol := "version 1\nproject p\n  enabled yes\n  commands read_room\n"
	if err := os.WriteFile(d.policyPath(), []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d.poke(ctx, false)
	if got := d.Policy().Summary(); len(got) != 1 {
		t.Fatalf("policy not loaded: %+v", got)
	}
	loads, queries := d.stats.policyLoads.Load(), d.stats.decisionQueries.Load()
	for range 5 {
		d.poke(ctx, false)
	}
	if d.stats.policyLoads.Load() != loads || d.stats.decisionQueries.Load() != queries {
		t.Fatalf("idle ticks did work: policy loads %d→%d, decision queries %d→%d", loads, d.stats.policyLoads.Load(), queries, d.stats.decisionQueries.Load())
	}
	// A change to the policy file is picked up; so is a write to the store.
	time.Sleep(10 * time.Millisecond)
	if err := os.WriteFile(d.policyPath(), []byte(pol+"  rooms r1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.store.CreateProject(ctx, "p", "p"); err != nil {
		t.Fatal(err)
	}
	d.poke(ctx, false)
	if d.stats.policyLoads.Load() != loads+1 || d.stats.decisionQueries.Load() != queries+1 {
		t.Fatalf("changes not picked up: policy loads %d→%d, decision queries %d→%d", loads, d.stats.policyLoads.Load(), queries, d.stats.decisionQueries.Load())
	}
}

// TestOneAgentPerStateDir: a second agent on the same state dir is refused
// with what to do; once the first closed, the next one starts.
func TestOneAgentPerStateDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{ConfigDir: filepath.Join(dir, "c"), StateDir: filepath.Join(dir, "s"), DataDir: filepath.Join(dir, "d"),
		HubURL: "http://127.0.0.1:1", DeviceID: "dev-x", Token: "t"}
	first, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(context.Background(), cfg)
	if !errors.Is(err, ErrAlreadyRunning) || !strings.Contains(err.Error(), "pid ") {
		t.Fatalf("second agent: %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	again.Close()
}

// TestDamagedStoreIsReported: a rooms database that fails its check at
// open is named in the agent's status notes, and every command is refused
// without a retry hint instead of failing one by one as retryable.
func TestDamagedStoreIsReported(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{ConfigDir: filepath.Join(dir, "c"), StateDir: filepath.Join(dir, "s"), DataDir: filepath.Join(dir, "d"),
		HubURL: "http://127.0.0.1:1", DeviceID: "dev-x", Token: "t"}
	ctx := context.Background()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg.DataDir, RoomsDB)
	s, err := rooms.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateProject(ctx, "p1", "p1"); err != nil {
		t.Fatal(err)
	}
	for i := range 400 {
		if _, err := s.CreateRoom(ctx, rooms.NewRoom{ID: "room-" + strconv.Itoa(i), ProjectID: "p1", Name: strings.Repeat("n", 100)}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Two pages of room rows, well past the schema and the migration
	// records at the start of the file.
	start := (len(b) * 3 / 4) &^ 4095
	for i := start + 100; i < start+2*4096 && i < len(b); i++ {
		b[i] = 0xA5
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer d.Close()
	notes := strings.Join(d.Agent().Status().Notes, "\n")
	if !strings.Contains(notes, "is damaged") {
		t.Fatalf("status notes %q", notes)
	}
	err = d.guard(ctx, &relay.Command{ID: "c1", ProjectID: "p1", Name: relay.CmdReadRoom, Args: []byte(`{"room_id":"room-1"}`)})
	var re *relay.Error
	if !errors.As(err, &re) || re.Code != relay.CodeInternal || re.Retryable || !strings.Contains(re.Message, "damaged") {
		t.Fatalf("guard: %v", err)
	}
}

// TestBuildSummaryHidesOwnerAppText: a smoke-run failure of an app the owner
// added tells the cloud the phase, location and error class, never the
// message (which can quote the app's source); a cloud-proposed app's own
// error text goes back to the cloud that wrote it.
func TestBuildSummaryHidesOwnerAppText(t *testing.T) {
	t.Parallel()
	r := &sandbox.Result{Phase: sandbox.PhaseRender, Error: &sandbox.ErrorInfo{
		Message: "ReferenceError: OWNER_SECRET_MARKER_42 is not defined", File: "src/App.tsx", Line: 3, Column: 9}}
	owner := buildSummary(r, false)
	if strings.Contains(owner, "OWNER_SECRET") || !strings.Contains(owner, "src/App.tsx:3:9") || !strings.Contains(owner, "ReferenceError") {
		t.Errorf("owner app: %q", owner)
	}
	if cloud := buildSummary(r, true); !strings.Contains(cloud, "OWNER_SECRET_MARKER_42 is not defined") {
		t.Errorf("cloud app: %q", cloud)
	}
	b := &sandbox.Result{Phase: sandbox.PhaseBuild, BuildErrors: []sandbox.Message{{File: "src/App.tsx", Line: 1, Column: 1, Text: `Could not resolve "SECRET_IMPORT"`}}}
	if s := buildSummary(b, false); strings.Contains(s, "SECRET_IMPORT") || !strings.Contains(s, "build error") {
		t.Errorf("owner app build: %q", s)
	}
	for msg, want := range map[string]string{"TypeError: x": "TypeError", "boom": "error", "my secret: value": "error", "": "error"} {
		if got := errorClass(msg); got != want {
			t.Errorf("errorClass(%q) = %q, want %q", msg, got, want)
		}
	}
}

// TestCallerIsKeptPrintable: the caller name comes from the network; the
// device keeps it without controls or bidi overrides, cut to its bound on a
// rune boundary.
func TestCallerIsKeptPrintable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"MCP client token \"ci\" (ct_1)": "MCP client token \"ci\" (ct_1)",
		"evil\u202egnp.exe\x1b[2J":       "evilgnp.exe[2J",
		strings.Repeat("é", 200):         strings.Repeat("é", relay.MaxCallerBytes/2),
		"bad\xffutf8":                    "badutf8",
	} {
		if got := caller(&relay.Command{Caller: in}); got != want {
			t.Errorf("caller(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestProviderInFlightIsConfigured: the requests in flight to the desktop
// app follow Config.ProviderInFlight (`roomrelay run --provider-in-flight`;
// provider.TestRequestsInFlightAreBounded checks the bound), 8 unless set.
func TestProviderInFlightIsConfigured(t *testing.T) {
	t.Parallel()
	if n := openTest(t).prov.MaxInFlight(); n != provider.DefaultMaxInFlight {
		t.Errorf("default: %d requests in flight to the app, want 8", n)
	}
	dir := t.TempDir()
	d, err := Open(context.Background(), Config{ConfigDir: filepath.Join(dir, "c"), StateDir: filepath.Join(dir, "s"), DataDir: filepath.Join(dir, "d"),
		HubURL: "http://127.0.0.1:1", DeviceID: "dev-test", Token: "t", ProviderInFlight: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if n := d.prov.MaxInFlight(); n != 32 {
		t.Errorf("ProviderInFlight 32: %d requests in flight to the app", n)
	}
}
