package worker

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// applyDataLimit caps the worker's data segment. RLIMIT_DATA (not
// RLIMIT_AS) because the Go runtime reserves far more address space than it
// uses; the hard limit is lowered too, so nothing in the process can raise it.
func applyDataLimit(limit int64) (string, bool, error) {
	lim := unix.Rlimit{Cur: uint64(limit), Max: uint64(limit)}
	if err := unix.Setrlimit(unix.RLIMIT_DATA, &lim); err != nil {
		return "", false, fmt.Errorf("setrlimit RLIMIT_DATA: %w", err)
	}
	return fmt.Sprintf("RLIMIT_DATA %d MiB", limit>>20), true, nil
}

// currentRSS is the resident set size of this process, 0 if unknown.
func currentRSS() int64 { return rssOf("self") }

// rssOf reads a process's resident set size from /proc/PID/statm (the
// same figure as VmRSS in status, in pages, and cheaper to read: the worker
// reports it with every response).
func rssOf(pid string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}
