package sandbox

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

var (
	fetchOnce sync.Once
	fetchErr  error
)

// testConfig points at the user cache, where the runtime is fetched once
// from the npm registry (npm_config_registry is honoured). There is no
// offline skip: a test that needs React fails when it cannot be fetched.
func testConfig(t testing.TB) Config {
	t.Helper()
	dir, err := DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	return Config{CacheDir: dir, Registry: os.Getenv("npm_config_registry")}
}

// testLibraries makes sure the runtime is in the cache and verifies. The
// worker side's tests (sandbox/worker) also compile it.
func testLibraries(t testing.TB) {
	t.Helper()
	cfg := testConfig(t)
	fetchOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if fetchErr = EnsureRuntime(ctx, cfg, func(s string) { t.Log(s) }); fetchErr != nil {
			return
		}
		_, fetchErr = loadRuntime(cfg)
	})
	if fetchErr != nil {
		t.Fatalf("React runtime: %v", fetchErr)
	}
}
