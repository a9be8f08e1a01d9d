//go:build windows

package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"

	"github.com/roomrelay/roomrelay/packaging"
)

// underServiceManager runs the agent under the Windows service control
// manager when the SCM started this process, and directly otherwise. A
// service process must answer the SCM's start handshake within 30 s and
// stop when told; without this the SCM kills `roomrelay run` as hung.
//
// This uses x/sys/windows/svc (already linked through kardianos/service)
// rather than kardianos' Run, because kardianos gives the program no way to
// end the service by itself: when the agent stops on its own (a revoked
// token), the service must stop with the agent's exit code, not keep an
// empty process running.
func underServiceManager(ctx context.Context, e *Env, logPath string, fn func(context.Context) error) error {
	isService, err := svc.IsWindowsService()
	if err != nil {
		return fmt.Errorf("detect the Windows service manager: %w", err)
	}
	if !isService {
		return fn(ctx)
	}
	// A service has no console: stderr goes nowhere. Log to a file in the
	// state dir instead (appended; `roomrelay status` still reads status.json).
	if logPath != "" {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("open the service log %s: %w", logPath, err)
		}
		defer f.Close()
		e.Stderr = f
		e.Logger = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: e.LogLevel}))
	}
	h := &scmHandler{ctx: ctx, fn: fn}
	if err := svc.Run(packaging.Name, h); err != nil {
		return fmt.Errorf("run under the Windows service manager: %w", err)
	}
	return h.err
}

// scmHandler adapts the agent's Run to svc.Handler.
type scmHandler struct {
	ctx context.Context
	fn  func(context.Context) error
	err error // what fn returned; read after svc.Run returns
}

func (h *scmHandler) Execute(_ []string, req <-chan svc.ChangeRequest, status chan<- svc.Status) (bool, uint32) {
	status <- svc.Status{State: svc.StartPending}
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.fn(ctx) }()
	status <- svc.Status{State: svc.Running, Accepts: svc.AcceptStop | svc.AcceptShutdown}
	for {
		select {
		case h.err = <-done:
			// The agent stopped by itself (revoked, or failed): the service
			// stops with its exit code, so the SCM's recovery settings apply.
			return serviceExitCode(h.err)
		case c := <-req:
			switch c.Cmd {
			case svc.Interrogate:
				status <- c.CurrentStatus
			case svc.Stop, svc.Shutdown:
				// The agent closes its websocket cleanly (the hub marks it
				// offline at once); tell the SCM how long that may take.
				status <- svc.Status{State: svc.StopPending, WaitHint: 20_000}
				cancel()
				h.err = <-done
				return serviceExitCode(h.err)
			}
		}
	}
}

// serviceExitCode maps the agent's result to the service-specific exit code
// the SCM records: 0 for a requested stop, else the CLI's exit code.
func serviceExitCode(err error) (bool, uint32) {
	if err == nil || errors.Is(err, context.Canceled) {
		return false, 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return true, uint32(ee.Code)
	}
	return true, ExitFailure
}

var procFreeConsole = windows.NewLazySystemDLL("kernel32.dll").NewProc("FreeConsole")

// detachConsole lets go of this process's console: Task Scheduler gives
// the logon task's console program a window of its own, which the user
// could close (ending the agent). The window still shows for a moment at
// start. Without a console, stderr goes nowhere: the caller logs to a file.
func detachConsole() error {
	if r, _, err := procFreeConsole.Call(); r == 0 {
		return fmt.Errorf("FreeConsole: %w", err)
	}
	return nil
}
