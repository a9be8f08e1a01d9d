//go:build linux

package service_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/packaging"
	"github.com/roomrelay/roomrelay/packaging/service"
	"github.com/roomrelay/roomrelay/packaging/service/servicetest"
)

func noLeftovers(t *testing.T, w *servicetest.World, what string) {
	t.Helper()
	if left := w.Leftovers(); len(left) > 0 {
		t.Errorf("%s left: %v\nsystemctl calls:\n%s", what, left, w.Calls())
	}
}

func TestLifecycle(t *testing.T) {
	w := servicetest.New(t)
	cfg := w.Config()
	name := servicetest.Username()

	r, err := service.Install(ctx, cfg)
	must(t, err)
	if s := r.Spec; s.Kind != "per-user systemd service" || s.UnitPath != w.UnitPath() || s.Exe != w.Exe ||
		strings.Join(s.Args(), " ") != "run --home "+w.RoomrelayHome {
		t.Errorf("installed spec: %+v args %v", s, s.Args())
	}
	if !strings.Contains(r.BootNote, "sudo loginctl enable-linger "+name) || !r.NotEnrolled {
		t.Errorf("install of a device not enrolled, without lingering: %+v", r)
	}
	got, err := os.ReadFile(w.UnitPath())
	if err != nil {
		t.Fatalf("no unit file after install: %v", err)
	}
	want, err := packaging.SystemdUserUnit(packaging.Params{Exec: w.Exe, Args: []string{"run", "--home", w.RoomrelayHome}})
	must(t, err)
	if string(got) != want {
		t.Errorf("installed unit differs from packaging.SystemdUserUnit:\n%s\nwant:\n%s", got, want)
	}
	if c := w.Calls(); !strings.Contains(c, "enable --user roomrelay.service") || !strings.Contains(c, "daemon-reload --user") {
		t.Errorf("install did not enable and reload the unit; systemctl calls:\n%s", c)
	}

	rep, err := service.Status(ctx, cfg)
	must(t, err)
	if rep.State != service.StateStopped || !rep.Installed || rep.Running || rep.UnitFile != w.UnitPath() ||
		!strings.Contains(rep.Problem, "installed but not running") || !strings.Contains(rep.Starts, "enable-linger") {
		t.Errorf("status after install: %+v", rep)
	}

	_, err = service.Install(ctx, cfg)
	refused(t, "second install", err, device.KindFailed, "already installed", w.UnitPath())
	if again, _ := os.ReadFile(w.UnitPath()); string(again) != want {
		t.Errorf("a refused second install changed the unit file")
	}

	s, err := service.Control(ctx, cfg, service.Start)
	must(t, err)
	if s.Kind != "per-user systemd service" {
		t.Errorf("start: kind %q", s.Kind)
	}
	if c := w.Calls(); !strings.Contains(c, "--user start roomrelay.service") {
		t.Errorf("start did not run systemctl --user start; calls:\n%s", c)
	}
	rep, err = service.Status(ctx, cfg)
	must(t, err)
	if rep.State != service.StateRunning || !rep.Running || !rep.Installed || rep.Problem != "" {
		t.Errorf("status of a started service: %+v", rep)
	}

	u, err := service.Uninstall(ctx, cfg)
	must(t, err)
	if u.ManagerErr != nil || u.Spec.Paths.Config != filepath.Join(w.RoomrelayHome, "config") {
		t.Errorf("uninstall: %+v", u)
	}
	noLeftovers(t, w, "uninstall")
	if c := w.Calls(); !strings.Contains(c, "stop --user roomrelay.service") || !strings.Contains(c, "disable --user roomrelay.service") {
		t.Errorf("uninstall did not stop and disable; systemctl calls:\n%s", c)
	}
	// A failed unit stays loaded ("not-found failed") after its file is
	// removed unless systemd is told to forget it (seen on a real manager:
	// .ci/systemd-tests).
	if c := w.Calls(); !strings.Contains(c, "--user reset-failed roomrelay.service") {
		t.Errorf("uninstall did not reset-failed the unit; systemctl calls:\n%s", c)
	}

	_, err = service.Uninstall(ctx, cfg)
	refused(t, "uninstall again", err, device.KindFailed, "not installed", "nothing to uninstall", "sudo roomrelay uninstall --system")
	for _, verb := range []service.Verb{service.Start, service.Stop, service.Restart} {
		_, err = service.Control(ctx, cfg, verb)
		refused(t, string(verb)+" when not installed", err, device.KindFailed, "not installed", "roomrelay install")
	}
	rep, err = service.Status(ctx, cfg)
	must(t, err)
	if rep.State != service.StateNotInstalled || rep.Installed || !strings.Contains(rep.Problem, "not installed") {
		t.Errorf("status when not installed: %+v", rep)
	}
}

