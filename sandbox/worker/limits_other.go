//go:build !linux

package worker

// applyDataLimit: without Linux's RLIMIT_DATA semantics (macOS and Windows
// do not bound mmap-backed Go heaps with it), the memory bound is the heap
// watchdog, the Go soft memory limit and the parent's SIGKILL on timeout.
func applyDataLimit(limit int64) (string, bool, error) {
	return "no RLIMIT_DATA on this OS: heap watchdog and Go soft memory limit only", false, nil
}

func currentRSS() int64 { return 0 }

func rssOf(string) int64 { return 0 }
