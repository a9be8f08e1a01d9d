package sandbox

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// ReactVersion is the pinned React (and react-test-renderer) version.
const ReactVersion = "18.3.1"

// DefaultRegistry is the npm registry used when Config.Registry is empty.
const DefaultRegistry = "https://registry.npmjs.org/"

// jsPackage is one pinned npm tarball and the production CommonJS files the
// smoke-run needs from it, by module id.
type jsPackage struct {
	name, version, integrity string
	modules                  map[string]string
}

// runtimePackages are pinned by exact version and sha512 integrity (as
// printed by `npm view NAME@VERSION dist.integrity`). The production builds
// require nothing else: react-is and loose-envify are only used by the
// development builds and the package entry files, which are not loaded.
var runtimePackages = []jsPackage{
	{"react", ReactVersion, "sha512-wS+hAgJShR0KhEvPJArfuPVN1+Hz1t0Y6n5jLrGQbkb4urgPE/0Rve+1kMB1v/oWgHgm4WIcV+i7F2pTVj+2iQ==", map[string]string{
		"react":             "package/cjs/react.production.min.js",
		"react/jsx-runtime": "package/cjs/react-jsx-runtime.production.min.js",
	}},
	{"react-test-renderer", ReactVersion, "sha512-KkAgygexHUkQqtvvx/otwxtuFu5cVjfzTCtjXLH9boS19/Nbtg84zS7wIQn39G8IlrhThBpQsMKkq5ZHZIYFXA==", map[string]string{
		"react-test-renderer": "package/cjs/react-test-renderer.production.min.js",
	}},
	{"scheduler", "0.23.2", "sha512-UOShsPwz7NrMUqhR6t0hWjFduvOzbtv7toDH1/hIrfRNIDBnnBWd0CwJTGvTpngVlmwGCdP9/Zl/tVrDqcuYzQ==", map[string]string{
		"scheduler":               "package/cjs/scheduler.production.min.js",
		"scheduler/unstable_mock": "package/cjs/scheduler-unstable_mock.production.min.js",
	}},
}

// maxTarball bounds a download; the pinned tarballs are well below 1 MB.
const maxTarball = 8 << 20

// ErrRuntimeUnavailable is wrapped by errors about a missing or corrupt
// React runtime.
var ErrRuntimeUnavailable = errors.New("React runtime unavailable")

func (p jsPackage) tarballName() string { return p.name + "-" + p.version + ".tgz" }

// runtimeDirs returns the directories searched for the tarballs, in order:
// the configured read-only RuntimeDir, then the cache.
func runtimeDirs(cfg Config) []string {
	var dirs []string
	if cfg.RuntimeDir != "" {
		dirs = append(dirs, cfg.RuntimeDir)
	}
	if cfg.CacheDir != "" {
		dirs = append(dirs, cacheRuntimeDir(cfg.CacheDir))
	}
	return dirs
}

func cacheRuntimeDir(cacheDir string) string { return filepath.Join(cacheDir, "jsruntime") }

// DefaultCacheDir is roomrelay's directory in the user cache dir. The caller
// (the CLI) picks it; the library never looks at the environment itself.
func DefaultCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("user cache dir: %w", err)
	}
	return filepath.Join(d, "roomrelay"), nil
}

// runtimeHelp says what to do about a missing runtime.
func runtimeHelp(cfg Config) string {
	where := "no runtime directory or cache directory is configured"
	if d := runtimeDirs(cfg); len(d) > 0 {
		where = "looked in " + strings.Join(d, " and ")
	}
	return fmt.Sprintf("React %s for the sandbox is not installed (%s); fetch it with 'roomrelay snippet fetch-runtime' (needs the npm registry; honours npm_config_registry) or point --runtime-dir at a directory holding %s",
		ReactVersion, where, strings.Join(tarballNames(), ", "))
}

func tarballNames() []string {
	var n []string
	for _, p := range runtimePackages {
		n = append(n, p.tarballName())
	}
	return n
}

