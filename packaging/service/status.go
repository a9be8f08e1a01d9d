package service

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/kardianos/service"

	"github.com/roomrelay/roomrelay/packaging"
)

// The states a Report gives.
const (
	StateRunning      = "running"
	StateRestarting   = "restarting" // systemd waits out RestartSec after a crash: no process
	StateStopped      = "stopped"
	StateFailed       = "failed" // the service manager could not say
	StateNotInstalled = "not_installed"
)

// Report says whether the service is installed and running, and how it
// starts; it is `roomrelay service status --json`.
type Report struct {
	Kind      string `json:"kind"`
	Installed bool   `json:"installed"`
	Running   bool   `json:"running"`
	State     string `json:"state"` // one of the State constants
	UnitFile  string `json:"unit_file,omitempty"`
	Starts    string `json:"starts,omitempty"`
	Problem   string `json:"problem,omitempty"`
}

// Status reports on the service. A service that is not installed, stopped
// or failing is a Report, not an error: the error is for a machine that
// cannot host the service at all (what New refuses) or a service manager
// that cannot be asked.
func Status(ctx context.Context, cfg Config) (Report, error) {
	s, err := New(ctx, cfg)
	if err != nil {
		return Report{}, err
	}
	if s.isTask() {
		return s.statusTask(ctx)
	}
	if err := s.open(); err != nil {
		return Report{}, err
	}
	r := Report{Kind: s.Kind, UnitFile: s.UnitPath}
	ok, err := s.installed()
	switch {
	case err != nil:
		return r, fmt.Errorf("check for the service: %w", err)
	case !ok:
		r.State = StateNotInstalled
		r.Problem = "not installed: run `roomrelay install`"
	default:
		r.Installed = true
		st, err := s.svc.Status()
		switch {
		case err != nil:
			r.State, r.Problem = StateFailed, err.Error()+"; see: "+JournalHint(s.System)
		case st == service.StatusRunning && s.autoRestarting(ctx):
			// kardianos counts "activating" as running, but a unit waiting
			// out RestartSec after a crash has no process at all.
			r.State, r.Problem = StateRestarting, "the agent exited and systemd restarts it after RestartSec (Restart=on-failure); see: "+JournalHint(s.System)
		case st == service.StatusRunning:
			r.State, r.Running = StateRunning, true
		default:
			r.State, r.Problem = StateStopped, "installed but not running: roomrelay start"
		}
		r.Starts = strings.TrimSpace(s.BootNote())
	}
	return r, nil
}

// autoRestarting reports whether systemd is between a crash of the agent and
// the restart Restart=on-failure schedules (SubState auto-restart).
func (s *Spec) autoRestarting(ctx context.Context) bool {
	if runtime.GOOS != "linux" {
		return false
	}
	out, err := s.cfg.Systemctl(ctx, !s.System, "show", "--property=SubState", "--value", packaging.Name+".service")
	return err == nil && out == "auto-restart"
}

// BootNote says, indented for a terminal, how the service will start at
// boot, or "" when it will.
func (s *Spec) BootNote() string {
	if runtime.GOOS == "darwin" && !s.System {
		return "  it starts when you log in (a LaunchAgent runs in your GUI session)"
	}
	if s.isTask() {
		return TaskStartsNote
	}
	if runtime.GOOS != "linux" || s.System {
		return ""
	}
	name := currentUser(s.cfg.Getenv)
	if name == "" {
		return ""
	}
	if _, err := os.Stat(filepath.Join(s.cfg.LingerDir, name)); err == nil {
		return "  it starts at boot (lingering is enabled for " + name + ")"
	}
	return "  it starts when you log in. To start it at boot without logging in, enable lingering:\n    sudo loginctl enable-linger " + name
}

func currentUser(getenv func(string) string) string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return getenv("USER")
}

// JournalHint is the command that shows the service's log.
func JournalHint(system bool) string {
	if system {
		return "journalctl -u roomrelay -e"
	}
	return "journalctl --user -u roomrelay -e"
}
