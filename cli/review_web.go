package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"time"

	"github.com/roomrelay/roomrelay/agent/review"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/sandbox"
)

// reviewRuntimeFlags are where the page's sandbox check finds the React
// runtime: snippet check's flags without --registry, since the page never
// fetches it.
func reviewRuntimeFlags(fs *flag.FlagSet, e *Env) runtimeFlags {
	return runtimeFlags{
		runtimeDir: fs.String("runtime-dir", e.Getenv("ROOMRELAY_RUNTIME_DIR"), "with --web: read-only `dir` holding the pinned React runtime for the sandbox check (env ROOMRELAY_RUNTIME_DIR)"),
		cacheDir:   fs.String("cache-dir", e.Getenv("ROOMRELAY_CACHE_DIR"), "with --web: cache `dir` holding the fetched runtime (default: the user cache dir; env ROOMRELAY_CACHE_DIR)"),
		registry:   new(string),
	}
}

func reviewWeb(ctx context.Context, e *Env, s *rooms.Store, open bool, rf runtimeFlags) error {
	checker, closeChecker := reviewChecker(e, rf)
	defer closeChecker()
	srv, err := review.Listen(s, e.Logger, review.WithChecker(checker, 0))
	if err != nil {
		return exitErr(ExitUnavailable, err)
	}
	fmt.Fprintf(e.Stdout, "Review page (this device only; the address holds a one-time token):\n\n  %s\n\nPress Ctrl-C to stop.\n", srv.URL())
	if open {
		if err := openBrowser(ctx, srv.URL()); err != nil {
			fmt.Fprintf(e.Stderr, "could not open a browser (%v); open the address above yourself\n", err)
		}
	}
	return srv.Run(ctx)
}

// reviewChecker is the page's sandbox check: a one-worker pool, as
// `snippet check --offline` runs it. The pool only smoke-runs the files it
// is given; approving stays the owner's click. When the sandbox cannot be
// set up, the checker says why on each page instead.
func reviewChecker(e *Env, rf runtimeFlags) (review.Checker, func()) {
	cfg, err := rf.config(e)
	if err != nil {
		return failingChecker{err}, func() {}
	}
	worker, err := sandboxWorker(e)
	if err != nil {
		return failingChecker{err}, func() {}
	}
	cfg.WorkerCommand, cfg.Workers, cfg.Timeout = worker, 1, 2*time.Second
	pool, err := sandbox.NewPool(cfg)
	if err != nil {
		return failingChecker{err}, func() {}
	}
	return review.SandboxChecker(pool), func() { _ = pool.Close() }
}

// failingChecker answers every check with why there is none.
type failingChecker struct{ err error }

func (c failingChecker) Check(context.Context, map[string]string) (string, bool, error) {
	return "", false, c.err
}

// openBrowser hands url to the desktop's opener, which returns once the
// browser has it.
func openBrowser(ctx context.Context, url string) error {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, url)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
