// Package sandboxtest lets tests outside the sandbox run snippets in real
// sandbox worker processes: the test binary is its own worker.
package sandboxtest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/sandbox"
	"github.com/roomrelay/roomrelay/sandbox/worker"
)

// marker as the last argument makes the test binary a sandbox worker.
const marker = "roomrelay-test-sandbox-worker"

// Main is a package's TestMain: a sandbox worker when Pool started the
// binary as one, else the tests.
func Main(m *testing.M) {
	if len(os.Args) > 1 && os.Args[len(os.Args)-1] == marker {
		os.Exit(worker.Main(context.Background(), os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// Pool is a one-worker pool whose worker is this test binary (the package's
// TestMain must be Main), with the pinned React runtime in cacheDir, or, when
// cacheDir is "", in the user cache, fetched there if missing (as the
// sandbox tests do).
func Pool(t testing.TB, cacheDir string, timeout time.Duration) *sandbox.Pool {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := sandbox.Config{CacheDir: cacheDir, Registry: os.Getenv("npm_config_registry"), Workers: 1,
		WorkerCommand: []string{exe, marker}, Timeout: timeout}
	if cfg.CacheDir == "" {
		if cfg.CacheDir, err = sandbox.DefaultCacheDir(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := sandbox.EnsureRuntime(ctx, cfg, nil); err != nil {
			t.Fatalf("React runtime: %v", err)
		}
	}
	p, err := sandbox.NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
