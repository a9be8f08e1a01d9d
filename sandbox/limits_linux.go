package sandbox

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
func applyDataLimit(limit int64) (string, error) {
	lim := unix.Rlimit{Cur: uint64(limit), Max: uint64(limit)}
	if err := unix.Setrlimit(unix.RLIMIT_DATA, &lim); err != nil {
		return "", fmt.Errorf("setrlimit RLIMIT_DATA: %w", err)
	}
	return fmt.Sprintf("RLIMIT_DATA %d MiB", limit>>20), nil
}

// currentRSS is the resident set size of this process, 0 if unknown.
func currentRSS() int64 { return rssOf("self") }

// rssOf reads VmRSS of a process from /proc.
func rssOf(pid string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