// loadRuntime reads and verifies the pinned tarballs and returns the library
// sources by module id. No network.
func loadRuntime(cfg Config) (map[string]string, error) {
	libs := map[string]string{}
	for _, p := range runtimePackages {
		data, err := readTarball(cfg, p)
		if err != nil {
			return nil, err
		}
		if err := extractModules(p, data, libs); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrRuntimeUnavailable, err)
		}
	}
	return libs, nil
}

func readTarball(cfg Config, p jsPackage) ([]byte, error) {
	for _, dir := range runtimeDirs(cfg) {
		data, err := os.ReadFile(filepath.Join(dir, p.tarballName()))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrRuntimeUnavailable, err)
		}
		if err := verifyIntegrity(p, data); err != nil {
			return nil, fmt.Errorf("%w: %s in %s: %w", ErrRuntimeUnavailable, p.tarballName(), dir, err)
		}
		return data, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrRuntimeUnavailable, runtimeHelp(cfg))
}

func verifyIntegrity(p jsPackage, data []byte) error {
	sum := sha512.Sum512(data)
	got := "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
	if got != p.integrity {
		return fmt.Errorf("integrity mismatch: got %s, pinned %s", got, p.integrity)
	}
	return nil
}

func extractModules(p jsPackage, tgz []byte, into map[string]string) error {
	want := map[string]string{} // tar path → module id
	for id, file := range p.modules {
		want[file] = id
	}
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return fmt.Errorf("%s: %w", p.tarballName(), err)
	}
	tr := tar.NewReader(zr)
	for len(want) > 0 {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", p.tarballName(), err)
		}
		id, ok := want[h.Name]
		if !ok || h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, maxTarball))
		if err != nil {
			return fmt.Errorf("%s: %s: %w", p.tarballName(), h.Name, err)
		}
		into[id] = string(b)
		delete(want, h.Name)
	}
	for file := range want {
		return fmt.Errorf("%s: %s missing", p.tarballName(), file)
	}
	return nil
}

// EnsureRuntime makes sure the pinned React runtime is available: it is
// found and verified in RuntimeDir or the cache, or fetched from the npm
// registry (cfg.Registry, default DefaultRegistry) into CacheDir/jsruntime.
// progress, if not nil, receives one line per step.
func EnsureRuntime(ctx context.Context, cfg Config, progress func(string)) error {
	if progress == nil {
		progress = func(string) {}
	}
	if _, err := loadRuntime(cfg); err == nil {
		progress(fmt.Sprintf("React %s runtime present and verified", ReactVersion))
		return nil
	}
	if cfg.CacheDir == "" {
		return fmt.Errorf("%w: no cache directory configured to fetch into", ErrRuntimeUnavailable)
	}
	dir := cacheRuntimeDir(cfg.CacheDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrRuntimeUnavailable, err)
	}
	client := cfg.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	registry := cfg.Registry
	if registry == "" {
		registry = DefaultRegistry
	}
	for _, p := range runtimePackages {
		dst := filepath.Join(dir, p.tarballName())
		if data, err := os.ReadFile(dst); err == nil && verifyIntegrity(p, data) == nil {
			continue
		}
		url := strings.TrimSuffix(registry, "/") + "/" + p.name + "/-/" + p.tarballName()
		progress("fetching " + url)
		data, err := download(ctx, client, url)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrRuntimeUnavailable, err)
		}
		if err := verifyIntegrity(p, data); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrRuntimeUnavailable, url, err)
		}
		if err := writeAtomic(dst, data); err != nil {
			return fmt.Errorf("%w: %w", ErrRuntimeUnavailable, err)
		}
		progress(fmt.Sprintf("verified %s (%d bytes)", p.tarballName(), len(data)))
	}
	if _, err := loadRuntime(cfg); err != nil {
		return err
	}
	progress(fmt.Sprintf("React %s runtime ready in %s", ReactVersion, dir))
	return nil
}

func download(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch %s: %s", url, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxTarball+1))
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", url, err)
	}
	if len(data) > maxTarball {
		return nil, fmt.Errorf("fetch %s: larger than %d bytes", url, maxTarball)
	}
	return data, nil
}

func writeAtomic(dst string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(dst), ".fetch-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), dst)
}
