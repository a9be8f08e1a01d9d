package cli

// The service commands: install, uninstall, start, stop, restart and
// "service status". The workflows (preflight, install and its rollback,
// control, the status report) are package packaging/service's; these parse
// the flags (shared with doctor), print, and map a failure's Kind to an
// exit code.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"

	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/packaging/service"
)

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

// configureService, when set, adjusts every service.Config the commands
// build: tests point its seams (the systemd and linger directories, the
// effective user id) at a fake machine. Nil outside tests.
var configureService func(*service.Config)

// config is the service.Config the flags describe.
func (f svcFlags) config(e *Env) service.Config {
	c := service.Config{System: *f.system, Home: f.home(), Executable: e.Executable, Getenv: e.Getenv, Logger: e.Logger}
	if configureService != nil {
		configureService(&c)
	}
	return c
}

// serviceErr is how a service workflow's failure exits: with its Kind's
// code (deviceExit), and the command's help after a usage mistake.
func serviceErr(err error) error {
	code := deviceExit[device.KindOf(err)]
	return &ExitError{Code: code, Err: err, Usage: code == ExitUsage}
}

const serviceHelp = `By default roomrelay runs as a per-user service, so it can reach your OS
keyring: a systemd user unit on Linux (~/.config/systemd/user/roomrelay.service),
a LaunchAgent on macOS (~/Library/LaunchAgents/roomrelay.plist), or a Task
Scheduler task started at your logon on Windows (\roomrelay, in your session;
stop ends it hard). --system
installs a system service instead; it cannot reach any user's keyring, so it
needs the device enrolled with --credential-store file and --home DIR.
See docs/install.md for every message and what to do about it.`

func init() {
	Register(&Command{
		Name:     "install",
		Synopsis: "[--system] [--home DIR]",
		Summary:  "install the agent as an OS service that runs `roomrelay run` (per-user by default)",
		Help: serviceHelp + `

Installing does not start the agent: run 'roomrelay start' (it also starts at
your next login). Exit codes: 0 installed; 1 already installed or a step
failed (nothing is left behind); 2 usage; 4 no service manager or user
session to install into.`,
		Setup: setupInstall,
	})
	Register(&Command{
		Name:     "uninstall",
		Synopsis: "[--system]",
		Summary:  "stop the agent and remove the OS service (keeps config, enrollment and data)",
		Help:     serviceHelp,
		Setup:    setupUninstall,
	})
	for _, verb := range []service.Verb{service.Start, service.Stop, service.Restart} {
		Register(&Command{
			Name:     string(verb),
			Synopsis: "[--system]",
			Summary:  string(verb) + " the installed agent service",
			Help:     serviceHelp,
			Setup:    setupControl(verb),
		})
	}
	Register(&Command{
		Name:     "service status",
		Synopsis: "[--system] [--json]",
		Summary:  "show whether the agent service is installed and running, and how it starts",
		Help: serviceHelp + `

'roomrelay status' shows the agent's connection to the hub; this shows the
service around it. Exit codes: 0 running; 1 installed but not running;
4 not installed, or no service manager to ask.`,
		Setup: setupServiceStatus,
	})
}

// setupInstall parses the flags of `roomrelay install` and returns its runner.
func setupInstall(fs *flag.FlagSet, e *Env) Runner {
	f := addSvcFlags(fs, e)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("install takes no arguments")
		}
		cfg := f.config(e)
		r, err := service.Install(ctx, cfg)
		if err != nil {
			return serviceErr(err)
		}
		s := r.Spec
		fmt.Fprintf(e.Stdout, "installed roomrelay as a %s", s.Kind)
		if s.UnitPath != "" {
			fmt.Fprintf(e.Stdout, " (%s)", s.UnitPath)
		}
		fmt.Fprintf(e.Stdout, "\n  it runs: %s %s\n", s.Exe, strings.Join(s.Args(), " "))
		fmt.Fprintln(e.Stdout, "  start it now with: roomrelay start")
		if r.BootNote != "" {
			fmt.Fprintln(e.Stdout, r.BootNote)
		}
		if r.NotEnrolled {
			fmt.Fprintln(e.Stdout, "  note: this device is not enrolled yet; the service will not connect until you run `roomrelay enroll`, then `roomrelay restart`")
		}
		return nil
	}
}

// setupUninstall parses the flags of `roomrelay uninstall` and returns its
// runner.
func setupUninstall(fs *flag.FlagSet, e *Env) Runner {
	f := addSvcFlags(fs, e)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("uninstall takes no arguments")
		}
		cfg := f.config(e)
		r, err := service.Uninstall(ctx, cfg)
		if err != nil {
			return serviceErr(err)
		}
		if r.ManagerErr != nil {
			fmt.Fprintf(e.Stderr, "roomrelay uninstall: the service manager reported %v; the service file was removed anyway\n", r.ManagerErr)
		}
		p := r.Spec.Paths
		fmt.Fprintf(e.Stdout, "uninstalled the roomrelay %s\n", r.Spec.Kind)
		fmt.Fprintf(e.Stdout, "  kept: config and enrollment in %s, state in %s, data in %s\n", p.Config, p.State, p.Data)
		fmt.Fprintln(e.Stdout, "  (delete them by hand to forget this device; `roomrelay hub revoke` on the hub cuts it off)")
		return nil
	}
}

// setupControl returns the Setup of `roomrelay start`, `stop` or `restart`.
func setupControl(verb service.Verb) func(*flag.FlagSet, *Env) Runner {
	past := map[service.Verb]string{service.Start: "started", service.Stop: "stopped", service.Restart: "restarted"}[verb]
	return func(fs *flag.FlagSet, e *Env) Runner {
		f := addSvcFlags(fs, e)
		return func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return usagef("%s takes no arguments", verb)
			}
			cfg := f.config(e)
			s, err := service.Control(ctx, cfg, verb)
			if err != nil {
				return serviceErr(err)
			}
			fmt.Fprintf(e.Stdout, "%s the roomrelay %s\n", past, s.Kind)
			if verb != service.Stop {
				fmt.Fprintln(e.Stdout, "  `roomrelay status` shows whether it reached the hub")
			}
			return nil
		}
	}
}

// setupServiceStatus parses the flags of `roomrelay service status` and
// returns its runner.
func setupServiceStatus(fs *flag.FlagSet, e *Env) Runner {
	f := addSvcFlags(fs, e)
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("service status takes no arguments")
		}
		r, code, err := serviceReport(ctx, e, f)
		if err != nil {
			return err
		}
		if *asJSON {
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
}

// serviceReport is the service's report (for `service status` and doctor)
// with the exit code `service status` gives for it.
func serviceReport(ctx context.Context, e *Env, f svcFlags) (service.Report, int, error) {
	cfg := f.config(e)
	r, err := service.Status(ctx, cfg)
	if err != nil {
		return r, 0, serviceErr(err)
	}
	return r, serviceStatusExit(r.State), nil
}

// serviceStatusExit is the exit code `service status` gives for a state:
// 0 running, 4 not installed, 1 installed but not running.
func serviceStatusExit(state string) int {
	switch state {
	case service.StateRunning:
		return ExitOK
	case service.StateNotInstalled:
		return ExitUnavailable
	}
	return ExitFailure
}
