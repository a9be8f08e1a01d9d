package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/packaging/service"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/sandbox"
)

// runtimeFlags are the flags that say where the sandbox's React runtime is.
type runtimeFlags struct {
	runtimeDir, cacheDir, registry *string
}

func addRuntimeFlags(fs *flag.FlagSet, e *Env) runtimeFlags {
	return runtimeFlags{
		runtimeDir: fs.String("runtime-dir", e.Getenv("ROOMRELAY_RUNTIME_DIR"), "read-only `dir` holding the pinned React runtime tarballs (env ROOMRELAY_RUNTIME_DIR)"),
		cacheDir:   fs.String("cache-dir", e.Getenv("ROOMRELAY_CACHE_DIR"), "cache `dir` for the fetched runtime (default: the user cache dir; env ROOMRELAY_CACHE_DIR)"),
		registry:   fs.String("registry", e.Getenv("npm_config_registry"), "npm registry `url` to fetch the runtime from (env npm_config_registry; default "+sandbox.DefaultRegistry+")"),
	}
}

func (r runtimeFlags) config(e *Env) (sandbox.Config, error) {
	cfg := sandbox.Config{RuntimeDir: *r.runtimeDir, CacheDir: *r.cacheDir, Registry: *r.registry, Logger: e.Logger}
	if cfg.RuntimeDir == "" && e.Executable != "" {
		// The installed package's copy (PREFIX/share/roomrelay/jsruntime
		// beside PREFIX/bin/roomrelay), so a packaged binary neither
		// downloads React nor needs the network for `snippet check`.
		cfg.RuntimeDir = service.PackagedRuntimeDir(e.Executable)
	}
	if cfg.CacheDir == "" {
		d, err := sandbox.DefaultCacheDir()
		if err != nil {
			return cfg, fmt.Errorf("%w (set --cache-dir)", err)
		}
		cfg.CacheDir = d
	}
	return cfg, nil
}

func init() {
	Register(&Command{
		Name:     "snippet check",
		Synopsis: "[--json] [--offline] DIR | FILE...",
		Summary:  "validate, bundle and smoke-run a snippet app in the sandbox",
		Help: `Reads a snippet (a directory holding src/App.tsx, or files under a src/ folder),
applies the relay's proposal rules, reports sizes (tokens are approximate: bytes/4),
bundles it with esbuild and smoke-runs it with React ` + sandbox.ReactVersion + ` in a sandbox worker:
render, effects, 3 s of virtual timers, every onClick once. Exits 1 when the snippet
fails, 4 when the React runtime is missing and cannot be fetched.`,
		Setup: setupSnippetCheck,
	})
	Register(&Command{
		Name:    "snippet fetch-runtime",
		Summary: "fetch and verify the pinned React runtime the sandbox runs snippets with",
		Help: `Downloads react, react-test-renderer and scheduler at pinned versions from the npm
registry, verifies their sha512 integrity and keeps them in the cache directory.`,
		Setup: setupSnippetFetchRuntime,
	})
}

// setupSnippetCheck parses the flags of `roomrelay snippet check` and returns its runner.
func setupSnippetCheck(fs *flag.FlagSet, e *Env) Runner {
	asJSON := fs.Bool("json", false, "print the report as JSON")
	offline := fs.Bool("offline", false, "do not fetch the React runtime when it is missing")
	timeout := fs.Duration("timeout", 2*time.Second, "wall-clock limit of the smoke-run")
	memMiB := fs.Int64("memory-mib", 512, "memory cap of the sandbox worker in MiB")
	rf := addRuntimeFlags(fs, e)
	return func(ctx context.Context, args []string) error {
		args, err := interleavedFlags(fs, args)
		if err != nil {
			return err
		}
		if len(args) == 0 {
			return usagef("snippet check needs a directory or files")
		}
		files, err := readSnippetArgs(args)
		if err != nil {
			return usagef("%v", err)
		}
		cfg, err := rf.config(e)
		if err != nil {
			return err
		}
		cfg.Timeout = *timeout
		cfg.MemoryLimitBytes = *memMiB << 20
		cfg.Workers = 1
		return snippetCheck(ctx, e, cfg, files, *asJSON, *offline)
	}
}

