package cli

// The service commands: install, uninstall, start, stop, restart and
// "service status". They run `roomrelay run` under the OS service manager
// through kardianos/service, with the unit file or plist rendered by package
// packaging, and add what kardianos leaves out: checks before anything is
// written (systemd user session, root, credential store), a rollback when a
// step fails half-way, and messages that say what to do.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/kardianos/service"

	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/packaging"
)

// Where the Linux checks look; tests point them at temporary directories.
var (
	systemdRunDir = "/run/systemd/system"     // exists when systemd is PID 1
	lingerDir     = "/var/lib/systemd/linger" // one file per user with lingering on
)

// systemctlTimeout bounds one systemctl call: a wedged user manager must not
// hang the command.
const systemctlTimeout = 30 * time.Second

// svcSpec is one service definition: per-user (default) or system-wide.
type svcSpec struct {
	system   bool
	home     string // --home as given ("" = the default directories)
	exe      string
	paths    device.Paths
	unitPath string // the file the service manager reads ("" on Windows)
	kind     string // for messages: "per-user systemd service", ...
	svc      service.Service
	getenv   func(string) string
}

type svcFlags struct {
	system *bool
	paths  func() (device.Paths, error)
	home   func() string
}

func addSvcFlags(fs *flag.FlagSet, e *Env) svcFlags {
	f := svcFlags{
		system: fs.Bool("system", false, "a system-wide service instead of a per-user one (needs root, --home and the file credential store)"),
		paths:  pathFlags(fs, e),
	}
	f.home = func() string { return fs.Lookup("home").Value.String() }
	return f
}

func init() {
	const common = `By default roomrelay runs as a per-user service, so it can reach your OS
keyring: a systemd user unit on Linux (~/.config/systemd/user/roomrelay.service)
or a LaunchAgent on macOS (~/Library/LaunchAgents/roomrelay.plist). --system
installs a system service instead; it cannot reach any user's keyring, so it
needs the device enrolled with --credential-store file and --home DIR.
See docs/install.md for every message and what to do about it.`
	Register(&Command{
		Name:     "install",
		Synopsis: "[--system] [--home DIR]",
		Summary:  "install the agent as an OS service that runs `roomrelay run` (per-user by default)",
		Help: common + `

Installing does not start the agent: run 'roomrelay start' (it also starts at
your next login). Exit codes: 0 installed; 1 already installed or a step
failed (nothing is left behind); 2 usage; 4 no service manager or user
session to install into.`,
		Setup: func(fs *flag.FlagSet, e *Env) Runner {
			f := addSvcFlags(fs, e)
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("install takes no arguments")
				}
				return installService(ctx, e, f)
			}
		},
	})
	Register(&Command{
		Name:     "uninstall",
		Synopsis: "[--system]",
		Summary:  "stop the agent and remove the OS service (keeps config, enrollment and data)",
		Help:     common,
		Setup: func(fs *flag.FlagSet, e *Env) Runner {
			f := addSvcFlags(fs, e)
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("uninstall takes no arguments")
				}
				return uninstallService(ctx, e, f)
			}
		},
	})
	for _, verb := range []string{"start", "stop", "restart"} {
		Register(&Command{
			Name:     verb,
			Synopsis: "[--system]",
			Summary:  verb + " the installed agent service",
			Help:     common,
			Setup: func(fs *flag.FlagSet, e *Env) Runner {
				f := addSvcFlags(fs, e)
				return func(ctx context.Context, args []string) error {
					if len(args) > 0 {
						return usagef("%s takes no arguments", verb)
					}
					return controlService(ctx, e, f, verb)
				}
			},
		})
	}
	Register(&Command{
		Name:     "service status",
		Synopsis: "[--system] [--json]",
		Summary:  "show whether the agent service is installed and running, and how it starts",
		Help: common + `

'roomrelay status' shows the agent's connection to the hub; this shows the
service around it. Exit codes: 0 running; 1 installed but not running;
4 not installed, or no service manager to ask.`,
		Setup: func(fs *flag.FlagSet, e *Env) Runner {
			f := addSvcFlags(fs, e)
			asJSON := fs.Bool("json", false, "print JSON")
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("service status takes no arguments")
				}
				return serviceStatus(ctx, e, f, *asJSON)
			}
		},
	})
}

