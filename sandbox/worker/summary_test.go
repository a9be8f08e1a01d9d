package worker

import (
	"reflect"
	"testing"

	"github.com/dop251/goja"
)

// TestHostSummaryMatchesToJSON: the summary read from the test renderer's
// host tree equals the one read from toJSON's copy (elements by type, text
// length, the onClick handlers in order) on the bench corpus and on trees
// with hidden nodes (a suspended Suspense boundary), top-level text,
// fragments and nothing at all; and the host tree is found whenever
// something rendered.
func TestHostSummaryMatchesToJSON(t *testing.T) {
	lib := testLibraries(t)
	names, corpus := benchCorpus(t)
	cases := map[string]map[string]string{
		"text":     {EntryPath: `export default function App() { return "just text"; }`},
		"null":     {EntryPath: `export default function App() { return null; }`},
		"fragment": {EntryPath: `export default function App() { return <>a<b onClick={() => {}}>b</b><i>{7}</i>{null}<u onClick={() => {}} /></>; }`},
		"text content": {EntryPath: `export default function App() {
  return <ul><li>text</li><li>{0}</li><li>{""}</li><li>{-1.5e21}</li><li>{"é"}</li><li>mixed {2}</li><li>{null}</li><li><em>in</em></li></ul>;
}`},
		"suspended": {EntryPath: `import { Suspense } from "react";
const never = new Promise(() => {});
function Wait(): JSX.Element { throw never; }
export default function App() {
  return <div><Suspense fallback={<p onClick={() => {}}>loading</p>}><span onClick={() => {}}>hidden</span><Wait /></Suspense></div>;
}`},
	}
	for _, n := range names {
		cases[n] = corpus[n]
	}
	for name, files := range cases {
		b, err := Build(files)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r := newRun(lib, testLimits)
		r.bundle = b
		exports, err := r.loadSnippet()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		app, err := r.defaultExport(exports)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		root, err := r.helper("render", r.react, r.renderer, app)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := r.clock.advance(0); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		tree, err := r.helper("toJSON", root)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, wantH := summarize(tree)
		host, err := r.helper("hostChildren", root)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, ok := host.(*goja.Object); !ok {
			if want.ElementCount+want.TextLength > 0 {
				t.Errorf("%s: no host tree for a render with %d elements", name, want.ElementCount)
			}
			continue
		}
		got, gotH := summarizeHost(host)
		if !reflect.DeepEqual(got, want) || len(gotH) != len(wantH) {
			t.Errorf("%s: host tree %+v with %d handlers; toJSON %+v with %d", name, got, len(gotH), want, len(wantH))
			continue
		}
		for i := range gotH {
			if !gotH[i].SameAs(wantH[i]) {
				t.Errorf("%s: handler %d differs", name, i)
			}
		}
		t.Logf("%s: %d elements, %d characters, %d handlers", name, got.ElementCount, got.TextLength, len(gotH))
	}
}
