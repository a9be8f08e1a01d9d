//go:build !windows

package cli

import "context"

// underServiceManager runs fn. systemd and launchd keep the agent's stderr
// (the journal, launchd's log) and stop it with SIGTERM, which cancels ctx
// (see cmd/roomrelay); only Windows needs a service-manager handshake and a
// log file (run_windows.go).
func underServiceManager(ctx context.Context, _ *Env, _ string, fn func(context.Context) error) error {
	return fn(ctx)
}

// detachConsole is for Windows, where a console window belongs to the
// process; elsewhere `run --background` only moves the log.
func detachConsole() error { return nil }
