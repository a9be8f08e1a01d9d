package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/agent/power"
	"github.com/roomrelay/roomrelay/agent/provider"
	"github.com/roomrelay/roomrelay/sandbox"
)

func init() {
	Register(&Command{
		Name:     "run",
		Daemon:   true,
		Synopsis: "[--home DIR] [--no-sandbox] [--ca-file FILE]",
		Summary:  "run the device agent in the foreground (what the service runs)",
		Help: `Connects to the hub this device is enrolled with and serves the projects the
owner enabled, with the commands the owner allowed, until SIGINT or SIGTERM.
Exits 3 when the hub refuses the device's token (revoked): enroll again.`,
		Setup: setupRun,
	})
}

// setupRun parses the flags of `roomrelay run` and returns its runner.
func setupRun(fs *flag.FlagSet, e *Env) Runner {
	paths := pathFlags(fs, e)
	noSandbox := fs.Bool("no-sandbox", false, "do not smoke-run approved snippets")
	provInFlight := fs.Int("provider-in-flight", provider.DefaultMaxInFlight, "requests the agent has in flight to the desktop app at once (with `provider app` in the policy); more wait for a free slot until their deadline")
	background := fs.Bool("background", false, "log to agent.log in the state dir instead of stderr and, on Windows, let go of the console window (how the Windows logon task starts the agent)")
	rf := addRuntimeFlags(fs, e)
	caFile := caFileFlag(fs, e)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("run takes no arguments")
		}
		if *provInFlight < 1 || *provInFlight > provider.MaxMaxInFlight {
			return usagef("--provider-in-flight must be from 1 to %d", provider.MaxMaxInFlight)
		}
		p, err := paths()
		if err != nil {
			return err
		}
		logPath := filepath.Join(p.State, "agent.log")
		if *background {
			f, err := openAgentLog(p.State, logPath)
			if err != nil {
				return err
			}
			defer f.Close()
			e.Stderr = f
			e.Logger = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: e.LogLevel}))
			// A console program started by Task Scheduler gets a console
			// window of its own; closing it would end the agent.
			if err := detachConsole(); err != nil {
				e.Logger.Warn("could not let go of the console window", "err", err)
			}
			err = underServiceManager(ctx, e, logPath, func(ctx context.Context) error {
				return runAgent(ctx, e, p, rf, *caFile, !*noSandbox, *provInFlight)
			})
			if err == nil {
				return nil
			}
			// Main would print the failure after f is closed: the log
			// is where a run without a console says why it ended.
			return silent(report(&Env{Stdout: io.Discard, Stderr: f}, &Command{Name: "run"}, fs, err))
		}
		return underServiceManager(ctx, e, logPath, func(ctx context.Context) error {
			return runAgent(ctx, e, p, rf, *caFile, !*noSandbox, *provInFlight)
		})
	}
}

// openAgentLog opens the agent's log file for appending (0600, its
// directory made 0700 if missing): `run --background` and the Windows
// service write there, and `roomrelay logs` reads it on Windows.
func openAgentLog(dir, path string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("agent log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("agent log: %w", err)
	}
	return f, nil
}

// runAgent runs the device agent and its sleep watcher until ctx ends or the
// hub refuses the device.
func runAgent(ctx context.Context, e *Env, p device.Paths, rf runtimeFlags, caFile string, withSandbox bool, provInFlight int) error {
	d, pool, err := openDaemon(ctx, e, p, rf, caFile, withSandbox, provInFlight)
	if err != nil {
		return err
	}
	defer d.Close()
	if pool != nil {
		defer pool.Close()
	}
	e.Logger.Info("agent starting", "hub", d.Agent().Status().Hub, "device", d.Agent().Status().DeviceID)
	// Opening the stores, migrating and compiling the command schemas leave
	// megabytes of garbage, and an idle agent never allocates enough to
	// reach the runtime's 4 MB minimum heap goal; nor does the runtime's
	// two-minute forced GC start before a first GC. Without this one
	// collection the startup garbage stays resident for the agent's life.
	debug.FreeOSMemory()
	// Sleep announcements: logind on Linux, the suspend/resume
	// notifications on Windows. While they are heard the agent's wall-clock
	// wake detector does not tick; elsewhere (macOS, Linux without logind)
	// it is what reconnects after a wake.
	runCtx, stop := context.WithCancel(ctx)
	powerDone := make(chan struct{})
	go func() {
		defer close(powerDone)
		a := d.Agent()
		err := power.Watch(runCtx, power.Config{Logger: e.Logger,
			OnSleep:  func(ctx context.Context) { _ = a.AnnounceSleep(ctx) },
			OnResume: func(context.Context) { a.Resume() },
			OnReady:  func() { a.SetOSWakeNotices(true) }})
		a.SetOSWakeNotices(false)
		if err != nil && !errors.Is(err, context.Canceled) {
			e.Logger.Info("no sleep notifications; wake is detected by the wall clock", "reason", err)
		}
	}()
	err = d.Run(runCtx)
	stop()
	<-powerDone
	switch {
	case errors.Is(err, agent.ErrNeedsEnrollment):
		return exitErr(ExitNotEnrolled, fmt.Errorf("%w: the hub refused this device's token; enroll again with a new pairing code", err))
	case err != nil && !errors.Is(err, context.Canceled):
		return err
	}
	e.Logger.Info("agent stopped")
	return nil
}

