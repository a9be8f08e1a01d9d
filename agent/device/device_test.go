package device

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/internal/tlsfiles"
)

func TestResolvePaths(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	p, err := ResolvePaths(home, func(string) string { return "" })
	if err != nil || p.Config != filepath.Join(home, "config") || p.State != filepath.Join(home, "state") || p.Data != filepath.Join(home, "data") || p.Runtime != "" {
		t.Fatalf("--home: %+v %v", p, err)
	}
	if runtime.GOOS != "linux" {
		return
	}
	state := t.TempDir()
	env := map[string]string{"XDG_STATE_HOME": state, "XDG_DATA_HOME": "relative/data", "XDG_RUNTIME_DIR": "/run/user/1000"}
	p, err = ResolvePaths("", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	uh, _ := os.UserHomeDir()
	if p.State != filepath.Join(state, "roomrelay") {
		t.Errorf("an absolute XDG_STATE_HOME is used: %s", p.State)
	}
	if p.Runtime != "/run/user/1000" {
		t.Errorf("the runtime dir (the local API's socket) is XDG_RUNTIME_DIR: %q", p.Runtime)
	}
	if p.Data != filepath.Join(uh, ".local", "share", "roomrelay") {
		t.Errorf("a relative XDG_DATA_HOME is ignored, as the spec says: %s", p.Data)
	}
}

func TestConfigFile(t *testing.T) {
	t.Parallel()
	p := testPaths(t)
	if _, err := LoadConfig(p); KindOf(err) != KindNotEnrolled || !errors.Is(err, ErrNotEnrolled) {
		t.Fatalf("no config: %v (kind %d)", err, KindOf(err))
	}
	want := &Config{Hub: "http://hub", DeviceID: "dev-1", Projects: []string{"p1"}, CredentialStore: credstore.KindFile,
		EnrolledAt: time.Now().UTC().Truncate(time.Second)}
	if err := SaveConfig(p, want); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(p.Config, ConfigFile)); err != nil || (runtime.GOOS != "windows" && st.Mode().Perm() != 0o600) { // no mode bits on Windows
		t.Fatalf("config file mode: %v %v", st.Mode(), err)
	}
	got, err := LoadConfig(p)
	if err != nil || got.DeviceID != want.DeviceID || got.Hub != want.Hub || !got.EnrolledAt.Equal(want.EnrolledAt) || !slices.Equal(got.Projects, want.Projects) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	os.WriteFile(filepath.Join(p.Config, ConfigFile), []byte(`{"hub":"http://hub"}`), 0o600)
	if _, err := LoadConfig(p); KindOf(err) != KindNotEnrolled {
		t.Errorf("a config without a device id: %v", err)
	}
	os.WriteFile(filepath.Join(p.Config, ConfigFile), []byte(`{"hub":`), 0o600)
	if _, err := LoadConfig(p); KindOf(err) != KindFailed || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("a torn config: %v", err)
	}
}

