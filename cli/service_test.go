//go:build linux

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/packaging"
)

// fakeSystemctl stands in for systemctl: it logs every call, fails the verbs
// listed in FAKE_SYSTEMCTL_FAIL with a systemd-like message, reports the
// unit's SubState as FAKE_SYSTEMCTL_SUBSTATE (auto-restart: the unit is
// "activating" between a crash and its restart), and keeps the
// enable symlink and the running state in real files, so the commands'
// file handling and rollback run for real. kardianos puts the verb first
// ("enable --user X"), the service commands put --user first.
const fakeSystemctl = `#!/bin/sh
echo "$*" >> "$FAKE_SYSTEMCTL_LOG"
verb=""
for a in "$@"; do case "$a" in -*) ;; *) verb="$a"; break;; esac; done
for f in $FAKE_SYSTEMCTL_FAIL; do
  if [ "$verb" = "$f" ]; then echo "Failed to $verb roomrelay.service: fake refusal" >&2; exit 1; fi
done
units="$HOME/.config/systemd/user"
case "$verb" in
  is-active) if [ "$FAKE_SYSTEMCTL_SUBSTATE" = auto-restart ]; then echo activating; exit 3; fi
    if [ -f "$FAKE_SYSTEMCTL_ACTIVE" ]; then echo active; exit 0; fi; echo inactive; exit 3;;
  show) echo "${FAKE_SYSTEMCTL_SUBSTATE:-running}"; exit 0;;
  list-unit-files) [ -f "$units/roomrelay.service" ] && echo "roomrelay.service enabled"; exit 0;;
  enable) mkdir -p "$units/default.target.wants" && ln -sf "$units/roomrelay.service" "$units/default.target.wants/roomrelay.service";;
  disable) rm -f "$units/default.target.wants/roomrelay.service";;
  start|restart) [ -f "$units/roomrelay.service" ] || { echo "Unit roomrelay.service not found." >&2; exit 5; }; touch "$FAKE_SYSTEMCTL_ACTIVE";;
  stop) rm -f "$FAKE_SYSTEMCTL_ACTIVE";;
esac
exit 0
`

type svcWorld struct {
	t    *testing.T
	home string // $HOME of the fake user
	exe  string // the "installed" roomrelay binary
	rh   string // --home for roomrelay's own directories
	env  map[string]string
	log  string
}

// newSvcWorld builds a machine with a systemd user session in temporary
// directories: HOME, XDG_RUNTIME_DIR with a listening bus socket, the
// systemd and linger marker directories, and the fake systemctl on PATH.
func newSvcWorld(t *testing.T) *svcWorld {
	dir := t.TempDir()
	w := &svcWorld{t: t, home: filepath.Join(dir, "home"), exe: filepath.Join(dir, "usr", "bin", "roomrelay"),
		rh: filepath.Join(dir, "rr"), log: filepath.Join(dir, "systemctl.log")}
	bin := filepath.Join(dir, "fakebin")
	rt := filepath.Join(dir, "xdg-runtime")
	for _, d := range []string{w.home, filepath.Dir(w.exe), bin, rt, filepath.Join(dir, "run-systemd"), filepath.Join(dir, "linger")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.WriteFile(filepath.Join(bin, "systemctl"), []byte(fakeSystemctl), 0o755))
	must(t, os.WriteFile(w.exe, []byte("#!/bin/sh\n"), 0o755))
	l, err := net.Listen("unix", filepath.Join(rt, "bus"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })

	oldRun, oldLinger := systemdRunDir, lingerDir
	systemdRunDir, lingerDir = filepath.Join(dir, "run-systemd"), filepath.Join(dir, "linger")
	t.Cleanup(func() { systemdRunDir, lingerDir = oldRun, oldLinger })
	t.Setenv("HOME", w.home)
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKE_SYSTEMCTL_LOG", w.log)
	t.Setenv("FAKE_SYSTEMCTL_ACTIVE", filepath.Join(dir, "active"))
	t.Setenv("FAKE_SYSTEMCTL_FAIL", "")
	t.Setenv("FAKE_SYSTEMCTL_SUBSTATE", "")
	w.env = map[string]string{"XDG_RUNTIME_DIR": rt, "ROOMRELAY_HOME": w.rh}
	return w
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (w *svcWorld) run(args ...string) (int, string, string) {
	w.t.Helper()
	var out, errb bytes.Buffer
	e := &Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return w.env[k] }, Executable: w.exe}
	code := Main(context.Background(), args, e)
	return code, out.String(), errb.String()
}

func (w *svcWorld) unitPath() string {
	return filepath.Join(w.home, ".config", "systemd", "user", "roomrelay.service")
}

