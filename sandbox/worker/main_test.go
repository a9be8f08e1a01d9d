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
	cfg.Timeout = time.Second
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
	json.NewEncoder(os.Stdout).Encode(sandbox.WorkerResponse{Ready: true, Limits: "none"})
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
	case "panic":
		panic("worker bug")
	case "garbage":
		fmt.Println("this is not JSON")
		select {}
	}
	os.Exit(1)
}
