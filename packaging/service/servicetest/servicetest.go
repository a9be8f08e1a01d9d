// Package servicetest is a fake Linux machine with a systemd user session,
// built in temporary directories, for tests of package service and of the
// commands that call it: HOME, XDG_RUNTIME_DIR with a listening bus socket,
// the systemd and linger marker directories, and a fake systemctl on PATH
// that keeps the unit's enable link and running state in real files, so
// the service workflows' file handling and rollback run for real.
//
// New sets HOME, PATH and the fake's variables with t.Setenv, so a test
// using it cannot run in parallel.
package servicetest

import (
	"net"
	"os"
	"os/user"
	"path/filepath"
	"testing"

	"github.com/roomrelay/roomrelay/packaging/service"
)

// fakeSystemctl stands in for systemctl: it logs every call, fails the verbs
// listed in FAKE_SYSTEMCTL_FAIL with a systemd-like message, reports the
// unit's SubState as FAKE_SYSTEMCTL_SUBSTATE (auto-restart: the unit is
// "activating" between a crash and its restart), and keeps the
// enable symlink and the running state in real files. kardianos puts the
// verb first ("enable --user X"), package service puts --user first.
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

// World is the fake machine.
type World struct {
	t             *testing.T
	Home          string            // $HOME of the fake user
	Exe           string            // the "installed" roomrelay binary
	RoomrelayHome string            // --home for roomrelay's own directories
	RuntimeDir    string            // XDG_RUNTIME_DIR, with a listening bus socket
	SystemdRunDir string            // exists: systemd is PID 1
	LingerDir     string            // empty: nobody lingers
	Env           map[string]string // what Getenv reads: XDG_RUNTIME_DIR, ROOMRELAY_HOME
	Euid          int               // what Geteuid says (this process's at first)
	log           string
}

// New builds the machine for the rest of the test.
func New(t *testing.T) *World {
	t.Helper()
	dir := t.TempDir()
	w := &World{t: t, Home: filepath.Join(dir, "home"), Exe: filepath.Join(dir, "usr", "bin", "roomrelay"),
		RoomrelayHome: filepath.Join(dir, "rr"), RuntimeDir: filepath.Join(dir, "xdg-runtime"),
		SystemdRunDir: filepath.Join(dir, "run-systemd"), LingerDir: filepath.Join(dir, "linger"),
		Euid: os.Geteuid(), log: filepath.Join(dir, "systemctl.log")}
	bin := filepath.Join(dir, "fakebin")
	for _, d := range []string{w.Home, filepath.Dir(w.Exe), bin, w.RuntimeDir, w.SystemdRunDir, w.LingerDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w.must(os.WriteFile(filepath.Join(bin, "systemctl"), []byte(fakeSystemctl), 0o755))
	w.must(os.WriteFile(w.Exe, []byte("#!/bin/sh\n"), 0o755))
	l, err := net.Listen("unix", filepath.Join(w.RuntimeDir, "bus"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	t.Setenv("HOME", w.Home)
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKE_SYSTEMCTL_LOG", w.log)
	t.Setenv("FAKE_SYSTEMCTL_ACTIVE", filepath.Join(dir, "active"))
	t.Setenv("FAKE_SYSTEMCTL_FAIL", "")
	t.Setenv("FAKE_SYSTEMCTL_SUBSTATE", "")
	w.Env = map[string]string{"XDG_RUNTIME_DIR": w.RuntimeDir, "ROOMRELAY_HOME": w.RoomrelayHome}
	return w
}

func (w *World) must(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

// Getenv reads Env.
func (w *World) Getenv(k string) string { return w.Env[k] }

// Geteuid is Euid.
func (w *World) Geteuid() int { return w.Euid }

// Apply points c's seams at this machine: the systemd and linger
// directories and the effective user id. systemctl is the fake on PATH.
func (w *World) Apply(c *service.Config) {
	c.SystemdRunDir, c.LingerDir, c.Geteuid = w.SystemdRunDir, w.LingerDir, w.Geteuid
}

// Config is a per-user service of a roomrelay with --home RoomrelayHome,
// run by Exe, on this machine.
func (w *World) Config() service.Config {
	w.t.Helper()
	c := service.Config{Home: w.RoomrelayHome, Executable: w.Exe, Getenv: w.Getenv}
	w.Apply(&c)
	return c
}

// FailVerbs makes systemctl refuse these verbs (space-separated).
func (w *World) FailVerbs(verbs string) { w.t.Setenv("FAKE_SYSTEMCTL_FAIL", verbs) }

// SubState sets the SubState systemctl reports ("auto-restart": between a
// crash and its restart).
func (w *World) SubState(s string) { w.t.Setenv("FAKE_SYSTEMCTL_SUBSTATE", s) }

// UnitPath is where the per-user unit goes.
func (w *World) UnitPath() string {
	return filepath.Join(w.Home, ".config", "systemd", "user", "roomrelay.service")
}

// Leftovers lists every file (not directory) under the user's systemd dir.
func (w *World) Leftovers() []string {
	var files []string
	filepath.WalkDir(filepath.Join(w.Home, ".config", "systemd"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	return files
}

// Calls is every systemctl command line so far, one a line.
func (w *World) Calls() string {
	b, _ := os.ReadFile(w.log)
	return string(b)
}

// Username is the name the boot note gives for this user.
func Username() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

// LingerOn enables lingering for name.
func (w *World) LingerOn(name string) {
	w.must(os.WriteFile(filepath.Join(w.LingerDir, name), nil, 0o644))
}