// leftovers lists every file (not directory) under the user's systemd dir.
func (w *svcWorld) leftovers() []string {
	var files []string
	filepath.WalkDir(filepath.Join(w.home, ".config", "systemd"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	return files
}

func (w *svcWorld) calls() string {
	b, _ := os.ReadFile(w.log)
	return string(b)
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
	name := currentUser(os.Getenv)

	code, out, errOut := w.run("install")
	expectRun(t, "install", code, out, errOut, ExitOK, "per-user systemd service", w.unitPath(), "roomrelay start",
		"sudo loginctl enable-linger "+name, "not enrolled yet")
	got, err := os.ReadFile(w.unitPath())
	if err != nil {
		t.Fatalf("no unit file after install: %v", err)
	}
	want, err := packaging.SystemdUserUnit(packaging.Params{Exec: w.exe, Args: []string{"run", "--home", w.rh}})
	must(t, err)
	if string(got) != want {
		t.Errorf("installed unit differs from packaging.SystemdUserUnit:\n%s\nwant:\n%s", got, want)
	}
	if c := w.calls(); !strings.Contains(c, "enable --user roomrelay.service") || !strings.Contains(c, "daemon-reload --user") {
		t.Errorf("install did not enable and reload the unit; systemctl calls:\n%s", c)
	}

	code, out, errOut = w.run("service", "status")
	expectRun(t, "status after install", code, out, errOut, ExitFailure, "installed but not running", "enable-linger")

	code, out, errOut = w.run("install")
	expectRun(t, "second install", code, out, errOut, ExitFailure, "already installed", w.unitPath())
	if again, _ := os.ReadFile(w.unitPath()); string(again) != want {
		t.Errorf("a refused second install changed the unit file")
	}

	code, out, errOut = w.run("start")
	expectRun(t, "start", code, out, errOut, ExitOK, "started the roomrelay per-user systemd service")
	code, out, errOut = w.run("service", "status", "--json")
	var r svcReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("service status --json: %v\n%s", err, out)
	}
	if code != ExitOK || !r.Running || !r.Installed || r.UnitFile != w.unitPath() {
		t.Errorf("status of a started service: exit %d, %+v %s", code, r, errOut)
	}

	code, out, errOut = w.run("uninstall")
	expectRun(t, "uninstall", code, out, errOut, ExitOK, "uninstalled", "kept: config and enrollment in "+filepath.Join(w.rh, "config"))
	if left := w.leftovers(); len(left) > 0 {
		t.Errorf("uninstall left files behind: %v", left)
	}
	if c := w.calls(); !strings.Contains(c, "stop --user roomrelay.service") || !strings.Contains(c, "disable --user roomrelay.service") {
		t.Errorf("uninstall did not stop and disable; systemctl calls:\n%s", c)
	}
	// A failed unit stays loaded ("not-found failed") after its file is
	// removed unless systemd is told to forget it (seen on a real manager:
	// .ci/systemd-tests).
	if c := w.calls(); !strings.Contains(c, "--user reset-failed roomrelay.service") {
		t.Errorf("uninstall did not reset-failed the unit; systemctl calls:\n%s", c)
	}

	code, out, errOut = w.run("uninstall")
	expectRun(t, "uninstall again", code, out, errOut, ExitFailure, "not installed", "nothing to uninstall")
	for _, verb := range []string{"start", "stop", "restart"} {
		code, out, errOut = w.run(verb)
		expectRun(t, verb+" when not installed", code, out, errOut, ExitFailure, "not installed", "roomrelay install")
	}
	code, out, errOut = w.run("service", "status")
	expectRun(t, "status when not installed", code, out, errOut, ExitUnavailable, "not installed")
}

// TestServiceInstallRollback: when the service manager refuses a step, the
// command fails and nothing stays behind (no unit file, no enable link).
func TestServiceInstallRollback(t *testing.T) {
	for _, fail := range []string{"enable", "daemon-reload", "enable disable"} {
		t.Run(strings.ReplaceAll(fail, " ", "+"), func(t *testing.T) {
			w := newSvcWorld(t)
			t.Setenv("FAKE_SYSTEMCTL_FAIL", fail)
			code, out, errOut := w.run("install")
			expectRun(t, "install", code, out, errOut, ExitFailure, "nothing was left installed", "service manager refused")
			if left := w.leftovers(); len(left) > 0 {
				t.Errorf("failed install left: %v\nsystemctl calls:\n%s", left, w.calls())
			}
			// And the machine is clean enough for a retry to work.
			t.Setenv("FAKE_SYSTEMCTL_FAIL", "")
			code, out, errOut = w.run("install")
			expectRun(t, "retry", code, out, errOut, ExitOK, "installed")
		})
	}
}

func TestServiceStartFailureShowsSystemctl(t *testing.T) {
	w := newSvcWorld(t)
	code, out, errOut := w.run("install")
	expectRun(t, "install", code, out, errOut, ExitOK)
	t.Setenv("FAKE_SYSTEMCTL_FAIL", "start")
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
	t.Setenv("FAKE_SYSTEMCTL_SUBSTATE", "auto-restart")
	code, out, errOut = w.run("service", "status")
	expectRun(t, "status while auto-restarting", code, out, errOut, ExitFailure, "restarting", "systemd restarts it", "journalctl --user -u roomrelay")
	code, out, errOut = w.run("service", "status", "--json")
	var r svcReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("service status --json: %v\n%s", err, out)
	}
	if code != ExitFailure || r.Running || r.State != "restarting" || !r.Installed {
		t.Errorf("status while auto-restarting: exit %d, %+v %s", code, r, errOut)
	}
}

