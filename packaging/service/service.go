// Package service runs `roomrelay run` under the OS service manager: the
// workflows behind `roomrelay install`, `uninstall`, `start`, `stop`,
// `restart` and `service status`, for the CLI, the tests and a desktop-app
// integration alike.
//
// It drives kardianos/service with the unit file or plist rendered by
// package packaging, and adds what kardianos leaves out: checks before
// anything is written (a systemd user session, root, the credential store,
// not under sudo), a rollback when a step fails half-way, and messages that
// say what to do.
//
// Everything it needs comes in a Config (the service's directories, the
// binary, the environment, and the seams tests point at a fake machine);
// it reads no flags, and no environment variable beyond the HOME that
// os.UserHomeDir (and kardianos) read for the per-user unit's place.
// Failures carry a device.Kind (device.KindOf) saying what they need
// (enroll first, a usage mistake, no service manager to install into),
// which the CLI maps to an exit code; a plain error is KindFailed.
package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/kardianos/service"

	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/packaging"
)

// Production defaults of the Config seams.
const (
	DefaultSystemdRunDir = "/run/systemd/system"     // exists when systemd is PID 1
	DefaultLingerDir     = "/var/lib/systemd/linger" // one file per user with lingering on
)

// Config says which service definition to work on and how to reach the
// machine. The zero values of the seams are the production defaults.
type Config struct {
	// System is a system-wide service instead of a per-user one (needs
	// root, Home and the file credential store).
	System bool
	// Home is the --home the service runs with ("" = the default
	// directories); a relative one is made absolute. Paths are then the
	// directories device.ResolvePaths gives for it.
	Home string
	// Executable is the roomrelay binary the service runs. Install refuses
	// one that is not an absolute path or is a temporary `go run` build;
	// the other workflows only render with it (packaging.PkgBinary when it
	// is not absolute).
	Executable string
	// Getenv reads XDG_RUNTIME_DIR, SUDO_USER and USER; nil reads nothing.
	Getenv func(string) string
	// Logger gets the workflows' debug lines; nil discards them.
	Logger *slog.Logger

	// SystemdRunDir exists when systemd is PID 1 (DefaultSystemdRunDir).
	SystemdRunDir string
	// LingerDir holds one file per user with lingering on (DefaultLingerDir).
	LingerDir string
	// Geteuid is the effective user id (os.Geteuid).
	Geteuid func() int
	// Systemctl runs systemctl, with --user first when user is set, and
	// returns its trimmed combined output (RunSystemctl). kardianos runs
	// its own systemctl calls (enable, daemon-reload, is-active, ...) from
	// PATH; this one runs the calls this package makes itself.
	Systemctl func(ctx context.Context, user bool, args ...string) (string, error)

	// Schtasks runs schtasks.exe with args and returns its trimmed
	// combined output (RunSchtasks): the Windows per-user logon task.
	Schtasks func(ctx context.Context, args ...string) (string, error)
	// CurrentUser is the DOMAIN\user whose logon starts the Windows task
	// (CurrentUserID).
	CurrentUser func() (string, error)
	// TaskName is the Windows task's name (packaging.Name); tests use
	// their own so they never touch a real install.
	TaskName string
}

