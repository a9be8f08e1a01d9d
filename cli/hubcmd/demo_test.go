package hubcmd

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/cli"
)

// TestDemoSummary: the demo's last line says "every step behaved as
// expected" only when none failed; a failure makes it fail and names each
// step; a step this machine could not show is named, not hidden.
func TestDemoSummary(t *testing.T) {
	text, ok := summary(nil, nil, time.Second)
	if !ok || !strings.Contains(text, "every step behaved as expected") {
		t.Errorf("all good: ok=%v %q", ok, text)
	}
	text, ok = summary([]string{"sandbox: the React runtime is unavailable"}, []string{"the desktop app step: Node.js is not on PATH"}, time.Second)
	if ok || strings.Contains(text, "behaved as expected") || !strings.Contains(text, "React runtime is unavailable") || !strings.Contains(text, "Node.js is not on PATH") {
		t.Errorf("a failure: ok=%v %q", ok, text)
	}
	text, ok = summary(nil, []string{"the desktop app step: Node.js is not on PATH"}, time.Second)
	if !ok || strings.Contains(text, "every step behaved") || !strings.Contains(text, "every step that ran") || !strings.Contains(text, "Node.js is not on PATH") {
		t.Errorf("a step not shown: ok=%v %q", ok, text)
	}
}

// TestDemoExpectFails: a step that did not behave is recorded with its
// reason (the first line), so the summary fails.
func TestDemoExpectFails(t *testing.T) {
	var out strings.Builder
	d := &demo{e: &cli.Env{Stdout: &out}, start: time.Now()}
	d.expect(true, "fine")
	d.expect(false, "smoke-run failed: %s\nlong detail", "no runtime")
	if len(d.failures) != 1 || d.failures[0] != "smoke-run failed: no runtime" {
		t.Fatalf("failures %q", d.failures)
	}
	if _, ok := summary(d.failures, d.skipped, 0); ok {
		t.Fatal("the summary passed with a failure")
	}
}

// TestCheckNode: without node on PATH, or with a node older than 20, the
// desktop app step says so plainly (real child processes: a fake node).
func TestCheckNode(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("shell-script fake node")
	}
	empty := t.TempDir()
	t.Setenv("PATH", empty)
	if why := checkNode(context.Background()); !strings.Contains(why, "Node.js is not on PATH") {
		t.Errorf("no node: %q", why)
	}
	fake := func(version string, npm bool) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "node"), []byte("#!/bin/sh\necho "+version+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if npm {
			if err := os.WriteFile(filepath.Join(dir, "npm"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		t.Setenv("PATH", dir)
	}
	fake("v18.19.0", true)
	if why := checkNode(context.Background()); !strings.Contains(why, "v18.19.0") || !strings.Contains(why, "≥ 20") {
		t.Errorf("node 18: %q", why)
	}
	fake("v20.20.2", false)
	if why := checkNode(context.Background()); !strings.Contains(why, "npm is not on PATH") {
		t.Errorf("no npm: %q", why)
	}
	fake("v22.1.0", true)
	if why := checkNode(context.Background()); why != "" {
		t.Errorf("node 22 with npm: %q", why)
	}
}

// TestInstallsNeeded: npm ci runs when node_modules is missing or the lock
// is newer than what npm ci left; the build when dist is missing or a
// source is newer.
func TestInstallsNeeded(t *testing.T) {
	dir := t.TempDir()
	write := func(rel string, at time.Time) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now().Add(-time.Hour)
	write("package-lock.json", t0)
	write("src/index.ts", t0)
	if !npmCiNeeded(dir) || !tsBuildNeeded(dir) {
		t.Fatal("a fresh checkout needs npm ci and the build")
	}
	write("node_modules/.package-lock.json", t0.Add(time.Minute))
	write("dist/src/index.js", t0.Add(time.Minute))
	if npmCiNeeded(dir) || tsBuildNeeded(dir) {
		t.Fatal("installed and built: nothing to do")
	}
	write("package-lock.json", t0.Add(2*time.Minute))
	write("src/provider.ts", t0.Add(2*time.Minute))
	if !npmCiNeeded(dir) || !tsBuildNeeded(dir) {
		t.Fatal("a newer lock or source: install and build again")
	}
}
