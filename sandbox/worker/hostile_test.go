package worker

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/sandbox"
)

// app wraps a component body into a snippet with a default export.
func app(body string) map[string]string {
	return map[string]string{EntryPath: `import { useEffect, useState } from "react";
export default function App() {
` + body + `
}
`}
}

// lineOf is the 1-based line of the first occurrence of mark in src.
func lineOf(src, mark string) int {
	i := strings.Index(src, mark)
	if i < 0 {
		return 0
	}
	return strings.Count(src[:i], "\n") + 1
}

type hostileCase struct {
	name   string
	files  map[string]string
	phases []sandbox.Phase // any of these
	msg    string          // substring of the error message (or "" to skip)
	// file and mark locate the error: the line holding mark in that file.
	file, mark string
	check      func(t *testing.T, res *sandbox.Result)
	// needsRlimit: only RLIMIT_DATA bounds this case (absent in race builds).
	needsRlimit bool
}

func consoleHas(want string) func(t *testing.T, res *sandbox.Result) {
	return func(t *testing.T, res *sandbox.Result) {
		t.Helper()
		if !strings.Contains(strings.Join(res.Console, "\n"), want) {
			t.Errorf("console %q does not contain %q", res.Console, want)
		}
	}
}

func hostileCases() []hostileCase {
	helper := map[string]string{
		EntryPath: `import { label } from "./util";
export default function App() { return <p>{label(3)}</p>; }
`,
		"src/util.ts": `export function label(n: number): string {
  if (n > 2) throw new Error("helper exploded"); // MARK
  return "n=" + n;
}
`,
	}
	return []hostileCase{
		{name: "infinite loop", files: app(`while (true) {} return null;`), phases: []sandbox.Phase{sandbox.PhaseTimeout}, msg: "time limit"},
		{name: "catch-swallowing loop", files: app(`for (;;) { try { throw new Error("again"); } catch { /* swallow */ } finally { continue; } } return null;`), phases: []sandbox.Phase{sandbox.PhaseTimeout}},
		{name: "deep recursion", files: app(`const f = (n: number): number => f(n + 1) + 1; // MARK
return <p>{f(0)}</p>;`), phases: []sandbox.Phase{sandbox.PhaseRender}, msg: "Maximum call stack size exceeded", file: EntryPath, mark: "MARK"},
		{name: "allocation loop", files: app(`const a: object[] = []; for (;;) a.push({ n: a.length, s: "xxxxxxxxxxxxxxxx" + a.length }); return null;`), phases: []sandbox.Phase{sandbox.PhaseMemory}},
		// The fill and string repeat bombs reach the RLIMIT_DATA cap, where the worker
		// may also die by a fault in Go's GC (sandbox.runtimeFault): that
		// too must read as memory, never as a crash.
		{name: "fill bomb", files: app(`const a = new Array(5e7).fill(0); return <p>{a.length}</p>;`), phases: []sandbox.Phase{sandbox.PhaseMemory, sandbox.PhaseTimeout}, needsRlimit: true},
		{name: "regex bomb", files: app(`const ok = /^(?=a)(a+)+$/.test("a".repeat(40) + "b"); return <p>{String(ok)}</p>;`), phases: []sandbox.Phase{sandbox.PhaseTimeout}, msg: "built-in"},
		{name: "string repeat bomb", files: app(`let s = "x".repeat(2 ** 27); for (let i = 0; i < 8; i++) s = s + s.slice(1) + "y"; return <p>{s.length}</p>;`), phases: []sandbox.Phase{sandbox.PhaseMemory, sandbox.PhaseTimeout}, needsRlimit: true},
		{name: "promise storm", files: app(`useEffect(() => { const storm = (): unknown => Promise.resolve().then(storm); storm(); }, []); return <p>storm</p>;`), phases: []sandbox.Phase{sandbox.PhaseTimeout, sandbox.PhaseMemory}},
		{name: "setState in render", files: app(`const [n, setN] = useState(0); setN(n + 1); return <p>{n}</p>;`), phases: []sandbox.Phase{sandbox.PhaseRender}, msg: "Too many re-renders"},
		{name: "sourceMappingURL file in eval", files: app("(0, eval)(\"throw new Error('boom')\\n//\" + \"# sourceMappingURL=file:///etc/passwd\"); return null;"), phases: []sandbox.Phase{sandbox.PhaseRender}, msg: "boom",
			check: func(t *testing.T, res *sandbox.Result) {
				if strings.Contains(res.Error.Stack+res.Error.Message, "root:") {
					t.Errorf("host file content leaked: %s", res.Error.Stack)
				}
			}},
		{name: "sourceMappingURL file in new Function", files: app("new Function(\"throw new Error('fn')\\n//\" + \"# sourceMappingURL=/etc/passwd\")(); return null;"), phases: []sandbox.Phase{sandbox.PhaseRender}, msg: "fn",
			check: func(t *testing.T, res *sandbox.Result) {
				if strings.Contains(res.Error.Stack, "root:") {
					t.Errorf("host file content leaked: %s", res.Error.Stack)
				}
			}},
		{name: "sourceMappingURL file in the snippet", files: map[string]string{EntryPath: "export default function App() { throw new Error('own'); }\n//# sourceMappingURL=file:///etc/passwd\n"},
			phases: []sandbox.Phase{sandbox.PhaseBuild}, msg: "sourceMappingURL", file: EntryPath, mark: "//#",
			check: func(t *testing.T, res *sandbox.Result) {
				if strings.Contains(res.Error.Message, "root") {
					t.Errorf("host file read: %s", res.Error.Message)
				}
			}},
		{name: "sourceMappingURL file in CSS", files: map[string]string{EntryPath: "import \"./a.css\";\nexport default function App() { return null; }\n", "src/a.css": ".a { color: red }\n/*# sourceMappingURL=file:///etc/passwd */\n"},
			phases: []sandbox.Phase{sandbox.PhaseBuild}, msg: "sourceMappingURL", file: "src/a.css", mark: "/*#"},
		{name: "require is absent from the globals", files: app(`console.log("require:", typeof (globalThis as any).require, typeof (globalThis as any).module, typeof (globalThis as any).exports); return null;`),
			phases: []sandbox.Phase{sandbox.PhaseDone}, check: consoleHas("require: undefined undefined undefined")},
		{name: "the module require refuses host modules", files: app(`const r = eval("typeof require === 'function' ? require : null"); return <p>{r ? String(r("child_" + "process")) : "none"}</p>;`),
			phases: []sandbox.Phase{sandbox.PhaseRender}, msg: "not available in the sandbox"},
		{name: "require of a host module", files: app(`const fs = require("fs"); return <p>{String(fs)}</p>;`), phases: []sandbox.Phase{sandbox.PhaseBuild}, msg: "not allowed"},
		{name: "process", files: app(`return <p>{process.env.HOME}</p>; // MARK`), phases: []sandbox.Phase{sandbox.PhaseRender}, msg: "process is not defined", file: EntryPath, mark: "MARK"},
		{name: "globalThis.constructor", files: app(`const g = (globalThis.constructor as any).constructor("return this")(); console.log("g:", typeof g.process, typeof g.require, typeof g.window, typeof g.Deno); return null;`),
			phases: []sandbox.Phase{sandbox.PhaseDone}, check: consoleHas("g: undefined undefined undefined undefined")},
		{name: "Function return this", files: app(`const g = Function("return this")(); console.log("names:", Object.getOwnPropertyNames(g).filter((n) => /^[a-z]/.test(n)).sort().join(",")); return null;`),
			phases: []sandbox.Phase{sandbox.PhaseDone}, check: consoleHas("names: clearInterval,clearTimeout,console,decodeURI,decodeURIComponent,encodeURI,encodeURIComponent,escape,eval,fetch,globalThis,isFinite,isNaN,parseFloat,parseInt,queueMicrotask,setInterval,setTimeout,undefined,unescape")},
		{name: "static import()", files: app(`useEffect(() => { import("node:fs"); }, []); return null;`), phases: []sandbox.Phase{sandbox.PhaseBuild}, msg: "not allowed"},
		{name: "dynamic import()", files: app(`const [m] = useState("f" + "s"); useEffect(() => { import(m).then(() => console.log("loaded")); }, [m]); return null;`),
			phases: []sandbox.Phase{sandbox.PhaseEffects}, msg: "not available in the sandbox"},
		{name: "network", files: app(`const [s, setS] = useState("loading"); useEffect(() => { fetch("https://example.com/").then(() => setS("fetched")); }, []); return <p>{s}</p>;`),
			phases: []sandbox.Phase{sandbox.PhaseDone}, check: func(t *testing.T, res *sandbox.Result) {
				if res.Render.TextLength != len("loading") {
					t.Errorf("fetch settled: text length %d", res.Render.TextLength)
				}
			}},
		{name: "XMLHttpRequest", files: app(`const x = new XMLHttpRequest(); return <p>{String(x)}</p>;`), phases: []sandbox.Phase{sandbox.PhaseRender}, msg: "XMLHttpRequest is not defined",
			check: func(t *testing.T, res *sandbox.Result) {
				if res.Error.Note == "" {
					t.Error("no environment note")
				}
			}},
		{name: "real clock", files: app(`const C: any = Object.getPrototypeOf(new Date()).constructor; console.log("t:", Date.now(), new Date().getTime(), new C().getTime(), typeof performance); return null;`),
			phases: []sandbox.Phase{sandbox.PhaseDone}, check: consoleHas("t: 1704099600000 1704099600000 1704099600000 undefined")},
		{name: "throw in render", files: app(`throw new Error("render broke"); // MARK`), phases: []sandbox.Phase{sandbox.PhaseRender}, msg: "Error: render broke", file: EntryPath, mark: "MARK"},
		{name: "throw in effect", files: app(`useEffect(() => {
    throw new TypeError("effect broke"); // MARK
  }, []);
  return <p>x</p>;`), phases: []sandbox.Phase{sandbox.PhaseEffects}, msg: "TypeError: effect broke", file: EntryPath, mark: "MARK"},
		{name: "throw in interval", files: app(`useEffect(() => { const id = setInterval(() => { throw new Error("tick broke"); /* MARK */ }, 1000); return () => clearInterval(id); }, []);
  return <p>x</p>;`), phases: []sandbox.Phase{sandbox.PhaseEffects}, msg: "tick broke", file: EntryPath, mark: "MARK"},
		{name: "throw in click handler", files: app(`return <button onClick={() => {
    throw new Error("click broke"); // MARK
  }}>go</button>;`), phases: []sandbox.Phase{sandbox.PhaseEvents}, msg: "click broke", file: EntryPath, mark: "MARK"},
		// The summary reads each element's props.onClick from Go: a getter
		// there is the snippet's code, and its failure is the run's.
		{name: "throwing onClick getter on Object.prototype", files: app(`Object.defineProperty(Object.prototype, "onClick", { get() {
    throw new Error("getter broke"); // MARK
  } });
  return <div><p>x</p></div>;`), phases: []sandbox.Phase{sandbox.PhaseEffects}, msg: "getter broke", file: EntryPath, mark: "MARK"},
		{name: "endless onClick getter on Object.prototype", files: app(`Object.defineProperty(Object.prototype, "onClick", { get() { for (;;) {} } });
  return <div><p>x</p></div>;`), phases: []sandbox.Phase{sandbox.PhaseTimeout}},
		{name: "infinite loop in click handler", files: app(`return <button onClick={() => { for (;;) {} }}>go</button>;`), phases: []sandbox.Phase{sandbox.PhaseTimeout}},
		{name: "throw in helper module", files: helper, phases: []sandbox.Phase{sandbox.PhaseRender}, msg: "helper exploded", file: "src/util.ts", mark: "MARK"},
		{name: "unhandled rejection", files: app(`useEffect(() => { Promise.reject(new Error("nobody caught me")); }, []); return null;`), phases: []sandbox.Phase{sandbox.PhaseEffects}, msg: "unhandled promise rejection: Error: nobody caught me"},
		{name: "syntax error", files: map[string]string{EntryPath: "export default function App() {\n  return <p>{1 +}</p>;\n}\n"}, phases: []sandbox.Phase{sandbox.PhaseBuild}, file: EntryPath, mark: "{1 +}"},
		{name: "forbidden unused import", files: map[string]string{EntryPath: "import fs from \"fs\";\nexport default function App() { return null; }\n"}, phases: []sandbox.Phase{sandbox.PhaseBuild}, msg: `import "fs" is not allowed`, file: EntryPath, mark: "import fs"},
		{name: "import leaving the snippet", files: map[string]string{EntryPath: "import x from \"../../etc/passwd\";\nexport default function App() { return <p>{String(x)}</p>; }\n"}, phases: []sandbox.Phase{sandbox.PhaseBuild}, msg: "leaves the snippet"},
		{name: "missing default export", files: map[string]string{EntryPath: "export function App() { return null; }\n"}, phases: []sandbox.Phase{sandbox.PhaseLoad}, msg: "no default export"},
		{name: "CSS syntax error", files: map[string]string{EntryPath: "import \"./styles.css\";\nexport default function App() { return null; }\n", "src/styles.css": ".a { color: red;\n.b { color: }\n"}, phases: []sandbox.Phase{sandbox.PhaseBuild}, file: "src/styles.css"},
		{name: "window", files: app(`window.alert("hi"); return null;`), phases: []sandbox.Phase{sandbox.PhaseRender}, msg: "window is not defined",
			check: func(t *testing.T, res *sandbox.Result) {
				if !strings.Contains(res.Error.Note, "no DOM") {
					t.Errorf("note %q", res.Error.Note)
				}
			}},
		{name: "Intl is an environment gap", files: app(`return <p>{new Intl.NumberFormat("en").format(3)}</p>;`), phases: []sandbox.Phase{sandbox.PhaseRender}, msg: "Intl is not defined",
			check: func(t *testing.T, res *sandbox.Result) {
				if !strings.Contains(res.Error.Note, "goja") {
					t.Errorf("note %q", res.Error.Note)
				}
			}},
		{name: "async generators are lowered", files: app(`const [n, setN] = useState(0);
  useEffect(() => { (async () => { async function* g() { yield 1; yield 2; } let s = 0; for await (const v of g()) s += v; setN(s); })(); }, []);
  return <p>{"sum " + n}</p>;`), phases: []sandbox.Phase{sandbox.PhaseDone}, check: func(t *testing.T, res *sandbox.Result) {
			if res.Render.TextLength != len("sum 3") {
				t.Errorf("text length %d, want %d", res.Render.TextLength, len("sum 3"))
			}
		}},
		{name: "room SDK storage", files: map[string]string{EntryPath: `import { useStoredState, storage } from "@roomrelay/sdk";
export default function App() {
  const [n, setN] = useStoredState("count", 0);
  storage.keys().then((k) => console.log("keys:", k.join(",")));
  return <button onClick={() => setN(n + 1)}>{"count " + n}</button>;
}
`}, phases: []sandbox.Phase{sandbox.PhaseDone}, check: consoleHas("keys: count")},
	}
}

