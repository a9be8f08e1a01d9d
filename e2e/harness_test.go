package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// What the tests that run real processes share: one build of the roomrelay
// binary per test process, and the way Node (the MCP clients in e2e/mcpjs,
// clients/ts's suites, the example desktop app) is found, compiled for and
// run.

func TestMain(m *testing.M) {
	code := m.Run()
	if roomrelayBuild.dir != "" {
		os.RemoveAll(roomrelayBuild.dir)
	}
	os.Exit(code)
}

var roomrelayBuild struct {
	once     sync.Once
	dir, bin string
	err      error
}

// roomrelayBin builds cmd/roomrelay the first time a test asks (~30 s in
// CI) and hands every later test the same binary; TestMain removes it.
// A failed build fails each test that asks, with the build's output.
func roomrelayBin(t *testing.T) string {
	t.Helper()
	b := &roomrelayBuild
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "roomrelay-e2e-bin-"); b.err != nil {
			return
		}
		b.bin = filepath.Join(b.dir, "roomrelay")
		if out, err := exec.Command("go", "build", "-o", b.bin, "../cmd/roomrelay").CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build ../cmd/roomrelay: %w\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

type nodeVer struct {
	text  string
	major int
}

// nodeVersion is `node --version` of the node on PATH.
func nodeVersion() nodeVer {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "node", "--version").Output()
	if err != nil {
		return nodeVer{text: "(node --version: " + err.Error() + ")"}
	}
	v := nodeVer{text: strings.TrimSpace(string(out))}
	major, _, _ := strings.Cut(strings.TrimPrefix(v.text, "v"), ".")
	v.major, _ = strconv.Atoi(major)
	return v
}

// nodeMissing says what is missing for a Node test: node on PATH, at least
// version 20, and node_modules/<module> in dir ("" when all is there).
func nodeMissing(dir, module, hint string) string {
	if _, err := exec.LookPath("node"); err != nil {
		return "node is not on PATH"
	}
	if v := nodeVersion(); v.major < 20 {
		return "node " + v.text + " is older than 20" + hint
	}
	if st, err := os.Stat(filepath.Join(dir, "node_modules", module)); err != nil || !st.IsDir() {
		return filepath.Join(filepath.Base(filepath.Dir(dir)), filepath.Base(dir), "node_modules") + " is missing"
	}
	return ""
}

// skipUnlessRequired skips the test with msg, or fails it when the
// environment variable required is 1 (CI, once it installed what is needed).
func skipUnlessRequired(t *testing.T, required, msg string) {
	t.Helper()
	if os.Getenv(required) == "1" {
		t.Fatal(msg + " (" + required + "=1: required, not skipped)")
	}
	t.Skip(msg)
}

// nodeCommand is name args... in dir with the environment plus env.
func nodeCommand(ctx context.Context, dir string, env []string, name string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, name, args...)
	c.Dir = dir
	c.Env = append(os.Environ(), env...)
	// A script's own children (npx-style bins, the suite's node) may hold
	// the pipes after a kill; do not wait for them forever.
	c.WaitDelay = 10 * time.Second
	return c
}

// runNodeScript runs a script to the end, within nodeScriptTimeout, and
// returns its stdout, stderr and exit error.
func runNodeScript(t *testing.T, dir string, env []string, name string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), nodeScriptTimeout)
	defer cancel()
	return runNodeScriptCtx(ctx, dir, env, name, args...)
}

// runNodeScriptCtx runs a script to the end or ctx's end (then the error
// says so too).
func runNodeScriptCtx(ctx context.Context, dir string, env []string, name string, args ...string) (string, string, error) {
	var out, errb bytes.Buffer
	c := nodeCommand(ctx, dir, env, name, args...)
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	if ctx.Err() != nil {
		err = errors.Join(err, ctx.Err())
	}
	return out.String(), errb.String(), err
}

var tsBuild struct {
	once sync.Once
	out  []byte
	err  error
}

// compileTSClient compiles clients/ts (tsc -p, into its dist/) once per
// test process: its suites and the example desktop app run the output.
func compileTSClient(t testing.TB, dir string) {
	t.Helper()
	tsBuild.once.Do(func() {
		tsBuild.out, tsBuild.err = exec.Command("node", filepath.Join(dir, "node_modules", "typescript", "bin", "tsc"), "-p", dir).CombinedOutput()
	})
	if tsBuild.err != nil {
		t.Fatalf("tsc -p clients/ts: %v\n%s", tsBuild.err, tsBuild.out)
	}
}