// setupSnippetFetchRuntime parses the flags of `roomrelay snippet fetch-runtime` and returns its runner.
func setupSnippetFetchRuntime(fs *flag.FlagSet, e *Env) Runner {
	rf := addRuntimeFlags(fs, e)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("snippet fetch-runtime takes no arguments")
		}
		cfg, err := rf.config(e)
		if err != nil {
			return err
		}
		if err := sandbox.EnsureRuntime(ctx, cfg, func(s string) { fmt.Fprintln(e.Stdout, s) }); err != nil {
			return exitErr(ExitUnavailable, err)
		}
		return nil
	}
}

// interleavedFlags parses flags that follow positional arguments too
// ("snippet check DIR --json").
func interleavedFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, usagef("%v", err)
		}
		args = fs.Args()
		if len(args) > 0 {
			pos = append(pos, args[0])
			args = args[1:]
		}
	}
	return pos, nil
}

// readSnippetArgs reads one directory, or files whose snippet path starts
// at their last "src" folder (…/standup-timer/src/App.tsx → src/App.tsx).
func readSnippetArgs(args []string) (map[string]string, error) {
	if len(args) == 1 {
		if st, err := os.Stat(args[0]); err == nil && st.IsDir() {
			return sandbox.ReadSnippetDir(args[0])
		}
	}
	files := map[string]string{}
	for _, a := range args {
		parts := strings.Split(filepath.ToSlash(filepath.Clean(a)), "/")
		i := len(parts) - 2
		for i >= 0 && parts[i] != "src" {
			i--
		}
		if i < 0 {
			return nil, fmt.Errorf("%s: give files under a src/ folder (or the snippet's directory)", a)
		}
		b, err := os.ReadFile(a)
		if err != nil {
			return nil, err
		}
		files[strings.Join(parts[i:], "/")] = string(b)
	}
	return files, nil
}

type fileReport struct {
	Path         string `json:"path"`
	Bytes        int    `json:"bytes"`
	Lines        int    `json:"lines"`
	ApproxTokens int    `json:"approx_tokens"`
}

type rulesReport struct {
	OK      bool   `json:"ok"`
	Rule    string `json:"rule,omitempty"`
	Path    string `json:"path,omitempty"`
	Message string `json:"message,omitempty"`
}

type checkReport struct {
	Files        []fileReport    `json:"files"`
	TotalBytes   int             `json:"total_bytes"`
	ApproxTokens int             `json:"approx_tokens"` // bytes/4, an approximation
	Rules        rulesReport     `json:"rules"`
	Result       *sandbox.Result `json:"result,omitempty"`
	Limits       string          `json:"limits,omitempty"`
}

func snippetCheck(ctx context.Context, e *Env, cfg sandbox.Config, files map[string]string, asJSON, offline bool) error {
	rep := checkReport{Rules: rulesReport{OK: true}}
	for p, c := range files {
		rep.Files = append(rep.Files, fileReport{Path: p, Bytes: len(c), Lines: strings.Count(c, "\n") + boolInt(c != "" && !strings.HasSuffix(c, "\n")), ApproxTokens: (len(c) + 3) / 4})
		rep.TotalBytes += len(c)
	}
	sort.Slice(rep.Files, func(i, j int) bool { return rep.Files[i].Path < rep.Files[j].Path })
	rep.ApproxTokens = (rep.TotalBytes + 3) / 4

	if err := relay.ValidateSnippet(files); err != nil {
		rep.Rules = rulesReport{Message: err.Error()}
		var re *relay.RuleError
		if errors.As(err, &re) {
			rep.Rules.Rule, rep.Rules.Path = re.Rule, re.Path
		}
		return finishCheck(e, rep, asJSON)
	}

	if !offline {
		progress := func(s string) {
			if !strings.Contains(s, "present and verified") {
				fmt.Fprintln(e.Stderr, "runtime:", s)
			}
		}
		if err := sandbox.EnsureRuntime(ctx, cfg, progress); err != nil {
			fmt.Fprintln(e.Stderr, "runtime:", err)
		}
	}
	worker, err := sandboxWorker(e)
	if err != nil {
		return exitErr(ExitUnavailable, err)
	}
	cfg.WorkerCommand = worker
	pool, err := sandbox.NewPool(cfg)
	if err != nil {
		return err
	}
	res, err := pool.SmokeRun(ctx, files)
	rep.Limits = pool.Limits()
	if cerr := pool.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("smoke-run: %w", err)
	}
	rep.Result = res
	return finishCheck(e, rep, asJSON)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// finishCheck prints the report and turns a failing snippet into the exit code.
