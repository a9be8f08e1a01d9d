//go:build linux

package cli

// The service commands' surface: what they print, with --json too, and the
// exit code each outcome gets. The workflows themselves (the unit file
// written, the systemctl calls, nothing left behind after a refusal or a
// rollback) are tested in packaging/service on the same fake machine.

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/packaging/service"
	"github.com/roomrelay/roomrelay/packaging/service/servicetest"
)

type svcWorld struct {
	*servicetest.World
	t *testing.T
}

// newSvcWorld builds a machine with a systemd user session in temporary
// directories (servicetest) and points the service commands at it.
func newSvcWorld(t *testing.T) *svcWorld {
	w := servicetest.New(t)
	old := configureService
	configureService = w.Apply
	t.Cleanup(func() { configureService = old })
	return &svcWorld{World: w, t: t}
}

func (w *svcWorld) run(args ...string) (int, string, string) {
	w.t.Helper()
	var out, errb bytes.Buffer
	e := &Env{Stdout: &out, Stderr: &errb, Getenv: w.Getenv, Executable: w.Exe}
	code := Main(context.Background(), args, e)
	return code, out.String(), errb.String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func expectRun(t *testing.T, what string, code int, out, errOut string, wantCode int, wants ...string) {
	t.Helper()
	if code != wantCode {
		t.Errorf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", what, code, wantCode, out, errOut)
	}
	for _, want := range wants {
		if !strings.Contains(out+errOut, want) {
			t.Errorf("%s: output lacks %q\nstdout:\n%s\nstderr:\n%s", what, want, out, errOut)
		}
	}
}

func TestServiceLifecycle(t *testing.T) {
	w := newSvcWorld(t)
	name := servicetest.Username()

	code, out, errOut := w.run("install")
	expectRun(t, "install", code, out, errOut, ExitOK, "per-user systemd service", w.UnitPath(), "roomrelay start",
		"it runs: "+w.Exe+" run --home "+w.RoomrelayHome, "sudo loginctl enable-linger "+name, "not enrolled yet")

	code, out, errOut = w.run("service", "status")
	expectRun(t, "status after install", code, out, errOut, ExitFailure, "installed but not running", "enable-linger")

	code, out, errOut = w.run("install")
	expectRun(t, "second install", code, out, errOut, ExitFailure, "already installed", w.UnitPath())

	code, out, errOut = w.run("start")
	expectRun(t, "start", code, out, errOut, ExitOK, "started the roomrelay per-user systemd service")
	code, out, errOut = w.run("service", "status", "--json")
	var r service.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("service status --json: %v\n%s", err, out)
	}
	if code != ExitOK || !r.Running || !r.Installed || r.UnitFile != w.UnitPath() {
		t.Errorf("status of a started service: exit %d, %+v %s", code, r, errOut)
	}
	code, out, errOut = w.run("restart")
	expectRun(t, "restart", code, out, errOut, ExitOK, "restarted the roomrelay per-user systemd service", "`roomrelay status` shows")
	code, out, errOut = w.run("stop")
	expectRun(t, "stop", code, out, errOut, ExitOK, "stopped the roomrelay per-user systemd service")

	code, out, errOut = w.run("uninstall")
	expectRun(t, "uninstall", code, out, errOut, ExitOK, "uninstalled", "kept: config and enrollment in "+filepath.Join(w.RoomrelayHome, "config"))

	code, out, errOut = w.run("uninstall")
	expectRun(t, "uninstall again", code, out, errOut, ExitFailure, "not installed", "nothing to uninstall")
	for _, verb := range []string{"start", "stop", "restart"} {
		code, out, errOut = w.run(verb)
		expectRun(t, verb+" when not installed", code, out, errOut, ExitFailure, "not installed", "roomrelay install")
	}
	code, out, errOut = w.run("service", "status")
	expectRun(t, "status when not installed", code, out, errOut, ExitUnavailable, "not installed")
	code, out, errOut = w.run("service", "status", "--json")
	r = service.Report{}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("service status --json: %v\n%s", err, out)
	}
	if code != ExitUnavailable || r.Installed || r.State != "not_installed" || r.Kind != "per-user systemd service" {
		t.Errorf("status --json when not installed: exit %d, %+v %s", code, r, errOut)
	}
}

// TestServiceInstallRollback: when the service manager refuses a step, the
// command fails with exit 1 and says nothing stayed behind; a retry works.
func TestServiceInstallRollback(t *testing.T) {
	for _, fail := range []string{"enable", "daemon-reload", "enable disable"} {
		t.Run(strings.ReplaceAll(fail, " ", "+"), func(t *testing.T) {
			w := newSvcWorld(t)
			w.FailVerbs(fail)
			code, out, errOut := w.run("install")
			expectRun(t, "install", code, out, errOut, ExitFailure, "nothing was left installed", "service manager refused")
			w.FailVerbs("")
			code, out, errOut = w.run("install")
			expectRun(t, "retry", code, out, errOut, ExitOK, "installed")
		})
	}
}

func TestServiceStartFailureShowsSystemctl(t *testing.T) {
	w := newSvcWorld(t)
	code, out, errOut := w.run("install")
	expectRun(t, "install", code, out, errOut, ExitOK)
	w.FailVerbs("start")
	code, out, errOut = w.run("start")
	expectRun(t, "start", code, out, errOut, ExitFailure, "fake refusal", "journalctl --user -u roomrelay")
}

