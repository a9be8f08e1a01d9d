package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/sandbox"
)

// workerMarker as the last argument makes the test binary a sandbox worker,
// so pool tests run real child processes of this very binary.
const workerMarker = "roomrelay-sandbox-test-worker"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[len(os.Args)-1] == workerMarker {
		os.Exit(Main(context.Background(), os.Stdin, os.Stdout))
	}
	if len(os.Args) > 2 && os.Args[len(os.Args)-2] == dyingWorkerMarker {
		dyingWorker(os.Args[len(os.Args)-1])
	}
	os.Exit(m.Run())
}

// shortTimeout is the time limit of pools whose tests expect it to pass.
func shortTimeout(c *sandbox.Config) { c.Timeout = time.Second }

func newTestPool(t testing.TB, mod func(*sandbox.Config)) *sandbox.Pool {
	t.Helper()
	testLibraries(t) // make sure the runtime is fetched
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.WorkerCommand = []string{exe, workerMarker}
	cfg.Workers = 2
	cfg.MemoryLimitBytes = 256 << 20
	// A test that is not about the time limit must not reach it on a
	// loaded machine under the race detector (the table snippet once
	// did at 2 s); a test of the limit sets a short one (shortTimeout).
	cfg.Timeout = 30 * time.Second
	cfg.KillGrace = 500 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	p, err := sandbox.NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func smoke(t testing.TB, p *sandbox.Pool, files map[string]string) *sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := p.SmokeRun(ctx, files)
	if err != nil {
		t.Fatalf("SmokeRun: %v", err)
	}
	return res
}

// dyingWorkerMarker makes the test binary a worker that answers the init
// message and then dies on the first request the way mode says, so the
// pool's reading of a dead worker is tested against a real process.
const dyingWorkerMarker = "roomrelay-sandbox-test-dying-worker"

func dyingWorker(mode string) {
	dec := json.NewDecoder(os.Stdin)
	var req sandbox.WorkerRequest
	if dec.Decode(&req) != nil {
		os.Exit(1)
	}
	// As a worker under RLIMIT_DATA, except in the mode that says not.
	capped := mode != "gc-fault-uncapped"
	json.NewEncoder(os.Stdout).Encode(sandbox.WorkerResponse{Ready: true, Limits: "none", DataLimited: capped})
	if dec.Decode(&req) != nil {
		os.Exit(1)
	}
	switch mode {
	case "oom":
		fmt.Fprintln(os.Stderr, "fatal error: runtime: out of memory")
		os.Exit(2)
	case "thread":
		// What a worker at its RLIMIT_DATA cap says when no stack can be
		// mapped for a new thread.
		fmt.Fprintln(os.Stderr, "runtime/cgo: pthread_create failed: Resource temporarily unavailable\nSIGABRT: abort")
		os.Exit(2)
	case "gc-fault", "gc-fault-uncapped":
		// The start of what a real worker printed when Go 1.26's GC could
		// not map a span queue at the cap (see sandbox.runtimeFault).
		fmt.Fprint(os.Stderr, gcFaultStderr)
		os.Exit(2)
	case "nil":
		// A real nil dereference outside the runtime: a panic, not the cap.
		var p *sandbox.Result
		fmt.Println(p.OK)
	case "panic":
		panic("worker bug")
	case "garbage":
		fmt.Println("this is not JSON")
		select {}
	}
	os.Exit(1)
}

const gcFaultStderr = `SIGSEGV: segmentation violation
PC=0x439cbd m=0 sigcode=1 addr=0x0

goroutine 0 gp=0x17547c0 m=0 mp=0x17559a0 [idle]:
runtime.(*spanQueue).tryDrain(0x400?, 0x0?, 0x0?)
	/usr/local/go/src/runtime/mgcmark_greenteagc.go:520 +0x5d fp=0x7fffa5dedc10 sp=0x7fffa5dedbf0 pc=0x439cbd
runtime.(*spanQueue).drain(0x153f9d84d278, 0x10)
	/usr/local/go/src/runtime/mgcmark_greenteagc.go:473 +0x66 fp=0x7fffa5dedc40 sp=0x7fffa5dedc10 pc=0x439ba6
runtime.gcBgMarkWorker.func2()
	/usr/local/go/src/runtime/mgc.go:1879 +0x7c fp=0x7fffa5dedf18 sp=0x7fffa5dedec8 pc=0x433f1c
`
