package cli

import (
	"context"
	"flag"
	"fmt"
	"html"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
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
	// --open never puts the token on a command line: argv is world-readable
	// (/proc/PID/cmdline), so any local user could exchange it first and
	// take the session. The opener gets a file of the owner's instead.
	var launch *launchPage
	opts := []review.Option{review.WithChecker(checker, 0)}
	if open {
		launch = &launchPage{}
		opts = append(opts, review.WithSessionStarted(launch.remove))
		defer launch.remove()
	}
	srv, err := review.Listen(s, e.Logger, opts...)
	if err != nil {
		return exitErr(ExitUnavailable, err)
	}
	fmt.Fprintf(e.Stdout, "Review page (this device only; the address holds a one-time token):\n\n  %s\n\nPress Ctrl-C to stop.\n", srv.URL())
	if open {
		err := launch.write(srv.URL())
		if err == nil {
			err = openBrowser(ctx, launch.url())
		}
		if err != nil {
			launch.remove()
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

// launchPage is how `review --web --open` hands the tokened address to the
// browser without a command line or an environment holding it: a page in a
// fresh 0700 directory, itself 0600, that redirects (meta refresh) to the
// address. The opener and the browser get only the file's path; another
// local user can read neither the directory nor the file. The file goes as
// soon as the token was exchanged (it is spent then anyway), or when the
// command ends. A one-time nonce on the command line instead would need a
// second secret to be useless alone, which the browser does not have yet.
// A browser that cannot read the file (a confined one) leaves the printed
// address, which only the owner's terminal shows.
type launchPage struct {
	mu  sync.Mutex
	dir string
}

func (l *launchPage) write(target string) error {
	dir, err := os.MkdirTemp("", "roomrelay-review-")
	if err != nil {
		return fmt.Errorf("launch page: %w", err)
	}
	l.mu.Lock()
	l.dir = dir
	l.mu.Unlock()
	page := `<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">` +
		`<meta http-equiv="refresh" content="0;url=` + html.EscapeString(target) + `">` +
		`<title>roomrelay review</title><p>Opening the review page…</p>`
	if err := os.WriteFile(filepath.Join(dir, "open.html"), []byte(page), 0o600); err != nil {
		return fmt.Errorf("launch page: %w", err)
	}
	return nil
}

// url is the file's address, which holds no secret.
func (l *launchPage) url() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := filepath.ToSlash(filepath.Join(l.dir, "open.html"))
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // C:/… on Windows
	}
	return (&url.URL{Scheme: "file", Path: p}).String()
}

// remove deletes the page and its directory (idempotent).
func (l *launchPage) remove() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dir != "" {
		os.RemoveAll(l.dir)
		l.dir = ""
	}
}

// openBrowser hands url to the desktop's opener, which returns once the
// browser has it.
func openBrowser(ctx context.Context, target string) error {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, target)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