// TestServiceNoSession covers the machines without a place to install into;
// each refuses before writing anything.
func TestServiceNoSession(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(w *svcWorld)
		want  string
	}{
		{"no XDG_RUNTIME_DIR", func(w *svcWorld) { delete(w.env, "XDG_RUNTIME_DIR") }, "no systemd user session: XDG_RUNTIME_DIR is not set"},
		{"no user bus", func(w *svcWorld) { w.env["XDG_RUNTIME_DIR"] = w.t.TempDir() }, "no systemd user session bus"},
		{"user manager silent", func(w *svcWorld) { w.t.Setenv("FAKE_SYSTEMCTL_FAIL", "show-environment") }, "the systemd user manager does not answer"},
		{"systemd not PID 1", func(w *svcWorld) { systemdRunDir = filepath.Join(w.home, "nope") }, "systemd is not running on this machine"},
		{"no systemctl", func(w *svcWorld) { w.t.Setenv("PATH", w.t.TempDir()) }, "systemd not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newSvcWorld(t)
			tc.setup(w)
			for _, cmd := range [][]string{{"install"}, {"uninstall"}, {"start"}, {"service", "status"}} {
				code, out, errOut := w.run(cmd...)
				expectRun(t, strings.Join(cmd, " "), code, out, errOut, ExitUnavailable, tc.want)
			}
			if left := w.leftovers(); len(left) > 0 {
				t.Errorf("refused install left: %v", left)
			}
		})
	}
}

func TestServiceLingerNote(t *testing.T) {
	w := newSvcWorld(t)
	name := currentUser(os.Getenv)
	must(t, os.WriteFile(filepath.Join(lingerDir, name), nil, 0o644))
	code, out, errOut := w.run("install")
	expectRun(t, "install", code, out, errOut, ExitOK, "it starts at boot (lingering is enabled for "+name+")")
	if strings.Contains(out, "enable-linger") {
		t.Errorf("install suggests enable-linger although lingering is on:\n%s", out)
	}
}

func TestServiceSystemRefusals(t *testing.T) {
	w := newSvcWorld(t)
	asUser(t, 1000)
	code, out, errOut := w.run("install", "--system")
	expectRun(t, "--system as a user", code, out, errOut, ExitFailure, "--system needs root: run it with sudo")

	// As root: every refusal comes before anything is written to
	// /etc/systemd/system, so the test never installs a system service.
	asUser(t, 0)
	delete(w.env, "ROOMRELAY_HOME")
	code, out, errOut = w.run("install", "--system")
	expectRun(t, "--system without --home", code, out, errOut, ExitUsage, "--system needs --home DIR")

	code, out, errOut = w.run("install", "--system", "--home", w.rh)
	expectRun(t, "--system not enrolled", code, out, errOut, ExitNotEnrolled, "--credential-store file")

	p, err := device.ResolvePaths(w.rh, func(string) string { return "" })
	must(t, err)
	must(t, device.SaveConfig(p, &device.Config{Hub: "https://hub.example", DeviceID: "dev-1", CredentialStore: "keyring"}))
	code, out, errOut = w.run("install", "--system", "--home", w.rh)
	expectRun(t, "--system with the keyring", code, out, errOut, ExitFailure, "a system service cannot reach", "--credential-store file")
	if c := w.calls(); strings.Contains(c, "enable") || strings.Contains(c, "daemon-reload") {
		t.Errorf("a refused --system install called systemctl:\n%s", c)
	}
}

// asUser makes the service commands see euid uid for the rest of the test.
func asUser(t *testing.T, uid int) {
	old := geteuid
	geteuid = func() int { return uid }
	t.Cleanup(func() { geteuid = old })
}

func TestServiceRefusesSudoAndGoRun(t *testing.T) {
	w := newSvcWorld(t)
	asUser(t, 0)
	w.env["SUDO_USER"] = "ann"
	code, out, errOut := w.run("install")
	expectRun(t, "install under sudo", code, out, errOut, ExitFailure, "running under sudo", "not for ann")
	delete(w.env, "SUDO_USER")
	asUser(t, 1000)
	w.exe = filepath.Join(os.TempDir(), "go-build1234", "b001", "exe", "roomrelay")
	code, out, errOut = w.run("install")
	expectRun(t, "install from go run", code, out, errOut, ExitFailure, "temporary `go run` build")
	if left := w.leftovers(); len(left) > 0 {
		t.Errorf("refused install left: %v", left)
	}
}
