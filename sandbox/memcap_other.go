//go:build !windows

package sandbox

// memCap is Windows' Job Object; elsewhere the worker caps itself (Linux:
// RLIMIT_DATA, set by the worker; macOS: the heap watchdog and Go's soft
// limit only).
type memCap struct{}

const memCapDescription = ""

func capMemory(int, int64) (*memCap, error) { return nil, nil }

func (*memCap) Close() error { return nil }
