package worker

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/examples"
	"github.com/roomrelay/roomrelay/sandbox"
)

var (
	libOnce sync.Once
	libSrcs map[string]string
	libErr  error
	libProg *libraries
)

// testConfig points at the user cache, where the runtime is fetched once
// from the npm registry (npm_config_registry is honoured). There is no
// offline skip: a test that needs React fails when it cannot be fetched.
func testConfig(t testing.TB) sandbox.Config {
	t.Helper()
	dir, err := sandbox.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	return sandbox.Config{CacheDir: dir, Registry: os.Getenv("npm_config_registry")}
}

func testLibraries(t testing.TB) *libraries {
	t.Helper()
	cfg := testConfig(t)
	libOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if libErr = sandbox.EnsureRuntime(ctx, cfg, func(s string) { t.Log(s) }); libErr != nil {
			return
		}
		if libSrcs, libErr = sandbox.LoadRuntime(cfg); libErr != nil {
			return
		}
		libProg, libErr = compileLibraries(libSrcs)
	})
	if libErr != nil {
		t.Fatalf("React runtime: %v", libErr)
	}
	return libProg
}

var testLimits = runLimits{Timeout: 30 * time.Second, HeapLimit: 200 << 20, MaxCallStack: 5000, Advance: 3 * time.Second}

// smokeInProcess builds and runs files in this process, without a worker.
func smokeInProcess(t testing.TB, files map[string]string) *sandbox.Result {
	t.Helper()
	lib := testLibraries(t)
	b, err := Build(files)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	res, _ := runBundle(lib, b, testLimits)
	return res
}

func exampleFiles(t testing.TB) map[string]string {
	t.Helper()
	return examples.StandupTimer()
}
