package worker

import (
	"runtime"
	"testing"

	"github.com/roomrelay/roomrelay/sandbox"
)

// TestOneBigAllocationHitsTheCap: one built-in call that allocates far past
// the worker's memory cap (an array fill, which cannot be interrupted) runs
// between two samples of the heap watchdog, so only a hard cap stops it: RLIMIT_DATA on Linux, the Job Object's process memory limit
// on Windows, the parent's footprint watcher on macOS (compiled and vetted,
// never run here). The result names phase memory.
func TestOneBigAllocationHitsTheCap(t *testing.T) {
	switch {
	case runtime.GOOS != "linux" && runtime.GOOS != "windows" && runtime.GOOS != "darwin":
		t.Skip("no hard memory cap on " + runtime.GOOS + " (heap watchdog and Go's soft limit only)")
	case raceEnabled:
		t.Skip("bounded by RLIMIT_DATA, which race-detector builds cannot run under")
	case underWine():
		// Measured: this fill ran its full 30 s in a job capped at 256 MiB.
		t.Skip("Wine accepts a Job Object's process memory limit but does not enforce it; real Windows does")
	}
	p := newTestPool(t, nil) // 256 MiB cap, a 30 s limit it must not reach
	res := smoke(t, p, app(`const a = new Array(5e7).fill(0); return <p>{a.length}</p>;`))
	t.Logf("%s | limits %s", res.Summary(), p.Limits())
	if res.Phase != sandbox.PhaseMemory {
		t.Fatalf("phase %q, want memory: %s", res.Phase, res.Summary())
	}
}
