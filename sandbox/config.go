package sandbox

import (
	"log/slog"
	"net/http"
	"time"
)

// Config configures the runtime lookup and the worker pool. The caller (the
// CLI) fills it from flags and the environment; this package reads neither.
type Config struct {
	// RuntimeDir is a read-only directory holding the pinned runtime
	// tarballs (e.g. shipped by a system package). Searched first.
	RuntimeDir string
	// CacheDir is roomrelay's cache directory (see DefaultCacheDir); the
	// runtime is cached in its jsruntime subdirectory.
	CacheDir string
	// Registry is the npm registry base URL for EnsureRuntime (the CLI
	// passes npm_config_registry); empty means DefaultRegistry.
	Registry   string
	HTTPClient *http.Client

	// WorkerCommand starts a worker: the binary and the arguments that make
	// it run sandbox/worker's Main (e.g. os.Executable() and a hidden
	// subcommand, or cmd/roomrelay-sandbox).
	WorkerCommand []string
	// Workers is the pool size (default 2).
	Workers int
	// MemoryLimitBytes caps a worker's memory: its data segment on Linux
	// (RLIMIT_DATA), its committed memory on Windows (a Job Object), its
	// footprint on macOS (the parent's watcher); the heap watchdog interrupts a run at 40% of it and the Go
	// soft memory limit sits at 60% (default 512 MiB).
	MemoryLimitBytes int64
	// Timeout is the wall-clock limit of one smoke-run (default 2s); the
	// worker is SIGKILLed when it has not answered KillGrace later
	// (default 1s).
	Timeout   time.Duration
	KillGrace time.Duration
	// RecycleAfter is how many runs a worker serves before it is replaced
	// (default 200).
	RecycleAfter int
	// IdleTimeout is how long an unused worker lives (default 30s).
	IdleTimeout time.Duration

	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Workers <= 0 {
		c.Workers = 2
	}
	if c.MemoryLimitBytes <= 0 {
		c.MemoryLimitBytes = 512 << 20
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Second
	}
	if c.KillGrace <= 0 {
		c.KillGrace = time.Second
	}
	if c.RecycleAfter <= 0 {
		c.RecycleAfter = 200
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