func finishCheck(e *Env, rep checkReport, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printCheck(e.Stdout, rep)
	}
	switch {
	case !rep.Rules.OK:
		return silent(ExitFailure)
	case rep.Result != nil && rep.Result.Phase == sandbox.PhaseRuntimeUnavailable:
		return silent(ExitUnavailable)
	case rep.Result != nil && !rep.Result.OK:
		return silent(ExitFailure)
	}
	return nil
}

func printCheck(w io.Writer, rep checkReport) {
	fmt.Fprintf(w, "files: %d, %d bytes, ~%d tokens (approximate: bytes/4)\n", len(rep.Files), rep.TotalBytes, rep.ApproxTokens)
	for _, f := range rep.Files {
		fmt.Fprintf(w, "  %-28s %6d B %5d lines  ~%d tokens\n", f.Path, f.Bytes, f.Lines, f.ApproxTokens)
	}
	if !rep.Rules.OK {
		fmt.Fprintf(w, "rules: FAILED: %s\n", rep.Rules.Message)
		return
	}
	fmt.Fprintln(w, "rules: ok")
	r := rep.Result
	if r == nil {
		return
	}
	if r.Phase != sandbox.PhaseBuild && r.Phase != sandbox.PhaseRuntimeUnavailable {
		fmt.Fprintf(w, "bundle: %d B JavaScript, %d B CSS\n", r.JSBytes, r.CSSBytes)
	}
	for _, m := range r.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", m)
	}
	if r.OK {
		fmt.Fprintf(w, "smoke-run: ok in %.1f ms (React %s)\n", r.DurationMS, sandbox.ReactVersion)
	} else {
		fmt.Fprintf(w, "smoke-run: FAILED in phase %s", r.Phase)
		if r.Error != nil {
			if loc := r.Error.Location(); loc != "" {
				fmt.Fprintf(w, " at %s", loc)
			}
			fmt.Fprintf(w, "\n  %s\n", r.Error.Message)
			if r.Error.Note != "" {
				fmt.Fprintf(w, "  note: %s\n", r.Error.Note)
			}
			if r.Error.Stack != "" {
				fmt.Fprintf(w, "  stack:\n    %s\n", strings.ReplaceAll(r.Error.Stack, "\n", "\n    "))
			}
		} else {
			fmt.Fprintln(w)
		}
		for _, m := range r.BuildErrors[min(1, len(r.BuildErrors)):] {
			fmt.Fprintf(w, "  also: %s\n", m)
		}
	}
	if s := r.Render; s != nil {
		var parts []string
		keys := make([]string, 0, len(s.Elements))
		for k := range s.Elements {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", k, s.Elements[k]))
		}
		fmt.Fprintf(w, "  render: %d elements (%s), %d characters of text\n", s.ElementCount, strings.Join(parts, ", "), s.TextLength)
		fmt.Fprintf(w, "  clicks: %d onClick handlers invoked\n", r.Clicks)
	}
	if len(r.Console) > 0 {
		fmt.Fprintln(w, "  console:")
		for _, l := range r.Console {
			fmt.Fprintf(w, "    %s\n", l)
		}
		if r.ConsoleDropped > 0 {
			fmt.Fprintf(w, "    … %d more lines dropped\n", r.ConsoleDropped)
		}
	}
	if rep.Limits != "" {
		fmt.Fprintf(w, "limits: %s\n", rep.Limits)
	}
}
