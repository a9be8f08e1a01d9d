//go:build !windows

package cli

import "context"

// underServiceManager runs fn. systemd and launchd stop the agent with
// SIGTERM, which cancels ctx (see cmd/roomrelay); only Windows needs a
// service-manager handshake (run_windows.go).
func underServiceManager(ctx context.Context, _ *Env, fn func(context.Context) error) error {
	return fn(ctx)
}
