package worker

import (
	"fmt"
	"slices"
	"testing"

	"github.com/roomrelay/roomrelay/sandbox"
)

// TestBundleCacheKeys: the same files are one entry, any change to a path
// or a content is another (also when the change only moves bytes from one
// file to the next), and the cache keeps at most bundleCacheEntries.
func TestBundleCacheKeys(t *testing.T) {
	var c bundleCache
	a := app(`return <p>a</p>;`)
	b1, err := c.build(a)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := c.build(app(`return <p>a</p>;`))
	if b1 != b2 || c.hits != 1 {
		t.Fatalf("same files: got another bundle (hits %d)", c.hits)
	}
	if b1.prog == nil {
		t.Fatal("a cached bundle is not compiled")
	}
	if b3, _ := c.build(app(`return <p>b</p>;`)); b3 == b1 {
		t.Fatal("changed content: got the cached bundle")
	}
	moved1 := map[string]string{EntryPath: `import "./x"; export default function App() { return null; }`, "src/x.ts": "", "src/xy.ts": ""}
	moved2 := map[string]string{EntryPath: `import "./x"; export default function App() { return null; }`, "src/x.ts": "", "src/x": "y.ts"}
	if filesKey(moved1) == filesKey(moved2) {
		t.Fatal("bytes moved between a path and the next: same key")
	}
	for i := range 2 * bundleCacheEntries {
		if _, err := c.build(app(fmt.Sprintf(`return <p>%d</p>;`, i))); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.entries) != bundleCacheEntries {
		t.Fatalf("%d entries, want at most %d", len(c.entries), bundleCacheEntries)
	}
	hits := c.hits
	if _, err := c.build(a); err != nil || c.hits != hits {
		t.Fatalf("the oldest entry was not evicted (hits %d → %d)", hits, c.hits)
	}
	if _, err := c.build(map[string]string{EntryPath: "export default function App( {"}); err == nil {
		t.Fatal("a broken snippet built")
	}
}

// TestCachedBundleRunsFresh: the same snippet smoke-run three times in one
// worker (the second and third runs reuse its bundle) sees none of the
// globals, prototype properties and module state the runs before it left.
func TestCachedBundleRunsFresh(t *testing.T) {
	p := newTestPool(t, func(c *sandbox.Config) { c.Workers = 1 })
	snippet := map[string]string{EntryPath: `let renders = 0;
export default function App() {
  renders++;
  if (renders === 1) {
    const g = globalThis as any;
    console.log("seen:", typeof g.mark, typeof ({} as any).polluted, typeof ([] as any).extra, String(Array.prototype.map === g.savedMap));
    g.mark = 1;
    g.savedMap = Array.prototype.map;
    Object.defineProperty(Object.prototype, "polluted", { value: 1 });
    (Array.prototype as any).extra = 1;
  }
  return <p>{renders}</p>;
}
`}
	want := []string{"log: seen: undefined undefined undefined false"}
	for i := range 3 {
		res := smoke(t, p, snippet)
		if !res.OK || !slices.Equal(res.Console, want) {
			t.Fatalf("run %d: %s, console %q; want %q", i+1, res.Summary(), res.Console, want)
		}
	}
	if st := p.Stats(); st.Spawned != 1 {
		t.Fatalf("want every run in one worker, spawned %d", st.Spawned)
	}
}
