package agent

import (
	"bufio"
	"context"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

// BenchmarkIdleFootprint measures what one connected, idle agent adds to its
// process: Go heap in use and goroutines once online, and the process RSS
// (Linux; it includes the test binary and the in-process test hub, so it is
// an upper bound: the real daemon is measured from the CLI).
//
//	go test -run '^$' -bench IdleFootprint -benchtime 1x ./agent/
func BenchmarkIdleFootprint(b *testing.B) {
	for range b.N {
		hub := newTestHub(b)
		heap0, g0 := heapInUse(), runtime.NumGoroutine()
		a := newTestAgent(b, hub, b.TempDir(), func(c *Config) { c.Logger = slog.New(slog.DiscardHandler) })
		a.Register("echo", func(ctx context.Context, cmd *relay.Command) (any, error) { return "ok", nil })
		stop, _, _ := start(b, a)
		c := hub.next(b)
		c.send(command("warm", "echo", "")) // open the dedupe store's pages too
		c.result(b)
		time.Sleep(200 * time.Millisecond) // idle
		heap1, g1 := heapInUse(), runtime.NumGoroutine()
		b.ReportMetric(float64(int64(heap1)-int64(heap0))/1024, "heap-KiB")
		// Minus the test hub's reader for this connection.
		b.ReportMetric(float64(g1-g0-1), "goroutines")
		b.ReportMetric(float64(vmRSS())/(1<<20), "proc-RSS-MiB")
		if err := stop(); err != nil {
			b.Fatal(err)
		}
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// vmRSS returns the process's resident set in bytes, or 0 if unknown.
func vmRSS() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
