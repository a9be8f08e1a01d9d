package review

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/sandbox"
	"github.com/roomrelay/roomrelay/sandbox/sandboxtest"
)

// The checks run in real worker processes (the test binary is its own
// worker), as `roomrelay review --web` does.
func TestMain(m *testing.M) { sandboxtest.Main(m) }

// testPool is a one-worker sandbox pool with the pinned React runtime, in
// cacheDir when it is not "".
func testPool(t testing.TB, cacheDir string) *sandbox.Pool {
	return sandboxtest.Pool(t, cacheDir, 5*time.Second)
}

// browserChecker is the checker the browser test's page runs with.
func browserChecker(t *testing.T) Checker { return SandboxChecker(testPool(t, "")) }

// TestSandboxCheckerRunsTheSnippet: the real sandbox, in a worker process:
// the standup timer passes with its render summary; a TSX error is named
// at file:line; a missing runtime is "not checked", never fetched.
func TestSandboxCheckerRunsTheSnippet(t *testing.T) {
	files, err := sandbox.ReadSnippetDir(filepath.Join("..", "..", "examples", "standup-timer"))
	if err != nil {
		t.Fatal(err)
	}
	c := SandboxChecker(testPool(t, ""))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum, ok, err := c.Check(ctx, files)
	t.Log(sum)
	if err != nil || !ok || !strings.HasPrefix(sum, "passes the proposal rules, builds, renders ") ||
		!strings.Contains(sum, "buttons)") || !strings.Contains(sum, "onClick handlers clicked without error") {
		t.Fatalf("standup timer: %q %v %v", sum, ok, err)
	}
	broken := map[string]string{"src/App.tsx": "export default function App() {\n  return <div>{</div>;\n}\n"}
	sum, ok, err = c.Check(ctx, broken)
	t.Log(sum)
	if err != nil || ok || !strings.HasPrefix(sum, "does not build: TSX error at src/App.tsx:2:") {
		t.Fatalf("broken TSX: %q %v %v", sum, ok, err)
	}
	throws := map[string]string{"src/App.tsx": "export default function App() {\n  throw new Error(\"boom\");\n}\n"}
	sum, ok, err = c.Check(ctx, throws)
	t.Log(sum)
	if err != nil || ok || !strings.Contains(sum, "at src/App.tsx:2:") || !strings.Contains(sum, "boom") {
		t.Fatalf("throwing render: %q %v %v", sum, ok, err)
	}
	sum, ok, err = c.Check(ctx, map[string]string{"src/Other.tsx": "x"})
	if err != nil || ok || !strings.Contains(sum, "breaks the proposal rules") {
		t.Fatalf("no entry point: %q %v %v", sum, ok, err)
	}

	empty := t.TempDir()
	_, _, err = SandboxChecker(testPool(t, empty)).Check(ctx, files)
	if err != ErrRuntimeMissing {
		t.Fatalf("without a runtime: %v", err)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Fatalf("the check fetched into the cache: %v", ents)
	}
}