func TestHostileSnippets(t *testing.T) {
	// A case that must end some other way than by the time limit runs with
	// one it cannot reach on a loaded machine (the allocation loop once
	// timed out at 1 s before it filled the heap); only the cases that may
	// time out run with the short one.
	p := newTestPool(t, shortTimeout)
	untimed := newTestPool(t, nil)
	pid := os.Getpid()
	cases := hostileCases()
	if len(cases) < 25 {
		t.Fatalf("only %d hostile cases", len(cases))
	}
	t.Run("cases", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				if tc.needsRlimit && raceEnabled {
					t.Skip("bounded by RLIMIT_DATA, which race-detector builds cannot run under")
				}
				pool := untimed
				if slices.Contains(tc.phases, sandbox.PhaseTimeout) {
					pool = p
				}
				res := smoke(t, pool, tc.files)
				t.Logf("%s | console %q", res.Summary(), res.Console)
				phases := tc.phases
				if raceEnabled && slices.Contains(phases, sandbox.PhaseMemory) {
					// Instrumented code may hit the time limit first.
					phases = append(phases, sandbox.PhaseTimeout)
				}
				ok := false
				for _, ph := range phases {
					ok = ok || res.Phase == ph
				}
				if !ok {
					t.Fatalf("phase %q, want one of %v: %s", res.Phase, phases, res.Summary())
				}
				if res.OK != (res.Phase == sandbox.PhaseDone) {
					t.Errorf("ok=%v with phase %s", res.OK, res.Phase)
				}
				if !res.OK && (res.Error == nil || res.Error.Message == "") {
					t.Fatalf("failure without a message")
				}
				if tc.msg != "" && !strings.Contains(res.Error.Message, tc.msg) {
					t.Errorf("message %q does not contain %q", res.Error.Message, tc.msg)
				}
				if tc.file != "" {
					if res.Error.File != tc.file {
						t.Errorf("error file %q, want %q (stack %s)", res.Error.File, tc.file, res.Error.Stack)
					}
					if tc.mark != "" {
						if want := lineOf(tc.files[tc.file], tc.mark); res.Error.Line != want {
							t.Errorf("error line %d, want %d (stack %s)", res.Error.Line, want, res.Error.Stack)
						}
					}
					if res.Error.Column < 1 {
						t.Errorf("error column %d", res.Error.Column)
					}
				}
				if tc.check != nil {
					tc.check(t, res)
				}
			})
		}
	})
	if os.Getpid() != pid {
		t.Fatal("pid changed")
	}
	// The pool still serves a clean snippet after all of that.
	if res := smoke(t, p, exampleFiles(t)); !res.OK {
		t.Fatalf("clean snippet after the hostile ones: %s", res.Summary())
	}
	t.Logf("pool stats after the hostile table: %+v and %+v", p.Stats(), untimed.Stats())
}

