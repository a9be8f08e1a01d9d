package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	"github.com/roomrelay/roomrelay/sandbox"
)

// workerGCPercent is the worker's GOGC.
const workerGCPercent = 400

// Main is the body of the hidden worker subcommand: it serves
// smoke-run requests from stdin until stdin closes and returns the process
// exit code. It must run in its own process (it lowers the process's memory
// limits) and be started by a sandbox.Pool.
func Main(ctx context.Context, stdin io.Reader, stdout io.Writer) int {
	// The snippet's Date is virtual anyway; UTC keeps its formatting
	// independent of the host.
	time.Local = time.UTC
	dec := json.NewDecoder(bufio.NewReaderSize(stdin, 64<<10))
	enc := json.NewEncoder(stdout)
	fatal := func(err error) int {
		_ = enc.Encode(sandbox.WorkerResponse{Error: err.Error()})
		return 1
	}

	var req sandbox.WorkerRequest
	if err := dec.Decode(&req); err != nil || req.Init == nil {
		return fatal(fmt.Errorf("sandbox worker: expected an init message: %v", err))
	}
	in := req.Init
	limits := "RLIMIT_DATA off in this race-detector build"
	dataLimited := false
	if !raceEnabled {
		var err error
		if limits, dataLimited, err = applyDataLimit(in.MemoryLimitBytes); err != nil {
			return fatal(err)
		}
	}
	// The watchdog interrupts at 40% of the cap; the GC's soft limit sits
	// well above it (at 60%) so the GC does not thrash before it fires.
	// A run's live heap is a few MiB and most of what it allocates is
	// garbage at its end, so the GC may wait longer than by default; the
	// soft limit still makes it collect as the heap nears the cap.
	heapLimit := uint64(in.MemoryLimitBytes) * 4 / 10
	debug.SetMemoryLimit(in.MemoryLimitBytes * 6 / 10)
	debug.SetGCPercent(workerGCPercent)
	debug.SetMaxStack(128 << 20)
	lib, err := compileLibraries(in.Libraries)
	in.Libraries = nil
	if err != nil {
		return fatal(err)
	}
	timeout := time.Duration(in.TimeoutMS) * time.Millisecond
	grace := time.Duration(in.KillGraceMS) * time.Millisecond
	lim := runLimits{Timeout: timeout, HeapLimit: heapLimit, MaxCallStack: 5000, Advance: 3 * time.Second}
	limits += fmt.Sprintf(", heap watchdog %d MiB, Go memory limit %d MiB, call stack 5000 frames, wall clock %s, SIGKILL after %s more",
		heapLimit>>20, in.MemoryLimitBytes*6/10>>20, timeout, grace)
	if err := enc.Encode(sandbox.WorkerResponse{Ready: true, Limits: limits, DataLimited: dataLimited, RSSBytes: currentRSS()}); err != nil {
		return 1
	}

	// The next run's runtime (globals, React, the test renderer) is
	// prepared while the worker waits for the request, or alongside its
	// build when requests come back to back. A build that fails leaves it
	// unused for the next request.
	bundles := make(chan *Bundle)
	results := make(chan runResult)
	go runner(lib, lim, bundles, results)
	defer close(bundles)
	var cache bundleCache
	exec := func(b *Bundle) (*sandbox.Result, bool) {
		bundles <- b
		o := <-results
		return o.res, o.hitLimit
	}
	for ctx.Err() == nil {
		var req sandbox.WorkerRequest
		if err := dec.Decode(&req); err != nil {
			if errors.Is(err, io.EOF) {
				return 0
			}
			return fatal(fmt.Errorf("sandbox worker: bad request: %w", err))
		}
		// The parent kills a worker stuck in a Go built-in; this is the
		// backstop for when the parent is gone.
		backstop := time.AfterFunc(timeout+3*grace, func() { os.Exit(3) })
		res, recycle := smokeFiles(req.Files, cache.build, exec)
		backstop.Stop()
		resp := sandbox.WorkerResponse{ID: req.ID, Result: res, Recycle: recycle, RSSBytes: currentRSS()}
		if err := enc.Encode(resp); err != nil {
			return 1
		}
		if recycle {
			return 0
		}
	}
	return 0
}

// smokeFiles builds files with build (Build, or a worker's bundleCache)
// and smoke-runs the bundle with exec.
func smokeFiles(files map[string]string, build func(map[string]string) (*Bundle, error), exec func(*Bundle) (*sandbox.Result, bool)) (*sandbox.Result, bool) {
	start := time.Now()
	b, err := build(files)
	if err != nil {
		res := &sandbox.Result{Phase: sandbox.PhaseBuild, Error: &sandbox.ErrorInfo{Message: err.Error()}}
		var be *BuildError
		if errors.As(err, &be) && len(be.Messages) > 0 {
			m := be.Messages[0]
			res.Error = &sandbox.ErrorInfo{Message: m.Text, File: m.File, Line: m.Line, Column: m.Column}
			res.BuildErrors = be.Messages
		}
		res.DurationMS = millis(time.Since(start))
		return res, false
	}
	// Compiling here overlaps with the runner still preparing the runtime
	// when requests come back to back; a compile error is reported by the
	// run's load step, as before.
	_, _ = b.compile()
	res, recycle := exec(b)
	res.DurationMS = millis(time.Since(start))
	return res, recycle
}

type runResult struct {
	res      *sandbox.Result
	hitLimit bool
}

// runner serves the worker's runs: it prepares a fresh runtime, waits for
// the bundle to run in it, runs it, and starts over with another fresh
// runtime. Each runtime is used by this goroutine only, for one snippet;
// the goroutine lives on so its grown stack serves the next run too.
func runner(lib *libraries, lim runLimits, bundles <-chan *Bundle, results chan<- runResult) {
	for {
		r := newRun(lib, lim)
		b, ok := <-bundles
		if !ok {
			return
		}
		res, hit := r.exec(b)
		results <- runResult{res, hit}
		if hit {
			return // the worker retires; no runtime for a next run
		}
	}
}
