//go:build !linux && !windows

package power

import "context"

// Watch returns ErrUnsupported: only Linux (logind) and Windows announce
// sleep here (macOS needs cgo for IOKit's notifications).
// The agent's wall-clock jump detection covers wake-ups on other systems.
func Watch(ctx context.Context, cfg Config) error { return ErrUnsupported }
