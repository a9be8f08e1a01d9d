package sandbox

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// registryFromCache serves the real tarballs (fetched from npm by
// testLibraries) at npm's tarball paths; tamper changes one byte of each.
func registryFromCache(t *testing.T, tamper bool) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	testLibraries(t)
	src := cacheRuntimeDir(testConfig(t).CacheDir)
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		for _, p := range runtimePackages {
			if r.URL.Path == "/"+p.name+"/-/"+p.tarballName() {
				data, err := os.ReadFile(filepath.Join(src, p.tarballName()))
				if err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
				if tamper {
					data[len(data)/2] ^= 1
				}
				w.Write(data)
				return
			}
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestEnsureRuntimeFromConfiguredRegistry(t *testing.T) {
	srv, hits := registryFromCache(t, false)
	cfg := Config{CacheDir: t.TempDir(), Registry: srv.URL + "/"}
	var lines []string
	if err := EnsureRuntime(context.Background(), cfg, func(s string) { lines = append(lines, s) }); err != nil {
		t.Fatal(err)
	}
	if int(hits.Load()) != len(runtimePackages) {
		t.Fatalf("%d requests, want %d", hits.Load(), len(runtimePackages))
	}
	libs, err := loadRuntime(cfg)
	if err != nil || !strings.Contains(libs["react"], "react.production.min.js") {
		t.Fatalf("load: %v", err)
	}
	// A second call finds everything verified in the cache.
	if err := EnsureRuntime(context.Background(), cfg, nil); err != nil {
		t.Fatal(err)
	}
	if int(hits.Load()) != len(runtimePackages) {
		t.Fatalf("refetched: %d requests", hits.Load())
	}
	t.Logf("progress: %q", lines)
}

func TestEnsureRuntimeRejectsTamperedTarball(t *testing.T) {
	srv, _ := registryFromCache(t, true)
	cfg := Config{CacheDir: t.TempDir(), Registry: srv.URL}
	err := EnsureRuntime(context.Background(), cfg, nil)
	if !errors.Is(err, ErrRuntimeUnavailable) || !strings.Contains(err.Error(), "integrity mismatch") {
		t.Fatalf("err %v", err)
	}
	if entries, _ := os.ReadDir(cacheRuntimeDir(cfg.CacheDir)); len(entries) != 0 {
		t.Fatalf("tampered tarball written to the cache: %v", entries)
	}
}

func TestRuntimeDirAndCorruptCache(t *testing.T) {
	testLibraries(t)
	real := cacheRuntimeDir(testConfig(t).CacheDir)
	if _, err := loadRuntime(Config{RuntimeDir: real}); err != nil {
		t.Fatalf("RuntimeDir: %v", err)
	}
	// A corrupt copy in the cache is refused, not used.
	cache := t.TempDir()
	dir := cacheRuntimeDir(cache)
	os.MkdirAll(dir, 0o755)
	for _, p := range runtimePackages {
		data, _ := os.ReadFile(filepath.Join(real, p.tarballName()))
		data[10] ^= 1
		os.WriteFile(filepath.Join(dir, p.tarballName()), data, 0o644)
	}
	_, err := loadRuntime(Config{CacheDir: cache})
	if !errors.Is(err, ErrRuntimeUnavailable) || !strings.Contains(err.Error(), "integrity mismatch") {
		t.Fatalf("err %v", err)
	}
	_, err = loadRuntime(Config{})
	if !errors.Is(err, ErrRuntimeUnavailable) || !strings.Contains(err.Error(), "fetch-runtime") {
		t.Fatalf("err %v", err)
	}
}
