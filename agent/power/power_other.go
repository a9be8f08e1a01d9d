//go:build !linux

package power

import "context"

// Watch returns ErrUnsupported: only Linux (logind) announces sleep here.
// The agent's wall-clock jump detection covers wake-ups on other systems.
func Watch(ctx context.Context, cfg Config) error { return ErrUnsupported }
