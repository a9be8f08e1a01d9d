package sandbox

import (
	"fmt"
	"time"
)

// memCap on macOS is the parent watching the worker: macOS enforces no
// RLIMIT_DATA on mmap-backed memory and has no job object, so the pool
// samples the worker's physical footprint every footprintEvery and
// SIGKILLs it at the cap (memWatch). The worker cannot stop the watcher
// (it runs in the daemon), and a run it kills reads as phase memory. A
// sample can still come late after one huge allocation; the worker's heap
// watchdog and Go's soft limit act below the cap first.
type memCap = memWatch

const memCapDescription = "macOS: the parent samples the worker's memory footprint every 10 ms and kills it at the cap"

// footprintEvery is how often the watcher samples.
const footprintEvery = 10 * time.Millisecond

// capMemory checks that the worker's footprint can be read, then watches
// it until Close.
func capMemory(pid int, limit int64) (*memCap, error) {
	if _, err := footprint(pid); err != nil {
		return nil, fmt.Errorf("read the worker's memory footprint: %w", err)
	}
	return startMemWatch(pid, limit, footprintEvery, footprint), nil
}