// TestServiceStatusAutoRestart: between a crash and the restart systemd
// schedules, the unit is "activating" with no process; that is not running
// (kardianos alone would say it is).
func TestServiceStatusAutoRestart(t *testing.T) {
	w := newSvcWorld(t)
	code, out, errOut := w.run("install")
	expectRun(t, "install", code, out, errOut, ExitOK)
	code, out, errOut = w.run("start")
	expectRun(t, "start", code, out, errOut, ExitOK)
	w.SubState("auto-restart")
	code, out, errOut = w.run("service", "status")
	expectRun(t, "status while auto-restarting", code, out, errOut, ExitFailure, "restarting", "systemd restarts it", "journalctl --user -u roomrelay")
	code, out, errOut = w.run("service", "status", "--json")
	var r service.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("service status --json: %v\n%s", err, out)
	}
	if code != ExitFailure || r.Running || r.State != "restarting" || !r.Installed {
		t.Errorf("status while auto-restarting: exit %d, %+v %s", code, r, errOut)
	}
}

// TestServiceNoSession: a machine without a place to install into is exit
// 4 for every service command, with the message that says why.
func TestServiceNoSession(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(w *svcWorld)
		want  string
	}{
		{"no XDG_RUNTIME_DIR", func(w *svcWorld) { delete(w.Env, "XDG_RUNTIME_DIR") }, "no systemd user session: XDG_RUNTIME_DIR is not set"},
		{"no user bus", func(w *svcWorld) { w.Env["XDG_RUNTIME_DIR"] = w.t.TempDir() }, "no systemd user session bus"},
		{"user manager silent", func(w *svcWorld) { w.FailVerbs("show-environment") }, "the systemd user manager does not answer"},
		{"systemd not PID 1", func(w *svcWorld) { w.SystemdRunDir = filepath.Join(w.Home, "nope") }, "systemd is not running on this machine"},
		{"no systemctl", func(w *svcWorld) { w.t.Setenv("PATH", w.t.TempDir()) }, "systemd not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newSvcWorld(t)
			tc.setup(w)
			for _, cmd := range [][]string{{"install"}, {"uninstall"}, {"start"}, {"service", "status"}} {
				code, out, errOut := w.run(cmd...)
				expectRun(t, strings.Join(cmd, " "), code, out, errOut, ExitUnavailable, tc.want)
			}
			// --json gets the failure as an object on stdout too.
			code, out, errOut := w.run("service", "status", "--json")
			var f jsonFailure
			if err := json.Unmarshal([]byte(out), &f); err != nil {
				t.Fatalf("service status --json: %v\n%s", err, out)
			}
			if code != ExitUnavailable || f.Error.Code != "unavailable" || f.Error.ExitCode != ExitUnavailable || !strings.Contains(f.Error.Message, tc.want) {
				t.Errorf("service status --json: exit %d, %+v %s", code, f, errOut)
			}
		})
	}
}

func TestServiceLingerNote(t *testing.T) {
	w := newSvcWorld(t)
	name := servicetest.Username()
	w.LingerOn(name)
	code, out, errOut := w.run("install")
	expectRun(t, "install", code, out, errOut, ExitOK, "it starts at boot (lingering is enabled for "+name+")")
	if strings.Contains(out, "enable-linger") {
		t.Errorf("install suggests enable-linger although lingering is on:\n%s", out)
	}
	code, out, errOut = w.run("service", "status")
	expectRun(t, "status", code, out, errOut, ExitFailure, "starts:    it starts at boot (lingering is enabled for "+name+")")
}

func TestServiceSystemRefusals(t *testing.T) {
	w := newSvcWorld(t)
	w.Euid = 1000
	code, out, errOut := w.run("install", "--system")
	expectRun(t, "--system as a user", code, out, errOut, ExitFailure, "--system needs root: run it with sudo")

	// As root: every refusal comes before anything is written to
	// /etc/systemd/system, so the test never installs a system service.
	w.Euid = 0
	delete(w.Env, "ROOMRELAY_HOME")
	code, out, errOut = w.run("install", "--system")
	expectRun(t, "--system without --home", code, out, errOut, ExitUsage, "--system needs --home DIR")
	if !strings.Contains(errOut, "Usage: roomrelay install [--system] [--home DIR]") {
		t.Errorf("a usage mistake is not followed by the help:\n%s", errOut)
	}

	code, out, errOut = w.run("install", "--system", "--home", w.RoomrelayHome)
	expectRun(t, "--system not enrolled", code, out, errOut, ExitNotEnrolled, "--credential-store file")

	p, err := device.ResolvePaths(w.RoomrelayHome, func(string) string { return "" })
	must(t, err)
	must(t, device.SaveConfig(p, &device.Config{Hub: "https://hub.example", DeviceID: "dev-1", CredentialStore: "keyring"}))
	code, out, errOut = w.run("install", "--system", "--home", w.RoomrelayHome)
	expectRun(t, "--system with the keyring", code, out, errOut, ExitFailure, "a system service cannot reach", "--credential-store file")
}

func TestServiceRefusesSudoAndGoRun(t *testing.T) {
	w := newSvcWorld(t)
	w.Euid = 0
	w.Env["SUDO_USER"] = "ann"
	code, out, errOut := w.run("install")
	expectRun(t, "install under sudo", code, out, errOut, ExitFailure, "running under sudo", "not for ann")
	delete(w.Env, "SUDO_USER")
	w.Euid = 1000
	w.Exe = filepath.Join(os.TempDir(), "go-build1234", "b001", "exe", "roomrelay")
	code, out, errOut = w.run("install")
	expectRun(t, "install from go run", code, out, errOut, ExitFailure, "temporary `go run` build")
}