// newSpec resolves what the service would run and checks, before anything
// is touched, that this system can host it.
func newSpec(ctx context.Context, e *Env, f svcFlags) (*svcSpec, error) {
	p, err := f.paths()
	if err != nil {
		return nil, err
	}
	s := &svcSpec{system: *f.system, home: f.home(), paths: p, getenv: e.Getenv}
	if s.home != "" {
		s.home = filepath.Dir(p.Config) // absolute, as resolvePaths made it
	}
	if err := s.preflight(ctx); err != nil {
		return nil, err
	}
	// Only install writes the path into a file (and insists it is real);
	// the other commands render for comparison only.
	s.exe = e.Executable
	if !filepath.IsAbs(s.exe) {
		s.exe = packaging.PkgBinary
	}
	return s, nil
}

func (s *svcSpec) args() []string {
	if s.home != "" {
		return []string{"run", "--home", s.home}
	}
	return []string{"run"}
}

// render produces the unit file or plist for this spec.
func (s *svcSpec) render() (string, error) {
	p := packaging.Params{Exec: s.exe, Args: s.args()}
	if rd := packagedRuntimeDir(s.exe); rd != "" {
		p.Env = map[string]string{"ROOMRELAY_RUNTIME_DIR": rd}
	}
	switch {
	case runtime.GOOS == "darwin" && s.system:
		p.LogDir = "/Library/Logs"
		return packaging.LaunchdPlist(p, true)
	case runtime.GOOS == "darwin":
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		p.LogDir = filepath.Join(home, "Library", "Logs")
		return packaging.LaunchdPlist(p, false)
	case s.system:
		return packaging.SystemdSystemUnit(p)
	default:
		return packaging.SystemdUserUnit(p)
	}
}

// packagedRuntimeDir finds the React runtime a package installed next to the
// binary (PREFIX/bin/roomrelay → PREFIX/share/roomrelay/jsruntime).
func packagedRuntimeDir(exe string) string {
	d := filepath.Join(filepath.Dir(filepath.Dir(exe)), "share", "roomrelay", "jsruntime")
	if fi, err := os.Stat(d); err == nil && fi.IsDir() {
		return d
	}
	return ""
}