func (c Config) withDefaults() Config {
	if c.Getenv == nil {
		c.Getenv = func(string) string { return "" }
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.SystemdRunDir == "" {
		c.SystemdRunDir = DefaultSystemdRunDir
	}
	if c.LingerDir == "" {
		c.LingerDir = DefaultLingerDir
	}
	if c.Geteuid == nil {
		c.Geteuid = os.Geteuid
	}
	if c.Systemctl == nil {
		c.Systemctl = RunSystemctl
	}
	if c.Schtasks == nil {
		c.Schtasks = RunSchtasks
	}
	if c.CurrentUser == nil {
		c.CurrentUser = CurrentUserID
	}
	return c
}

// Spec is one service definition: per-user or system-wide, what it runs,
// and where the service manager keeps it.
type Spec struct {
	System   bool
	Home     string // absolute --home the service runs with ("" = the default directories)
	Exe      string // the binary in the service definition
	Paths    device.Paths
	UnitPath string // the file the service manager reads ("" on Windows)
	Kind     string // for messages: "per-user systemd service", "system LaunchDaemon", "per-user logon task", ...

	cfg Config
	svc service.Service // kardianos' handle, once open
}

// New resolves what the service would run and checks, before anything is
// touched, that this system can host it: a *device.Error with
// KindUnavailable when there is no service manager or user session to
// install into, KindFailed when it needs root or must not run under sudo.
func New(ctx context.Context, cfg Config) (*Spec, error) {
	cfg = cfg.withDefaults()
	p, err := device.ResolvePaths(cfg.Home, cfg.Getenv)
	if err != nil {
		return nil, err
	}
	s := &Spec{System: cfg.System, Paths: p, cfg: cfg}
	if cfg.Home != "" {
		abs, err := filepath.Abs(cfg.Home)
		if err != nil {
			return nil, fmt.Errorf("--home: %w", err)
		}
		s.Home = abs
	}
	if err := s.preflight(ctx); err != nil {
		return nil, err
	}
	// Only install writes the path into a file (and insists it is real);
	// the other workflows render for comparison only.
	s.Exe = cfg.Executable
	if !filepath.IsAbs(s.Exe) {
		s.Exe = packaging.PkgBinary
	}
	return s, nil
}

// Args are the arguments after Exe in the service definition. The Windows
// logon task adds --background: the agent logs to agent.log and lets go of
// the console window Task Scheduler gives it.
func (s *Spec) Args() []string {
	args := []string{"run"}
	if s.isTask() {
		args = append(args, "--background")
	}
	if s.Home != "" {
		args = append(args, "--home", s.Home)
	}
	return args
}

// Render produces the unit file or plist for this spec.
func (s *Spec) Render() (string, error) {
	p := packaging.Params{Exec: s.Exe, Args: s.Args()}
	if rd := PackagedRuntimeDir(s.Exe); rd != "" {
		p.Env = map[string]string{"ROOMRELAY_RUNTIME_DIR": rd}
	}
	switch {
	case runtime.GOOS == "darwin" && s.System:
		p.LogDir = "/Library/Logs"
		return packaging.LaunchdPlist(p, true)
	case runtime.GOOS == "darwin":
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		p.LogDir = filepath.Join(home, "Library", "Logs")
		return packaging.LaunchdPlist(p, false)
	case s.System:
		return packaging.SystemdSystemUnit(p)
	default:
		return packaging.SystemdUserUnit(p)
	}
}

// PackagedRuntimeDir finds the React runtime a package installed next to
// the binary exe (PREFIX/bin/roomrelay → PREFIX/share/roomrelay/jsruntime),
// or "" when there is none. The service points the sandbox at it, so a
// packaged agent never fetches React from the network.
func PackagedRuntimeDir(exe string) string {
	d := filepath.Join(filepath.Dir(filepath.Dir(exe)), "share", "roomrelay", "jsruntime")
	if fi, err := os.Stat(d); err == nil && fi.IsDir() {
		return d
	}
	return ""
}

// open builds the kardianos service for the spec, carrying the rendered file.
func (s *Spec) open() error {
	text, err := s.Render()
	if err != nil {
		return err
	}
	// kardianos renders the file as a template; ours is final text.
	if strings.Contains(text, "{{") {
		return fmt.Errorf("the service file would contain %q (from a path or argument); choose paths without it", "{{")
	}
	cfg := &service.Config{
		Name:        packaging.Name,
		DisplayName: "roomrelay agent",
		Description: packaging.Description,
		Executable:  s.Exe,
		Arguments:   s.Args(),
		Option: service.KeyValue{
			"UserService":   !s.System,
			"SystemdScript": text,
			"LaunchdConfig": text,
			// Windows: restart after a crash, like Restart=on-failure.
			"OnFailure":              "restart",
			"OnFailureDelayDuration": "10s",
		},
	}
	if runtime.GOOS == "linux" {
		// The preflight established systemd; do not let kardianos guess
		// another init system.
		for _, sys := range service.AvailableSystems() {
			if sys.String() == "linux-systemd" {
				s.svc, err = sys.New(nopProgram{}, cfg)
				return err
			}
		}
		return errors.New("kardianos/service has no systemd support compiled in")
	}
	s.svc, err = service.New(nopProgram{}, cfg)
	return err
}

// nopProgram satisfies kardianos' Interface: these workflows only control
// the service; `roomrelay run` is the program.
type nopProgram struct{}

func (nopProgram) Start(service.Service) error { return nil }
func (nopProgram) Stop(service.Service) error  { return nil }

// installed reports whether the service definition exists.
func (s *Spec) installed() (bool, error) {
	if s.UnitPath != "" {
		_, err := os.Stat(s.UnitPath)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	}
	_, err := s.svc.Status()
	if errors.Is(err, service.ErrNotInstalled) {
		return false, nil
	}
	return true, nil
}

// fail gives err the Kind a caller maps to an exit code or a dialog.
func fail(k device.Kind, err error) error { return &device.Error{Kind: k, Err: err} }