// TestDiagnose: each state the status file can be in, and what the report
// makes of it; a file that is not about the present never reads as it.
func TestDiagnose(t *testing.T) {
	t.Parallel()
	p := testPaths(t)
	if r, v := Diagnose(p); v != NotEnrolled || r.State != "not_enrolled" || !strings.Contains(r.Fix, "roomrelay enroll") {
		t.Fatalf("not enrolled: %v %+v", v, r)
	}
	enrolled := time.Now().UTC().Add(-time.Hour)
	cfg := &Config{Hub: "http://hub.example", DeviceID: "dev-1", Projects: []string{"p1"}, EnrolledAt: enrolled}
	if err := SaveConfig(p, cfg); err != nil {
		t.Fatal(err)
	}
	if r, v := Diagnose(p); v != NotRunning || r.LastRun != nil || r.CredentialStore != "OS keyring" {
		t.Fatalf("no status file: %v %+v", v, r)
	}
	live, dead := os.Getpid(), deadPID(t)
	now := time.Now().UTC()
	for _, c := range []struct {
		name    string
		st      agent.Status
		verdict Verdict
		state   string
		lastRun bool
		fix     string
	}{
		{"online", agent.Status{State: agent.StateOnline, PID: live}, Online, agent.StateOnline, false, ""},
		{"an earlier identity's agent", agent.Status{State: agent.StateOnline, PID: live, DeviceID: "dev-0"}, NotRunning, "not_running", false, "roomrelay run"},
		{"written before this enrollment", agent.Status{State: agent.StateOnline, PID: live, UpdatedAt: enrolled.Add(-time.Minute)}, NotRunning, "not_running", false, "roomrelay run"},
		{"killed while online", agent.Status{State: agent.StateOnline, PID: dead}, NotRunning, "not_running", true, "roomrelay run"},
		{"stopped", agent.Status{State: agent.StateStopped, PID: live}, NotRunning, "not_running", true, "roomrelay run"},
		{"revoked, exited", agent.Status{State: agent.StateNeedsEnrollment, PID: dead}, NotEnrolled, agent.StateNeedsEnrollment, true, "--hub http://hub.example --code"},
		{"revoked, running", agent.Status{State: agent.StateNeedsEnrollment, PID: live}, NotEnrolled, agent.StateNeedsEnrollment, false, "--hub http://hub.example --code"},
		{"backing off", agent.Status{State: agent.StateBackoff, PID: live, LastError: "dial: connection refused"}, NotOnline, agent.StateBackoff, false, "hub at http://hub.example is up"},
		{"untrusted certificate", agent.Status{State: agent.StateBackoff, PID: live, LastError: "x509: " + tlsfiles.UntrustedHint}, NotOnline, agent.StateBackoff, false, "--ca-file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := c.st
			if st.DeviceID == "" {
				st.DeviceID = cfg.DeviceID
			}
			if st.UpdatedAt.IsZero() {
				st.UpdatedAt = now
			}
			writeStatus(t, p, st)
			r, v := Diagnose(p)
			if v != c.verdict || r.State != c.state || (r.LastRun != nil) != c.lastRun || !strings.Contains(r.Fix, c.fix) {
				t.Fatalf("verdict %v state %q last run %v fix %q", v, r.State, r.LastRun, r.Fix)
			}
			if r.Agent != nil && c.lastRun {
				t.Fatalf("a dead agent's facts shown as the present: %+v", r.Agent)
			}
			_, running := RunningAgent(p, cfg)
			if want := r.Agent != nil; running != want {
				t.Fatalf("RunningAgent %v, Diagnose shows a running agent: %v", running, want)
			}
		})
	}
}

func testPaths(t *testing.T) Paths {
	t.Helper()
	p, err := ResolvePaths(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeStatus(t *testing.T, p Paths, st agent.Status) {
	t.Helper()
	b, _ := json.Marshal(st)
	if err := os.WriteFile(filepath.Join(p.State, agent.StatusFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// deadPID is the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// TestXDGConfigHomeMovesTheConfigDir pins what docs/localapi.md says: on
// Linux an absolute XDG_CONFIG_HOME moves the config dir, and with it the
// discovery file localapi.json and the policy; a relative one is refused
// (Go's os.UserConfigDir), naming --home; --home wins over it.
func TestXDGConfigHomeMovesTheConfigDir(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("XDG_CONFIG_HOME is read on Linux and other Unixes but macOS")
	}
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	p, err := ResolvePaths("", func(string) string { return "" })
	if err != nil || p.Config != filepath.Join(cfg, "roomrelay") {
		t.Fatalf("config dir %q (%v), want %s", p.Config, err, filepath.Join(cfg, "roomrelay"))
	}
	home := t.TempDir()
	if p, err := ResolvePaths(home, func(string) string { return "" }); err != nil || p.Config != filepath.Join(home, "config") {
		t.Fatalf("--home: config dir %q (%v)", p.Config, err)
	}
	t.Setenv("XDG_CONFIG_HOME", "relative/cfg")
	if _, err := ResolvePaths("", func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "--home") {
		t.Fatalf("a relative XDG_CONFIG_HOME: %v, want refused naming --home", err)
	}
}