// openDaemon builds the device agent from the enrolled config, the token in
// the credential store and, unless disabled, a sandbox pool. caFile (the
// flag or env) overrides the CA file enroll recorded.
func openDaemon(ctx context.Context, e *Env, p device.Paths, rf runtimeFlags, caFile string, withSandbox bool, provInFlight int) (*daemon.Daemon, *sandbox.Pool, error) {
	cfg, err := device.LoadConfig(p)
	if err != nil {
		return nil, nil, err
	}
	if caFile == "" {
		caFile = cfg.CAFile
	}
	tlsCfg, err := clientTLS(caFile)
	if err != nil {
		return nil, nil, err
	}
	cs, err := credstore.Open(ctx, cfg.CredentialStore, p.Config)
	if err != nil {
		return nil, nil, exitErr(ExitUnavailable, err)
	}
	token, err := cs.Get(ctx, cfg.DeviceID)
	if errors.Is(err, credstore.ErrNotFound) {
		return nil, nil, exitErr(ExitNotEnrolled, fmt.Errorf("%w: enroll again (`roomrelay enroll --hub %s --code CODE`)", err, cfg.Hub))
	}
	if err != nil {
		return nil, nil, exitErr(ExitUnavailable, err)
	}
	dc := daemon.Config{ConfigDir: p.Config, StateDir: p.State, DataDir: p.Data,
		HubURL: cfg.Hub, DeviceID: cfg.DeviceID, Token: token, Version: Version, OS: runtime.GOOS, Logger: e.Logger,
		TLSConfig: tlsCfg, RuntimeDir: p.Runtime, SocketShortDir: socketShortDir(e), OAuth: device.OAuthApprover{Paths: p},
		ProviderInFlight: provInFlight,
		Enrolled: func() []string {
			if c, err := device.LoadConfig(p); err == nil {
				return c.Projects
			}
			return nil
		}}
	var pool *sandbox.Pool
	if withSandbox && e.Executable != "" {
		scfg, err := rf.config(e)
		if err != nil {
			return nil, nil, err
		}
		worker, err := sandboxWorker(e)
		if err != nil {
			// The agent still serves reads and reviews; only smoke-runs are
			// off, and a smoke_run_room_app caller is told why.
			e.Logger.Warn("no sandbox: approved snippets are not smoke-run", "reason", err)
			dc.NoSandboxReason = "the sandbox worker " + workerName() + " is not installed next to roomrelay (reinstall the package)"
		} else {
			scfg.WorkerCommand = worker
			if pool, err = sandbox.NewPool(scfg); err != nil {
				return nil, nil, fmt.Errorf("sandbox: %w", err)
			}
			dc.Sandbox = pool
			// A fetch is never silent: the log says what was downloaded,
			// from where, and how big it was.
			dc.EnsureRuntime = func(ctx context.Context) error {
				return sandbox.EnsureRuntime(ctx, scfg, func(s string) { e.Logger.Info("sandbox runtime: " + s) })
			}
		}
	}
	d, err := daemon.Open(ctx, dc)
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, nil, err
	}
	return d, pool, nil
}

// socketShortDir is where the local API's socket goes when its usual path
// is too long for a socket address: the user's runtime dir, even below
// --home, else the user's home; never a shared directory such as /tmp.
func socketShortDir(e *Env) string {
	if rt := e.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(rt) {
		return rt
	}
	if h := e.Getenv("HOME"); filepath.IsAbs(h) {
		return h
	}
	if h, err := os.UserHomeDir(); err == nil {
		return h
	}
	return ""
}
