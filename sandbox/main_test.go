package sandbox

import (
	"context"
	"os"
	"testing"
	"time"
)

// workerMarker as the last argument makes the test binary a sandbox worker,
// so pool tests run real child processes of this very binary.
const workerMarker = "roomrelay-sandbox-test-worker"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[len(os.Args)-1] == workerMarker {
		os.Exit(WorkerMain(context.Background(), os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

func newTestPool(t testing.TB, mod func(*Config)) *Pool {
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
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func smoke(t testing.TB, p *Pool, files map[string]string) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := p.SmokeRun(ctx, files)
	if err != nil {
		t.Fatalf("SmokeRun: %v", err)
	}
	return res
}