// TestInstallRollback: when the service manager refuses a step, Install
// fails and nothing stays behind (no unit file, no enable link), so a
// retry works.
func TestInstallRollback(t *testing.T) {
	for _, fail := range []string{"enable", "daemon-reload", "enable disable"} {
		t.Run(strings.ReplaceAll(fail, " ", "+"), func(t *testing.T) {
			w := servicetest.New(t)
			w.FailVerbs(fail)
			_, err := service.Install(ctx, w.Config())
			refused(t, "install", err, device.KindFailed, "nothing was left installed", "service manager refused")
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Errorf("the service manager's failure is not in the error's chain: %v", err)
			}
			noLeftovers(t, w, "failed install")
			w.FailVerbs("")
			_, err = service.Install(ctx, w.Config())
			must(t, err)
		})
	}
}

// TestUninstallFinishesTheJob: when the service manager fails to disable
// the unit, Uninstall still removes the file and the enable link, and says
// what the manager reported.
func TestUninstallFinishesTheJob(t *testing.T) {
	w := servicetest.New(t)
	_, err := service.Install(ctx, w.Config())
	must(t, err)
	w.FailVerbs("disable")
	u, err := service.Uninstall(ctx, w.Config())
	must(t, err)
	if u.ManagerErr == nil || !strings.Contains(u.ManagerErr.Error(), "exit status") {
		t.Errorf("uninstall with disable refused: manager error %v", u.ManagerErr)
	}
	noLeftovers(t, w, "uninstall with disable refused")
}

func TestStartFailureShowsSystemctl(t *testing.T) {
	w := servicetest.New(t)
	_, err := service.Install(ctx, w.Config())
	must(t, err)
	w.FailVerbs("start")
	_, err = service.Control(ctx, w.Config(), service.Start)
	refused(t, "start", err, device.KindFailed, "start: Failed to start roomrelay.service: fake refusal", "see: journalctl --user -u roomrelay -e")
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Errorf("systemctl's exit status is not in the error's chain: %v", err)
	}
}

// TestStatusAutoRestart: between a crash and the restart systemd
// schedules, the unit is "activating" with no process; that is not running
// (kardianos alone would say it is).
func TestStatusAutoRestart(t *testing.T) {
	w := servicetest.New(t)
	_, err := service.Install(ctx, w.Config())
	must(t, err)
	_, err = service.Control(ctx, w.Config(), service.Start)
	must(t, err)
	w.SubState("auto-restart")
	rep, err := service.Status(ctx, w.Config())
	must(t, err)
	if rep.State != service.StateRestarting || rep.Running || !rep.Installed ||
		!strings.Contains(rep.Problem, "systemd restarts it") || !strings.Contains(rep.Problem, "journalctl --user -u roomrelay") {
		t.Errorf("status while auto-restarting: %+v", rep)
	}
}

// TestSystemctlSeam: the calls the package makes itself go through
// Config.Systemctl (kardianos' own go to the systemctl on PATH).
func TestSystemctlSeam(t *testing.T) {
	w := servicetest.New(t)
	_, err := service.Install(ctx, w.Config())
	must(t, err)
	_, err = service.Control(ctx, w.Config(), service.Start)
	must(t, err)

	var calls []string
	cfg := w.Config()
	cfg.Systemctl = func(_ context.Context, user bool, args ...string) (string, error) {
		if !user {
			t.Errorf("a per-user service ran systemctl without --user: %v", args)
		}
		calls = append(calls, strings.Join(args, " "))
		if args[0] == "show" {
			return "auto-restart", nil // kardianos' is-active says active
		}
		return "", nil
	}
	rep, err := service.Status(ctx, cfg)
	must(t, err)
	if rep.State != service.StateRestarting {
		t.Errorf("status with SubState auto-restart from the seam: %+v", rep)
	}
	if want := "show-environment|show --property=SubState --value roomrelay.service"; strings.Join(calls, "|") != want {
		t.Errorf("systemctl calls through the seam: %q, want %q", calls, want)
	}

	cfg.Systemctl = func(context.Context, bool, ...string) (string, error) {
		return "Failed to connect to bus", errors.New("exit status 1")
	}
	_, err = service.Status(ctx, cfg)
	refused(t, "a silent user manager", err, device.KindUnavailable, "the systemd user manager does not answer (systemctl --user: Failed to connect to bus)")
}

