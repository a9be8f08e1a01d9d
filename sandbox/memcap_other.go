//go:build !windows && !darwin

package sandbox

// memCap is Windows' Job Object and macOS's footprint watcher; elsewhere
// the worker caps itself (Linux: RLIMIT_DATA, set by the worker).
type memCap struct{}

const memCapDescription = ""

func capMemory(int, int64) (*memCap, error) { return nil, nil }

func (*memCap) Close() error { return nil }

// Exceeded: the worker caps itself here; its death says so on stderr.
func (*memCap) Exceeded() bool { return false }