// open builds the kardianos service for the spec, carrying the rendered file.
func (s *svcSpec) open() error {
	text, err := s.render()
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
		Executable:  s.exe,
		Arguments:   s.args(),
		Option: service.KeyValue{
			"UserService":   !s.system,
			"SystemdScript": text,
			"LaunchdConfig": text,
			// Windows: restart after a crash, like Restart=on-failure.
			"OnFailure":              "restart",
			"OnFailureDelayDuration": "10s",
		},
	}
	if runtime.GOOS == "linux" {
		// The checks above established systemd; do not let kardianos guess
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

// nopProgram satisfies kardianos' Interface: these commands only control the
// service; `roomrelay run` is the program.
type nopProgram struct{}

func (nopProgram) Start(service.Service) error { return nil }
func (nopProgram) Stop(service.Service) error  { return nil }

// installed reports whether the service definition exists.
func (s *svcSpec) installed() (bool, error) {
	if s.unitPath != "" {
		_, err := os.Stat(s.unitPath)
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

func installService(ctx context.Context, e *Env, f svcFlags) error {
	if e.Executable == "" || !filepath.IsAbs(e.Executable) {
		return errors.New("cannot tell where the roomrelay binary is; run it by its full path")
	}
	if strings.Contains(e.Executable, string(filepath.Separator)+"go-build") {
		return exitErr(ExitFailure, errors.New("this roomrelay is a temporary `go run` build: the service would lose its binary.\n  Build or install it first (go build -o ~/.local/bin/roomrelay ./cmd/roomrelay) and run install from there"))
	}
	s, err := newSpec(ctx, e, f)
	if err != nil {
		return err
	}
	if err := s.checkCredentials(); err != nil {
		return err
	}
	if err := s.open(); err != nil {
		return err
	}
	if ok, err := s.installed(); err != nil {
		return fmt.Errorf("check for an existing service: %w", err)
	} else if ok {
		where := s.unitPath
		if where == "" {
			where = "service " + packaging.Name
		}
		return exitErr(ExitFailure, fmt.Errorf("roomrelay is already installed as a %s (%s).\n  To pick up a new binary or flags: roomrelay uninstall, then roomrelay install; to restart it: roomrelay restart", s.kind, where))
	}
	if err := s.svc.Install(); err != nil {
		rbErr := s.rollback()
		msg := fmt.Errorf("install the %s: %w", s.kind, explain(err))
		if rbErr != nil {
			return fmt.Errorf("%w\n  and removing what was written failed too: %v (remove %s by hand)", msg, rbErr, s.unitPath)
		}
		return fmt.Errorf("%w\n  nothing was left installed", msg)
	}
	fmt.Fprintf(e.Stdout, "installed roomrelay as a %s", s.kind)
	if s.unitPath != "" {
		fmt.Fprintf(e.Stdout, " (%s)", s.unitPath)
	}
	fmt.Fprintf(e.Stdout, "\n  it runs: %s %s\n", s.exe, strings.Join(s.args(), " "))
	fmt.Fprintln(e.Stdout, "  start it now with: roomrelay start")
	if note := s.bootNote(); note != "" {
		fmt.Fprintln(e.Stdout, note)
	}
	if _, err := device.LoadConfig(s.paths); err != nil {
		fmt.Fprintln(e.Stdout, "  note: this device is not enrolled yet; the service will not connect until you run `roomrelay enroll`, then `roomrelay restart`")
	}
	return nil
}

// checkCredentials refuses a system service unless the token is in the file
// store: a system service cannot reach any user's keyring.
func (s *svcSpec) checkCredentials() error {
	if !s.system {
		return nil
	}
	if s.home == "" {
		return usagef("--system needs --home DIR: a system service does not run in your account, so say where its config, state and data live (e.g. /var/lib/roomrelay)")
	}
	cfg, err := device.LoadConfig(s.paths)
	if err != nil {
		if device.KindOf(err) == device.KindNotEnrolled {
			return exitErr(ExitNotEnrolled, fmt.Errorf("--system needs an enrolled device with the file credential store: run\n  roomrelay enroll --home %s --credential-store file --hub URL --code CODE\n  first (as the account the service will run as)", s.home))
		}
		return err
	}
	if cfg.CredentialStore != credstore.KindFile {
		return exitErr(ExitFailure, fmt.Errorf("--system refused: this device keeps its token in the OS keyring (credential store %q), which a system service cannot reach.\n  Install the default per-user service instead (roomrelay install, without --system), or enroll again with\n  --credential-store file (a 0600 file in %s) and retry", nonEmpty(string(cfg.CredentialStore), "keyring"), s.paths.Config))
	}
	return nil
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// rollback undoes a partial install: disable and remove what was written.
func (s *svcSpec) rollback() error {
	uerr := s.svc.Uninstall()
	if s.unitPath == "" {
		return uerr
	}
	if err := os.Remove(s.unitPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if runtime.GOOS == "linux" {
		// Drop an enable symlink a failed step may have left.
		wants := filepath.Join(filepath.Dir(s.unitPath), "default.target.wants", packaging.Name+".service")
		if s.system {
			wants = filepath.Join(filepath.Dir(s.unitPath), "multi-user.target.wants", packaging.Name+".service")
		}
		if err := os.Remove(wants); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// explain turns the bare errors kardianos passes up into something to act on.
func explain(err error) error {
	switch {
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("permission denied: %w (a --system service needs root; a per-user one needs a writable home)", err)
	case strings.Contains(err.Error(), "exit status"):
		return fmt.Errorf("%w (the service manager refused; `journalctl --user -xe` or `systemctl --user status roomrelay` may say why)", err)
	}
	return err
}

// bootNote says how the service will start at boot, or "" when it will.
func (s *svcSpec) bootNote() string {
	if runtime.GOOS == "darwin" && !s.system {
		return "  it starts when you log in (a LaunchAgent runs in your GUI session)"
	}
	if runtime.GOOS != "linux" || s.system {
		return ""
	}
	name := currentUser(s.getenv)
	if name == "" {
		return ""
	}
	if _, err := os.Stat(filepath.Join(lingerDir, name)); err == nil {
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

func uninstallService(ctx context.Context, e *Env, f svcFlags) error {
	s, err := newSpec(ctx, e, f)
	if err != nil {
		return err
	}
	if err := s.open(); err != nil {
		return err
	}
	ok, err := s.installed()
	if err != nil {
		return fmt.Errorf("check for the service: %w", err)
	}
	if !ok {
		where := ""
		if s.unitPath != "" {
			where = " (no " + s.unitPath + ")"
		}
		hint := ""
		if !s.system && runtime.GOOS != "windows" {
			hint = "\n  if you installed it with --system, run: sudo roomrelay uninstall --system"
		}
		return exitErr(ExitFailure, fmt.Errorf("roomrelay is not installed as a %s%s: nothing to uninstall%s", s.kind, where, hint))
	}
	_ = s.svc.Stop() // stopping what is not running is fine
	if err := s.svc.Uninstall(); err != nil {
		// Finish the job: a definition without its service manager entry is
		// exactly the half-state to avoid.
		if rbErr := s.rollback(); rbErr != nil {
			return fmt.Errorf("uninstall the %s: %w; removing %s failed too: %v", s.kind, explain(err), s.unitPath, rbErr)
		}
		fmt.Fprintf(e.Stderr, "roomrelay uninstall: the service manager reported %v; the service file was removed anyway\n", err)
	}
	if runtime.GOOS == "linux" {
		// A unit that had failed (a revoked device exits 3 and is not
		// restarted) stays loaded as "not-found failed" after its file is
		// gone: listed by `systemctl --failed`, and reported failed again
		// right after the next install. Make systemd forget it; a unit that
		// was not failed makes this a no-op or "not loaded", both fine.
		_, _ = systemctl(ctx, !s.system, "reset-failed", packaging.Name+".service")
	}
	fmt.Fprintf(e.Stdout, "uninstalled the roomrelay %s\n", s.kind)
	fmt.Fprintf(e.Stdout, "  kept: config and enrollment in %s, state in %s, data in %s\n", s.paths.Config, s.paths.State, s.paths.Data)
	fmt.Fprintln(e.Stdout, "  (delete them by hand to forget this device; `roomrelay hub revoke` on the hub cuts it off)")
	return nil
}

func controlService(ctx context.Context, e *Env, f svcFlags, verb string) error {
	s, err := newSpec(ctx, e, f)
	if err != nil {
		return err
	}
	if err := s.open(); err != nil {
		return err
	}
	if ok, err := s.installed(); err != nil {
		return fmt.Errorf("check for the service: %w", err)
	} else if !ok {
		flag := ""
		if s.system {
			flag = " --system"
		}
		return exitErr(ExitFailure, fmt.Errorf("roomrelay is not installed as a %s: run roomrelay install%s first", s.kind, flag))
	}
	if runtime.GOOS == "linux" {
		// systemctl itself, for its error message (kardianos drops stderr).
		if out, err := systemctl(ctx, !s.system, verb, packaging.Name+".service"); err != nil {
			return fmt.Errorf("%s: %s\n  see: %s", verb, out, journalHint(s.system))
		}
	} else if err := service.Control(s.svc, verb); err != nil {
		return fmt.Errorf("%s: %w", verb, err)
	}
	past := map[string]string{"start": "started", "stop": "stopped", "restart": "restarted"}[verb]
	fmt.Fprintf(e.Stdout, "%s the roomrelay %s\n", past, s.kind)
	if verb != "stop" {
		fmt.Fprintln(e.Stdout, "  `roomrelay status` shows whether it reached the hub")
	}
	return nil
}

func journalHint(system bool) string {
	if system {
		return "journalctl -u roomrelay -e"
	}
	return "journalctl --user -u roomrelay -e"
}

// svcReport is `roomrelay service status --json`.
type svcReport struct {
	Kind      string `json:"kind"`
	Installed bool   `json:"installed"`
	Running   bool   `json:"running"`
	State     string `json:"state"` // running, restarting, stopped, failed, not_installed
	UnitFile  string `json:"unit_file,omitempty"`
	Starts    string `json:"starts,omitempty"`
	Problem   string `json:"problem,omitempty"`
}

// autoRestarting reports whether systemd is between a crash of the agent and
// the restart Restart=on-failure schedules (SubState auto-restart).
func (s *svcSpec) autoRestarting(ctx context.Context) bool {
	if runtime.GOOS != "linux" {
		return false
	}
	out, err := systemctl(ctx, !s.system, "show", "--property=SubState", "--value", packaging.Name+".service")
	return err == nil && out == "auto-restart"
}

func serviceStatus(ctx context.Context, e *Env, f svcFlags, asJSON bool) error {
	r, code, err := serviceReport(ctx, e, f)
	if err != nil {
		return err
	}
	if asJSON {
		if err := json.NewEncoder(e.Stdout).Encode(r); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.Stdout, "service:   %s, %s\n", r.Kind, strings.ReplaceAll(r.State, "_", " "))
		if r.UnitFile != "" {
			fmt.Fprintf(e.Stdout, "file:      %s\n", r.UnitFile)
		}
		if r.Starts != "" {
			fmt.Fprintf(e.Stdout, "starts:    %s\n", strings.ReplaceAll(r.Starts, "\n    ", "\n           "))
		}
		if r.Problem != "" {
			fmt.Fprintf(e.Stdout, "problem:   %s\n", r.Problem)
		}
	}
	if code != ExitOK {
		return silent(code)
	}
	return nil
}

// serviceReport says whether the service is installed and running, with
// the exit code `service status` gives for it.
func serviceReport(ctx context.Context, e *Env, f svcFlags) (svcReport, int, error) {
	s, err := newSpec(ctx, e, f)
	if err != nil {
		return svcReport{}, 0, err
	}
	if err := s.open(); err != nil {
		return svcReport{}, 0, err
	}
	r := svcReport{Kind: s.kind, UnitFile: s.unitPath}
	code := ExitOK
	ok, err := s.installed()
	switch {
	case err != nil:
		return r, 0, fmt.Errorf("check for the service: %w", err)
	case !ok:
		r.State, code = "not_installed", ExitUnavailable
		r.Problem = "not installed: run `roomrelay install`"
	default:
		r.Installed = true
		st, err := s.svc.Status()
		switch {
		case err != nil:
			r.State, r.Problem, code = "failed", err.Error()+"; see: "+journalHint(s.system), ExitFailure
		case st == service.StatusRunning && s.autoRestarting(ctx):
			// kardianos counts "activating" as running, but a unit waiting
			// out RestartSec after a crash has no process at all.
			r.State, r.Problem, code = "restarting", "the agent exited and systemd restarts it after RestartSec (Restart=on-failure); see: "+journalHint(s.system), ExitFailure
		case st == service.StatusRunning:
			r.State, r.Running = "running", true
		default:
			r.State, r.Problem, code = "stopped", "installed but not running: roomrelay start", ExitFailure
		}
		r.Starts = strings.TrimSpace(s.bootNote())
	}
	return r, code, nil
}