// TestNoSession covers the machines without a place to install into;
// every workflow refuses (KindUnavailable) before writing anything.
func TestNoSession(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, w *servicetest.World)
		want  string
	}{
		{"no XDG_RUNTIME_DIR", func(t *testing.T, w *servicetest.World) { delete(w.Env, "XDG_RUNTIME_DIR") }, "no systemd user session: XDG_RUNTIME_DIR is not set"},
		{"no user bus", func(t *testing.T, w *servicetest.World) { w.Env["XDG_RUNTIME_DIR"] = t.TempDir() }, "no systemd user session bus"},
		{"user manager silent", func(t *testing.T, w *servicetest.World) { w.FailVerbs("show-environment") }, "the systemd user manager does not answer"},
		{"systemd not PID 1", func(t *testing.T, w *servicetest.World) { w.SystemdRunDir = filepath.Join(w.Home, "nope") }, "systemd is not running on this machine"},
		{"no systemctl", func(t *testing.T, w *servicetest.World) { t.Setenv("PATH", t.TempDir()) }, "systemd not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := servicetest.New(t)
			tc.setup(t, w)
			cfg := w.Config()
			_, err := service.Install(ctx, cfg)
			refused(t, "install", err, device.KindUnavailable, tc.want)
			_, err = service.Uninstall(ctx, cfg)
			refused(t, "uninstall", err, device.KindUnavailable, tc.want)
			_, err = service.Control(ctx, cfg, service.Start)
			refused(t, "start", err, device.KindUnavailable, tc.want)
			_, err = service.Status(ctx, cfg)
			refused(t, "status", err, device.KindUnavailable, tc.want)
			noLeftovers(t, w, "refused install")
		})
	}
}

func TestLingerNote(t *testing.T) {
	w := servicetest.New(t)
	name := servicetest.Username()
	w.LingerOn(name)
	r, err := service.Install(ctx, w.Config())
	must(t, err)
	if r.BootNote != "  it starts at boot (lingering is enabled for "+name+")" {
		t.Errorf("boot note with lingering on: %q", r.BootNote)
	}
	rep, err := service.Status(ctx, w.Config())
	must(t, err)
	if rep.Starts != "it starts at boot (lingering is enabled for "+name+")" {
		t.Errorf("status with lingering on: starts %q", rep.Starts)
	}
}

func TestSystemRefusals(t *testing.T) {
	w := servicetest.New(t)
	cfg := w.Config()
	cfg.System = true
	w.Euid = 1000
	_, err := service.Install(ctx, cfg)
	refused(t, "--system as a user", err, device.KindFailed, "--system needs root: run it with sudo")
	for _, verb := range []service.Verb{service.Start, service.Stop, service.Restart} {
		_, err = service.Control(ctx, cfg, verb)
		refused(t, string(verb)+" --system as a user", err, device.KindFailed, "--system needs root")
	}

	// As root: every refusal comes before anything is written to
	// /etc/systemd/system, so the test never installs a system service.
	w.Euid = 0
	noHome := cfg
	noHome.Home = ""
	_, err = service.Install(ctx, noHome)
	refused(t, "--system without --home", err, device.KindUsage, "--system needs --home DIR")

	_, err = service.Install(ctx, cfg)
	refused(t, "--system not enrolled", err, device.KindNotEnrolled, "roomrelay enroll --home "+w.RoomrelayHome+" --credential-store file")

	paths, err := device.ResolvePaths(cfg.Home, cfg.Getenv)
	must(t, err)
	must(t, device.SaveConfig(paths, &device.Config{Hub: "https://hub.example", DeviceID: "dev-1", CredentialStore: "keyring"}))
	_, err = service.Install(ctx, cfg)
	refused(t, "--system with the keyring", err, device.KindFailed, "a system service cannot reach", "--credential-store file", `credential store "keyring"`)
	if c := w.Calls(); strings.Contains(c, "enable") || strings.Contains(c, "daemon-reload") {
		t.Errorf("a refused --system install called systemctl:\n%s", c)
	}
}

func TestRefusesSudoAndGoRun(t *testing.T) {
	w := servicetest.New(t)
	w.Euid = 0
	w.Env["SUDO_USER"] = "ann"
	_, err := service.Install(ctx, w.Config())
	refused(t, "install under sudo", err, device.KindFailed, "running under sudo", "not for ann")
	_, err = service.Status(ctx, w.Config())
	refused(t, "status under sudo", err, device.KindFailed, "running under sudo")
	delete(w.Env, "SUDO_USER")
	w.Euid = 1000
	cfg := w.Config()
	cfg.Executable = filepath.Join(os.TempDir(), "go-build1234", "b001", "exe", "roomrelay")
	_, err = service.Install(ctx, cfg)
	refused(t, "install from go run", err, device.KindFailed, "temporary `go run` build")
	noLeftovers(t, w, "refused install")
}
