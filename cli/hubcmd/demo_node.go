package hubcmd

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Getting the example desktop app ready to run on a fresh checkout: Node ≥ 20
// and npm on PATH, then the installs a developer would type by hand (npm ci
// and the TypeScript build in clients/ts, npm ci in examples/desktop-app),
// each only when its result is missing or older than its inputs. Without
// Node the step is not shown and the demo says so; with Node, an install
// that fails is a step that did not behave.

// minNodeMajor is the oldest Node the TypeScript client supports (its
// package.json's engines).
const minNodeMajor = 20

// npmTimeout bounds one npm command: a cold `npm ci` fetches a few MB.
const npmTimeout = 5 * time.Minute

// checkNode says why Node cannot run the example app ("" when it can): node
// and npm on PATH, node at least minNodeMajor.
func checkNode(ctx context.Context) string {
	node, err := exec.LookPath("node")
	if err != nil {
		return fmt.Sprintf("Node.js is not on PATH (install Node ≥ %d and npm to see a desktop app own a Room)", minNodeMajor)
	}
	out, err := exec.CommandContext(ctx, node, "--version").Output()
	if err != nil {
		return fmt.Sprintf("`node --version` failed: %v", err)
	}
	major, ok := nodeMajor(string(out))
	if !ok {
		return fmt.Sprintf("`node --version` printed %q, not a version", strings.TrimSpace(string(out)))
	}
	if major < minNodeMajor {
		return fmt.Sprintf("Node %s is on PATH; the desktop app needs Node ≥ %d", strings.TrimSpace(string(out)), minNodeMajor)
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return fmt.Sprintf("npm is not on PATH (it comes with Node ≥ %d)", minNodeMajor)
	}
	return ""
}

// nodeMajor parses `node --version` ("v20.20.2\n").
func nodeMajor(v string) (int, bool) {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	m, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(m)
	return n, err == nil && n > 0
}

// findCheckout returns the roomrelay checkout holding examples/desktop-app
// and clients/ts, from the working directory or a parent, or "".
func findCheckout() string {
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for range 6 {
		if isFile(filepath.Join(wd, "examples", "desktop-app", "app.mjs")) && isFile(filepath.Join(wd, "clients", "ts", "package.json")) {
			return wd
		}
		wd = filepath.Dir(wd)
	}
	return ""
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// npmStep is one install the desktop app needs, in order.
type npmStep struct {
	dir  string   // relative to the checkout
	args []string // npm's arguments
	why  string   // what it brings, for the progress line
	// needed reports whether its result is missing or stale.
	needed func(dir string) bool
}

// desktopAppInstalls are the README's manual steps for examples/desktop-app.
var desktopAppInstalls = []npmStep{
	{dir: "clients/ts", args: []string{"ci", "--no-audit", "--no-fund"}, why: "the TypeScript client's dependencies (ws, typescript)", needed: npmCiNeeded},
	{dir: "clients/ts", args: []string{"run", "build"}, why: "tsc: the TypeScript client to dist/", needed: tsBuildNeeded},
	{dir: "examples/desktop-app", args: []string{"ci", "--no-audit", "--no-fund"}, why: "the example app's dependencies (links clients/ts)", needed: npmCiNeeded},
}

// npmCiNeeded: no node_modules, or package-lock.json newer than the copy
// npm ci leaves in node_modules.
func npmCiNeeded(dir string) bool {
	installed, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if err != nil {
		return true
	}
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	return err != nil || lock.ModTime().After(installed.ModTime())
}

// tsBuildNeeded: no dist/src/index.js, or a source file newer than it.
func tsBuildNeeded(dir string) bool {
	built, err := os.Stat(filepath.Join(dir, "dist", "src", "index.js"))
	if err != nil {
		return true
	}
	newer := false
	_ = filepath.WalkDir(filepath.Join(dir, "src"), func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		if info, err := e.Info(); err == nil && info.ModTime().After(built.ModTime()) {
			newer = true
			return filepath.SkipAll
		}
		return nil
	})
	return newer
}

// prepareDesktopApp returns examples/desktop-app ready to run. skip says why
// the step cannot be shown on this machine (no checkout, no Node); err is
// an install that failed where it should have worked.
func (d *demo) prepareDesktopApp(ctx context.Context) (dir, skip string, err error) {
	root := findCheckout()
	if root == "" {
		return "", "examples/desktop-app is not here (run the demo from a roomrelay checkout)", nil
	}
	if why := checkNode(ctx); why != "" {
		return "", why, nil
	}
	for _, s := range desktopAppInstalls {
		sd := filepath.Join(root, filepath.FromSlash(s.dir))
		if !s.needed(sd) {
			continue
		}
		cmdline := "npm " + strings.Join(s.args, " ")
		d.say("desktop app: `%s` in %s: %s (first run only)…", cmdline, s.dir, s.why)
		t0 := time.Now()
		if out, err := runNPM(ctx, sd, s.args...); err != nil {
			for _, l := range lastLines(out, 12) {
				d.detail("  %s", l)
			}
			return "", "", fmt.Errorf("`%s` in %s: %w", cmdline, s.dir, err)
		}
		d.detail("done (%s)", time.Since(t0).Round(100*time.Millisecond))
	}
	dir = filepath.Join(root, "examples", "desktop-app")
	if !isFile(filepath.Join(dir, "node_modules", "@roomrelay", "localapi", "dist", "src", "index.js")) {
		return "", "", fmt.Errorf("examples/desktop-app/node_modules/@roomrelay/localapi has no dist/src/index.js after the installs")
	}
	return dir, "", nil
}

// runNPM runs npm in dir with its output collected (shown only on failure).
func runNPM(ctx context.Context, dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, npmTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, "npm", args...)
	c.Dir = dir
	c.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	if ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("no result within %s: %w", npmTimeout, ctx.Err())
	}
	return out.String(), err
}

func lastLines(s string, n int) []string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}
