package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/sandbox"
)

func TestPoolRunsExample(t *testing.T) {
	p := newTestPool(t, nil)
	for i := 0; i < 3; i++ {
		res := smoke(t, p, exampleFiles(t))
		if !res.OK {
			t.Fatalf("run %d: %s", i, res.Summary())
		}
		if res.Render == nil || res.Render.Elements["button"] != 3 || res.Clicks != 3 {
			t.Fatalf("run %d: unexpected summary %+v clicks %d", i, res.Render, res.Clicks)
		}
	}
	st := p.Stats()
	if st.Spawned != 1 {
		t.Errorf("spawned %d workers for 3 sequential runs, want 1", st.Spawned)
	}
	if !strings.Contains(p.Limits(), "heap watchdog") {
		t.Errorf("limits not reported: %q", p.Limits())
	}
	t.Logf("limits: %s; stats %+v", p.Limits(), st)
}

func TestPoolRecyclesAfterN(t *testing.T) {
	p := newTestPool(t, func(c *sandbox.Config) { c.Workers = 1; c.RecycleAfter = 2 })
	for i := 0; i < 5; i++ {
		if res := smoke(t, p, exampleFiles(t)); !res.OK {
			t.Fatalf("run %d: %s", i, res.Summary())
		}
	}
	st := p.Stats()
	if st.Spawned != 3 || st.Recycled != 2 {
		t.Fatalf("stats %+v, want 3 spawned and 2 recycled for 5 runs", st)
	}
}

func TestPoolRespawnsAfterKill(t *testing.T) {
	p := newTestPool(t, func(c *sandbox.Config) { c.Workers = 1; shortTimeout(c) })
	res := smoke(t, p, app(`const ok = /^(?=a)(a+)+$/.test("a".repeat(40) + "b"); return <p>{String(ok)}</p>;`))
	if res.Phase != sandbox.PhaseTimeout {
		t.Fatalf("regex bomb: %s", res.Summary())
	}
	if res := smoke(t, p, exampleFiles(t)); !res.OK {
		t.Fatalf("after the kill: %s", res.Summary())
	}
	st := p.Stats()
	if st.Killed != 1 || st.Spawned != 2 {
		t.Fatalf("stats %+v, want 1 killed and 2 spawned", st)
	}
}

func TestPoolIdleWorkersExit(t *testing.T) {
	p := newTestPool(t, func(c *sandbox.Config) { c.IdleTimeout = 100 * time.Millisecond })
	if res := smoke(t, p, exampleFiles(t)); !res.OK {
		t.Fatal(res.Summary())
	}
	pids := p.Stats().WorkerPIDs
	if len(pids) != 1 {
		t.Fatalf("live workers %v", pids)
	}
	deadline := time.Now().Add(20 * time.Second)
	for p.Stats().Live > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("idle worker still alive: %+v", p.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := p.Stats(); st.Reaped != 1 {
		t.Fatalf("stats %+v", st)
	}
	assertGone(t, pids[0])
	// A new run starts a new worker.
	if res := smoke(t, p, exampleFiles(t)); !res.OK {
		t.Fatal(res.Summary())
	}
}

// TestPoolClose closes the pool with two runs in their workers and one
// waiting for a worker: Close stops them all (sandbox.ErrClosed), and when it
// returns no worker of the pool is left.
func TestPoolClose(t *testing.T) {
	// The runs would end at the time limit only, a minute away.
	p := newTestPool(t, func(c *sandbox.Config) { c.Timeout = time.Minute })
	files := app(`while (true) {} return null;`)
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() {
			res, err := p.SmokeRun(context.Background(), files)
			if err == nil {
				err = fmt.Errorf("a result: %s", res.Summary())
			}
			errs <- err
		}()
	}
	deadline := time.Now().Add(time.Minute)
	for st := p.Stats(); st.Running != 2 || st.Live != 2; st = p.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("two runs never got their workers: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	pids := p.Stats().WorkerPIDs
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Live != 0 || st.Running != 0 {
		t.Errorf("workers or runs left after Close: %+v", st)
	}
	for _, pid := range pids {
		assertGone(t, pid)
	}
	for i := 0; i < 3; i++ {
		if err := <-errs; !errors.Is(err, sandbox.ErrClosed) {
			t.Errorf("run in flight during Close: %v, want sandbox.ErrClosed", err)
		}
	}
	if _, err := p.SmokeRun(context.Background(), exampleFiles(t)); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("SmokeRun after Close: %v", err)
	}
	if st := p.Stats(); st.Killed != 0 || st.Died != 0 {
		t.Errorf("stopped runs counted as lost workers: %+v", st)
	}
}