// TestPrototypePoisoningDoesNotLeak runs a poisoning snippet and then a
// clean one in the same worker process: each run has a fresh runtime.
func TestPrototypePoisoningDoesNotLeak(t *testing.T) {
	p := newTestPool(t, func(c *sandbox.Config) { c.Workers = 1 })
	poison := app(`Array.prototype.map = function () { return ["pwned"]; } as any;
  Object.prototype.toString = () => "pwned"; (JSON as any).stringify = () => "pwned";
  return <ul>{[1, 2].map((n) => <li key={n}>{n}</li>)}</ul>;`)
	smoke(t, p, poison)
	clean := app(`return <ul>{["a", "b", "c"].map((s) => <li key={s}>{s}</li>)}</ul>;`)
	res := smoke(t, p, clean)
	if !res.OK || res.Render.Elements["li"] != 3 || res.Render.TextLength != 3 {
		t.Fatalf("clean snippet after poisoning: %s %+v", res.Summary(), res.Render)
	}
	if st := p.Stats(); st.Spawned != 1 {
		t.Fatalf("want both runs in one worker, spawned %d", st.Spawned)
	}
}

// TestWarmRuntimeIsFresh: the runtime a worker prepares ahead of a request
// is new for every run. A global and a prototype property set by one run
// are not there in the next one in the same worker, also when a failed
// build in between left a prepared runtime unused.
func TestWarmRuntimeIsFresh(t *testing.T) {
	p := newTestPool(t, func(c *sandbox.Config) { c.Workers = 1 })
	setter := app(`(globalThis as any).leaked = "run 1"; Object.defineProperty(Object.prototype, "polluted", { value: 1 }); console.log("set:", typeof (globalThis as any).leaked); return null;`)
	checker := app(`console.log("seen:", typeof (globalThis as any).leaked, typeof ({} as any).polluted); return null;`)
	broken := map[string]string{EntryPath: "export default function App() {\n  return <p>{1 +}</p>;\n}\n"}
	runs := []struct {
		files   map[string]string
		phase   sandbox.Phase
		console []string
	}{
		{setter, sandbox.PhaseDone, []string{"log: set: string"}},
		{broken, sandbox.PhaseBuild, nil},
		{checker, sandbox.PhaseDone, []string{"log: seen: undefined undefined"}},
		{setter, sandbox.PhaseDone, []string{"log: set: string"}},
		{checker, sandbox.PhaseDone, []string{"log: seen: undefined undefined"}},
	}
	for i, r := range runs {
		res := smoke(t, p, r.files)
		if res.Phase != r.phase || !slices.Equal(res.Console, r.console) {
			t.Fatalf("run %d: %s, console %q; want phase %s, console %q", i+1, res.Summary(), res.Console, r.phase, r.console)
		}
	}
	if st := p.Stats(); st.Spawned != 1 {
		t.Fatalf("want every run in one worker, spawned %d", st.Spawned)
	}
}

// TestGarbageIsNotMemory: a run that keeps a few dozen MiB and allocates
// several times the heap limit in garbage passes; the watchdog counts what
// survives a collection, not what the worker's lazy GC has not freed yet.
func TestGarbageIsNotMemory(t *testing.T) {
	// A long time limit: this is about memory, and race builds are slow.
	p := newTestPool(t, func(c *sandbox.Config) { c.Workers = 1; c.Timeout = 30 * time.Second })
	res := smoke(t, p, app(`const keep: string[] = [];
  for (let i = 0; i < 30; i++) keep.push(String.fromCharCode(97 + (i % 26)).repeat(1 << 20));
  let n = 0;
  for (let i = 0; i < 400; i++) n += (String(i) + "-").repeat(1 << 18).length;
  return <p>{keep.length + " " + n}</p>;`))
	if !res.OK {
		t.Fatalf("%s", res.Summary())
	}
}
