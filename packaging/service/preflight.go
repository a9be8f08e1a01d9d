package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/packaging"
)

// The preflight: every situation in which a service could not be installed
// or controlled properly is refused before anything is written, with what
// to do about it.

// SystemctlTimeout bounds one systemctl call RunSystemctl makes: a wedged
// user manager must not hang the workflow.
const SystemctlTimeout = 30 * time.Second

// preflight sets the spec's Kind and UnitPath for this OS and refuses, with
// a message that says what to do, every situation in which the service
// could not be installed or controlled properly.
func (s *Spec) preflight(ctx context.Context) error {
	switch runtime.GOOS {
	case "linux":
		return s.preflightLinux(ctx)
	case "darwin":
		if s.System {
			s.Kind, s.UnitPath = "system LaunchDaemon", "/Library/LaunchDaemons/"+packaging.Name+".plist"
			return s.needRoot("--system (a LaunchDaemon)")
		}
		home, err := os.UserHomeDir()
		if err != nil {
			return fmt.Errorf("no home directory for the LaunchAgent: %w", err)
		}
		s.Kind, s.UnitPath = "per-user LaunchAgent", filepath.Join(home, "Library", "LaunchAgents", packaging.Name+".plist")
		return s.notUnderSudo()
	case "windows":
		if !s.System {
			// A service running as the user would need their password
			// stored with it; a logon task runs in their session instead.
			s.Kind = "per-user logon task"
			return nil
		}
		s.Kind = "Windows service"
		return nil
	default:
		return fail(device.KindUnavailable, fmt.Errorf("installing a service is not supported on %s: run `roomrelay run` from your init system", runtime.GOOS))
	}
}

func (s *Spec) preflightLinux(ctx context.Context) error {
	if _, err := exec.LookPath("systemctl"); err != nil {
		return fail(device.KindUnavailable, errors.New("systemd not found (no systemctl on PATH): roomrelay installs as a systemd service on Linux;\n  on other init systems run `roomrelay run` from your session's autostart or your init system"))
	}
	if fi, err := os.Stat(s.cfg.SystemdRunDir); err != nil || !fi.IsDir() {
		return fail(device.KindUnavailable, errors.New("systemd is not running on this machine (it is not PID 1, as in most containers and some WSL setups):\n  there is no service manager to run roomrelay under; run `roomrelay run` in the foreground instead"))
	}
	if s.System {
		s.Kind, s.UnitPath = "system-wide systemd service", "/etc/systemd/system/"+packaging.Name+".service"
		return s.needRoot("--system")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return fmt.Errorf("no home directory for the user unit: %w", err)
	}
	s.Kind, s.UnitPath = "per-user systemd service", filepath.Join(home, ".config", "systemd", "user", packaging.Name+".service")
	if err := s.notUnderSudo(); err != nil {
		return err
	}
	rt := s.cfg.Getenv("XDG_RUNTIME_DIR")
	if rt == "" {
		return fail(device.KindUnavailable, errors.New(`no systemd user session: XDG_RUNTIME_DIR is not set.
  This happens in a shell opened with su, sudo or a plain ssh without PAM/logind.
  Log in as the user directly (desktop, ssh, or 'machinectl shell USER@'), or enable
  lingering ('sudo loginctl enable-linger USER') and log in again; then retry`))
	}
	bus := filepath.Join(rt, "bus")
	if _, err := os.Stat(bus); err != nil {
		return fail(device.KindUnavailable, fmt.Errorf(`no systemd user session bus (%s is missing): the user's systemd instance
  is not running or has no D-Bus socket. On Debian/Ubuntu install dbus-user-session
  and log in again; see docs/install.md`, bus))
	}
	if out, err := s.cfg.Systemctl(ctx, true, "show-environment"); err != nil {
		return fail(device.KindUnavailable, causedBy(fmt.Errorf("the systemd user manager does not answer (systemctl --user: %s): log out and in again, or check `systemctl --user status`", out), err))
	}
	return nil
}

// notUnderSudo refuses a per-user service for root reached through sudo: it
// would land in root's account, far from the user's keyring and enrollment.
func (s *Spec) notUnderSudo() error {
	if s.cfg.Geteuid() == 0 && s.cfg.Getenv("SUDO_USER") != "" {
		return fail(device.KindFailed, fmt.Errorf("running under sudo: a per-user service would be installed for root, not for %s.\n  Run roomrelay install without sudo, or install a system service with --system (file credential store)", s.cfg.Getenv("SUDO_USER")))
	}
	return nil
}

func (s *Spec) needRoot(what string) error {
	if runtime.GOOS != "windows" && s.cfg.Geteuid() != 0 {
		return fail(device.KindFailed, fmt.Errorf("%s needs root: run it with sudo (or install the default per-user service without --system)", what))
	}
	return nil
}

// RunSystemctl runs systemctl (with --user for user services), bounded by
// SystemctlTimeout, and returns its trimmed combined output, which is what
// the user needs to see on failure. It is Config.Systemctl's default.
func RunSystemctl(ctx context.Context, user bool, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, SystemctlTimeout)
	defer cancel()
	if user {
		args = append([]string{"--user"}, args...)
	}
	out, err := exec.CommandContext(ctx, "systemctl", args...).CombinedOutput()
	msg := strings.TrimSpace(string(out))
	if err != nil && msg == "" {
		msg = err.Error()
	}
	return msg, err
}