func TestPoolContextCancel(t *testing.T) {
	p := newTestPool(t, func(c *sandbox.Config) { c.Timeout = time.Minute })
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(200 * time.Millisecond)
		cancel()
	}()
	_, err := p.SmokeRun(ctx, app(`while (true) {} return null;`))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if st := p.Stats(); st.Live != 0 {
		t.Fatalf("worker of the cancelled run still alive: %+v", st)
	}
}

func TestMissingRuntimeIsRuntimeUnavailable(t *testing.T) {
	exe, _ := os.Executable()
	p, err := sandbox.NewPool(sandbox.Config{CacheDir: t.TempDir(), WorkerCommand: []string{exe, workerMarker}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	res, err := p.SmokeRun(context.Background(), exampleFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.Phase != sandbox.PhaseRuntimeUnavailable || !strings.Contains(res.Error.Message, "fetch-runtime") {
		t.Fatalf("got %s", res.Summary())
	}
	if st := p.Stats(); st.Spawned != 0 {
		t.Fatalf("a worker started without a runtime: %+v", st)
	}
}

// TestDaemonMemoryAfter100Runs checks that the calling process (the
// daemon) does not grow with the runs its workers do.
func TestDaemonMemoryAfter100Runs(t *testing.T) {
	if currentRSS() == 0 {
		t.Skip("RSS is only read on Linux")
	}
	p := newTestPool(t, shortTimeout) // for the regex bomb below
	files := []map[string]string{
		exampleFiles(t),
		app(`throw new Error("render broke");`),
		map[string]string{EntryPath: "export default function App() {\n  return <p>{1 +}</p>;\n}\n"},
		app(`useEffect(() => { Promise.reject(new Error("x")); }, []); return null;`),
	}
	settle := func() int64 {
		runtime.GC()
		debug.FreeOSMemory()
		return currentRSS()
	}
	for i := 0; i < 8; i++ {
		smoke(t, p, files[i%len(files)])
	}
	before := settle()
	pid := os.Getpid()
	for i := 0; i < 100; i++ {
		smoke(t, p, files[i%len(files)])
	}
	// One worker killed on the way (an uninterruptible regex).
	if res := smoke(t, p, app(`return <p>{String(/^(?=a)(a+)+$/.test("a".repeat(40) + "b"))}</p>;`)); res.Phase != sandbox.PhaseTimeout {
		t.Fatalf("regex bomb: %s", res.Summary())
	}
	after := settle()
	t.Logf("daemon RSS before %.1f MiB, after 101 runs %.1f MiB; pool %+v", mib(before), mib(after), p.Stats())
	if os.Getpid() != pid {
		t.Fatal("pid changed")
	}
	if after-before > 8<<20 {
		t.Fatalf("daemon RSS grew by %.1f MiB over 101 smoke-runs", mib(after-before))
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func TestDeadWorkerResults(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		mode  string
		phase sandbox.Phase
		msg   string
	}{
		{"oom", sandbox.PhaseMemory, "memory limit"},
		{"thread", sandbox.PhaseMemory, "memory limit"},
		{"gc-fault", sandbox.PhaseMemory, "faulted in runtime.(*spanQueue).tryDrain"},
		{"gc-fault-uncapped", sandbox.PhaseCrash, "exit status 2 (SIGSEGV: segmentation violation)"},
		{"nil", sandbox.PhaseCrash, "panic: runtime error: invalid memory address or nil pointer dereference"},
		{"panic", sandbox.PhaseCrash, "panic: worker bug"},
		{"exit", sandbox.PhaseCrash, "exit status 1"},
		{"garbage", sandbox.PhaseCrash, "unreadable response"},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			if tc.mode == "gc-fault-uncapped" && (runtime.GOOS == "windows" || runtime.GOOS == "darwin") {
				t.Skip("no uncapped worker on " + runtime.GOOS + ": the pool caps every worker (a Job Object on Windows, the footprint watcher on macOS)")
			}
			p := newTestPool(t, func(c *sandbox.Config) { c.WorkerCommand = []string{exe, dyingWorkerMarker, tc.mode} })
			res := smoke(t, p, exampleFiles(t))
			if res.OK || res.Phase != tc.phase || !strings.Contains(res.Error.Message, tc.msg) {
				t.Fatalf("got %s, want phase %s with %q", res.Summary(), tc.phase, tc.msg)
			}
			if st := p.Stats(); st.Live != 0 {
				t.Fatalf("dead worker still counted: %+v", st)
			}
		})
	}
}
