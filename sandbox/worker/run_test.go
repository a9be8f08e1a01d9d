package worker

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestSmokeExampleInProcess(t *testing.T) {
	res := smokeInProcess(t, exampleFiles(t))
	js, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("%s", js)
	if !res.OK {
		t.Fatalf("example failed: %s", res.Summary())
	}
}

// TestClicksAreBatched: a click's setState calls render once, as with
// React DOM, not once each.
func TestClicksAreBatched(t *testing.T) {
	res := smokeInProcess(t, app(`const [a, setA] = useState(0);
  const [b, setB] = useState(0);
  console.log("render", a, b);
  return <button onClick={() => { setA(1); setB(1); }}>go</button>;`))
	if !res.OK || res.Clicks != 1 {
		t.Fatalf("%s", res.Summary())
	}
	want := []string{"log: render 0 0", "log: render 1 1"}
	if !slices.Equal(res.Console, want) {
		t.Fatalf("console %q, want %q (one render per click)", res.Console, want)
	}
}

// TestSourceMapOnlyForFailures: a passing run never makes or parses the
// bundle's source map; a failure deep in the bundle still gets its
// file:line:column.
func TestSourceMapOnlyForFailures(t *testing.T) {
	lib := testLibraries(t)
	util := `export function pad(n: number): string {
  return String(n).padStart(3, "0");
}

export function check(n: number): number {
  if (n > 2) {
    const e = new RangeError("too big: " + n); throw e; // MARK
  }
  return n;
}
`
	files := map[string]string{
		EntryPath: `import { pad, check } from "./util";
import { useState } from "react";
export default function App() {
  const [n] = useState(3);
  return <p>{pad(n)}{BROKEN}</p>;
}
`,
		"src/util.ts": util,
	}
	for _, tc := range []struct {
		name, broken string
		ok           bool
	}{{"passing", `""`, true}, {"failing", "check(n)", false}} {
		t.Run(tc.name, func(t *testing.T) {
			src := map[string]string{EntryPath: strings.Replace(files[EntryPath], "BROKEN", tc.broken, 1), "src/util.ts": util}
			b, err := Build(src)
			if err != nil {
				t.Fatal(err)
			}
			r := newRun(lib, testLimits)
			res, _ := r.exec(b)
			if res.OK != tc.ok {
				t.Fatalf("%s", res.Summary())
			}
			if r.smapParsed != !tc.ok || (b.sourceMap != nil) != !tc.ok {
				t.Errorf("source map made: %v, parsed: %v, want %v", b.sourceMap != nil, r.smapParsed, !tc.ok)
			}
			if tc.ok {
				return
			}
			line := lineOf(util, "MARK")
			col := strings.Index(strings.Split(util, "\n")[line-1], "new RangeError") + 1
			if res.Error.File != "src/util.ts" || res.Error.Line != line || res.Error.Column != col {
				t.Errorf("location %s, want src/util.ts:%d:%d (stack %s)", res.Error.Location(), line, col, res.Error.Stack)
			}
			if !strings.Contains(res.Error.Stack, "src/App.tsx:5:") {
				t.Errorf("the caller's frame is not mapped: %s", res.Error.Stack)
			}
		})
	}
}
