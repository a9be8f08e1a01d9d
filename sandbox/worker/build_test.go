package worker

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/sandbox"
)

func TestBuildExample(t *testing.T) {
	b, err := Build(exampleFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`require\("([^"]*)"\)`).FindAllStringSubmatch(b.Code, -1) {
		allowed := false
		for _, a := range AllowedModules {
			allowed = allowed || a == m[1]
		}
		if !allowed {
			t.Errorf("bundle requires %q", m[1])
		}
	}
	if !strings.Contains(b.CSS, ".standup") {
		t.Errorf("CSS missing from the bundle: %q", b.CSS)
	}
	const prefix = "//# sourceMappingURL=data:application/json;base64,"
	js, err := b.JS()
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndex(js, prefix)
	if i < 0 {
		t.Fatal("no inline source map")
	}
	sm, err := base64.StdEncoding.DecodeString(strings.TrimSpace(js[i+len(prefix):]))
	if err != nil || !strings.Contains(string(sm), `"snippet:src/App.tsx"`) {
		t.Fatalf("inline source map: %v %.200s", err, sm)
	}
	if strings.Contains(b.Code, "async function*") || strings.Contains(b.Code, "for await") {
		t.Error("untransformed syntax goja lacks")
	}
}

func TestBuildErrors(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  sandbox.Message // Text is a substring
	}{
		{"missing entry", map[string]string{"src/Other.tsx": ""}, sandbox.Message{Text: "src/App.tsx is missing"}},
		{"type error is not a syntax error, syntax error is", map[string]string{EntryPath: "export default function App() {\n  const x: number = ;\n}\n"}, sandbox.Message{File: EntryPath, Line: 2, Column: 21, Text: "Unexpected"}},
		{"missing relative file", map[string]string{EntryPath: "import { x } from \"./nope\";\nexport default () => x;\n"}, sandbox.Message{File: EntryPath, Line: 1, Column: 19, Text: "no file src/nope"}},
		{"absolute import", map[string]string{EntryPath: "import x from \"/etc/hosts\";\nexport default () => x;\n"}, sandbox.Message{File: EntryPath, Line: 1, Text: "not allowed"}},
		{"unsupported file type", map[string]string{EntryPath: "import x from \"./logo.png\";\nexport default () => x;\n", "src/logo.png": "x"}, sandbox.Message{File: EntryPath, Line: 1, Text: "unsupported file type"}},
		{"import of a missing export", map[string]string{EntryPath: "import { nope } from \"./util\";\nexport default () => nope;\n", "src/util.ts": "export const yes = 1;\n"}, sandbox.Message{File: EntryPath, Line: 1, Text: "No matching export"}},
		{"CSS syntax error", map[string]string{EntryPath: "import \"./a.css\";\nexport default () => null;\n", "src/a.css": "a { color: red;; }\n}\n"}, sandbox.Message{File: "src/a.css", Line: 2, Text: ""}},
		{"bad JSON", map[string]string{EntryPath: "import d from \"./data.json\";\nexport default () => d;\n", "src/data.json": "{\"a\": 1,,}\n"}, sandbox.Message{File: "src/data.json", Line: 1, Column: 9, Text: "Expected string"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(tc.files)
			var be *BuildError
			if !errors.As(err, &be) {
				t.Fatalf("err %v, want *BuildError", err)
			}
			m := be.Messages[0]
			if !strings.Contains(m.Text, tc.want.Text) || m.File != tc.want.File ||
				(tc.want.Line != 0 && m.Line != tc.want.Line) || (tc.want.Column != 0 && m.Column != tc.want.Column) {
				t.Fatalf("got %s, want %s", m, tc.want)
			}
		})
	}
}

func TestBuildTypeOnlyImports(t *testing.T) {
	_, err := Build(map[string]string{
		EntryPath:      "import type { T } from \"./types\";\nimport type { ReactNode } from \"react\";\nconst x: T = 1;\nexport default function App(): ReactNode { return <p>{x}</p>; }\n",
		"src/types.ts": "export type T = number;\n",
	})
	if err != nil {
		t.Fatal(err)
	}
}

// FuzzBuild: any file content yields a bundle or a *BuildError, never a
// panic or another error.
func FuzzBuild(f *testing.F) {
	f.Add("export default function App() { return <p>hi</p>; }", ".a { color: red }")
	f.Add("import x from \"./a.css\"; export default x;", "@import \"./b.css\";")
	f.Add("//# sourceMappingURL=file:///etc/passwd", "/*# sourceMappingURL=data:application/json;base64,e30= */")
	f.Add("import(\"react\"); export default 1", "a{")
	f.Fuzz(func(t *testing.T, tsx, css string) {
		_, err := Build(map[string]string{EntryPath: tsx, "src/a.css": css})
		var be *BuildError
		if err != nil && !errors.As(err, &be) {
			t.Fatalf("unexpected error type %T: %v", err, err)
		}
	})
}

// TestBuildIgnoresTheWorkingDirectory: with a decoy src/App.tsx and a decoy
// import target in the process's working directory, a valid snippet builds
// from its own files only, and an import the snippet lacks fails instead of
// reaching the decoy (esbuild used to find the entry there and fail with
// "./src/App.tsx is not part of the snippet").
func TestBuildIgnoresTheWorkingDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{"App.tsx": `export default function App() { return "DECOY_APP" }`, "util.ts": `export const x = "DECOY_UTIL"`} {
		if err := os.WriteFile(filepath.Join(dir, "src", name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	b, err := Build(map[string]string{EntryPath: `export default function App() { return <p>own</p> }`})
	if err != nil {
		t.Fatalf("a valid snippet beside a decoy: %v", err)
	}
	if strings.Contains(b.Code, "DECOY") || !strings.Contains(b.Code, "own") {
		t.Fatalf("the bundle is not the snippet's:\n%s", b.Code)
	}
	_, err = Build(map[string]string{EntryPath: `import { x } from "./util"; export default function App() { return <p>{x}</p> }`})
	if err == nil || !strings.Contains(err.Error(), "no file src/util in the snippet") {
		t.Fatalf("an import only the decoy has: %v", err)
	}
}

// TestSourceMapMatchesTheBundle: the source map, made by a second build on
// demand, belongs to the bundle's code for every corpus snippet.
func TestSourceMapMatchesTheBundle(t *testing.T) {
	names, corpus := benchCorpus(t)
	for _, n := range names {
		b, err := Build(corpus[n])
		if err != nil {
			t.Fatal(err)
		}
		if b.sourceMap != nil {
			t.Errorf("%s: source map made by Build", n)
		}
		sm, err := b.SourceMap()
		if err != nil || !strings.Contains(string(sm), `"snippet:src/App.tsx"`) || strings.Contains(string(sm), "sourcesContent") {
			t.Errorf("%s: %v %.200s", n, err, sm)
		}
	}
}
