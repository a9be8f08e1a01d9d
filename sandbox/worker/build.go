package worker

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/dop251/goja"
	"github.com/evanw/esbuild/pkg/api"

	"github.com/roomrelay/roomrelay/sandbox"
)

// EntryPath is the snippet's entry point, as in the desktop product.
const EntryPath = "src/App.tsx"

// SDKModule is the room SDK a snippet may import. Its storage lives in
// memory inside the sandbox run and is gone when the run ends.
const SDKModule = "@roomrelay/sdk"

// AllowedModules are the only bare imports a snippet may use.
var AllowedModules = []string{"react", "react/jsx-runtime", SDKModule}

// snippetNS is the esbuild namespace the snippet's files live in; it never
// touches the file system.
const snippetNS = "snippet"

// Bundle is a built snippet.
type Bundle struct {
	// Code is a CommonJS module that requires only AllowedModules.
	Code string
	// CSS is the bundled stylesheet, empty when the snippet has none.
	CSS string
	// Warnings are esbuild warnings that were not promoted to errors.
	Warnings []sandbox.Message

	files     map[string]string // for SourceMap
	mapOnce   sync.Once
	sourceMap []byte
	mapErr    error

	progOnce sync.Once // compile
	prog     *goja.Program
	progErr  error
}

// BuildError is a failed build; Messages holds every error esbuild reported.
type BuildError struct {
	Messages []sandbox.Message
}

func (e *BuildError) Error() string {
	if len(e.Messages) == 0 {
		return "build failed"
	}
	s := e.Messages[0].String()
	if n := len(e.Messages) - 1; n > 0 {
		s += fmt.Sprintf(" (and %d more)", n)
	}
	return s
}

// tsconfig makes TypeScript keep imports it would otherwise elide, so an
// unused forbidden import still fails the build.
const tsconfig = `{"compilerOptions":{"verbatimModuleSyntax":true,"jsx":"react-jsx"}}`

var loaders = map[string]api.Loader{
	".tsx":  api.LoaderTSX,
	".ts":   api.LoaderTS,
	".jsx":  api.LoaderJSX,
	".js":   api.LoaderJS,
	".mjs":  api.LoaderJS,
	".css":  api.LoaderCSS,
	".json": api.LoaderJSON,
}

// resolveSuffixes are tried in order for an extensionless relative import.
var resolveSuffixes = []string{"", ".tsx", ".ts", ".jsx", ".js", ".json", ".css", "/index.tsx", "/index.ts", "/index.jsx", "/index.js"}

// hostlessEntry is the entry point as esbuild is given it.
const hostlessEntry = "/dev/null/roomrelay-snippet/" + EntryPath

// Build bundles files (relative path → contents) in memory. A failed build
// returns a *BuildError.
func Build(files map[string]string) (*Bundle, error) {
	if _, ok := files[EntryPath]; !ok {
		return nil, &BuildError{Messages: []sandbox.Message{{Text: EntryPath + " is missing: it is the snippet's entry point"}}}
	}
	files = maps.Clone(files) // SourceMap may build them again
	res := api.Build(buildOptions(files, api.SourceMapNone))
	var errs []sandbox.Message
	for _, m := range res.Errors {
		errs = append(errs, convertMessage(m))
	}
	var warns []sandbox.Message
	for _, m := range res.Warnings {
		cm := convertMessage(m)
		// esbuild reports CSS syntax errors as warnings; a reviewer would
		// call them errors. An import of a name that is not exported is a
		// certain bug as well.
		if strings.HasSuffix(cm.File, ".css") || m.ID == "import-is-undefined" {
			errs = append(errs, cm)
			continue
		}
		warns = append(warns, cm)
	}
	if len(errs) > 0 {
		return nil, &BuildError{Messages: errs}
	}
	b := &Bundle{Warnings: warns, files: files}
	for _, f := range res.OutputFiles {
		switch {
		case strings.HasSuffix(f.Path, ".js"):
			b.Code = string(f.Contents)
		case strings.HasSuffix(f.Path, ".css"):
			b.CSS = string(f.Contents)
		}
	}
	if b.Code == "" {
		return nil, &BuildError{Messages: []sandbox.Message{{Text: "esbuild produced no JavaScript output"}}}
	}
	return b, nil
}

// SourceMap is the bundle's source map (JSON with positions only, not the
// sources' content). Writing it costs about a sixth of a build and only a
// failure's location needs it, so it is made on first use by building the
// files again with a map; esbuild's code does not depend on whether it
// writes one, and a map for code other than Code is refused.
func (b *Bundle) SourceMap() ([]byte, error) {
	b.mapOnce.Do(func() { b.sourceMap, b.mapErr = b.buildSourceMap() })
	return b.sourceMap, b.mapErr
}

func (b *Bundle) buildSourceMap() ([]byte, error) {
	if b.files == nil {
		return nil, errors.New("source map: the bundle was not built by Build")
	}
	res := api.Build(buildOptions(b.files, api.SourceMapExternal))
	if len(res.Errors) > 0 {
		return nil, fmt.Errorf("source map: the second build failed: %s", convertMessage(res.Errors[0]))
	}
	var code string
	var sm []byte
	for _, f := range res.OutputFiles {
		switch {
		case strings.HasSuffix(f.Path, ".js.map"):
			sm = f.Contents
		case strings.HasSuffix(f.Path, ".js"):
			code = string(f.Contents)
		}
	}
	if sm == nil || code != b.Code {
		return nil, errors.New("source map: the second build differs from the bundle")
	}
	return sm, nil
}

// JS is Code with the source map inlined as a data: URL, for tools that
// read a single file.
func (b *Bundle) JS() (string, error) {
	sm, err := b.SourceMap()
	if err != nil {
		return "", err
	}
	return b.Code + "//# sourceMappingURL=data:application/json;base64," + base64.StdEncoding.EncodeToString(sm) + "\n", nil
}

func buildOptions(files map[string]string, sourceMap api.SourceMap) api.BuildOptions {
	return api.BuildOptions{
		// An entry path no host file can have (nothing lives below a
		// device file), which the plugin maps to EntryPath: esbuild would
		// otherwise look for EntryPath in the process's working directory.
		EntryPoints: []string{hostlessEntry},
		Bundle:      true,
		Write:       false,
		Outdir:      "out",
		Format:      api.FormatCommonJS,
		Platform:    api.PlatformNeutral,
		Target:      api.ES2022,
		// goja lacks async generators, for-await and import(); esbuild
		// lowers them (import() to a require that the sandbox refuses).
		Supported:       map[string]bool{"async-generator": false, "for-await": false, "dynamic-import": false},
		JSX:             api.JSXAutomatic,
		JSXImportSource: "react",
		Sourcemap:       sourceMap,
		SourcesContent:  api.SourcesContentExclude,
		TsconfigRaw:     tsconfig,
		Charset:         api.CharsetUTF8,
		LogLevel:        api.LogLevelSilent,
		Plugins:         []api.Plugin{snippetPlugin(files)},
	}
}

func convertMessage(m api.Message) sandbox.Message {
	out := sandbox.Message{Text: m.Text}
	if l := m.Location; l != nil {
		out.File = strings.TrimPrefix(l.File, snippetNS+":")
		out.Line = l.Line
		out.Column = l.Column + 1
		out.LineText = l.LineText
	}
	return out
}

func snippetPlugin(files map[string]string) api.Plugin {
	return api.Plugin{
		Name: "roomrelay-snippet",
		Setup: func(pb api.PluginBuild) {
			pb.OnResolve(api.OnResolveOptions{Filter: ".*"}, func(a api.OnResolveArgs) (api.OnResolveResult, error) {
				return resolve(files, a), nil
			})
			pb.OnLoad(api.OnLoadOptions{Filter: ".*", Namespace: snippetNS}, func(a api.OnLoadArgs) (api.OnLoadResult, error) {
				src, ok := files[a.Path]
				if !ok {
					return api.OnLoadResult{}, fmt.Errorf("%s is not part of the snippet", a.Path)
				}
				if m := externalSourceMap(a.Path, src); m != nil {
					return api.OnLoadResult{Errors: []api.Message{*m}}, nil
				}
				loader, ok := loaders[path.Ext(a.Path)]
				if !ok {
					return api.OnLoadResult{}, fmt.Errorf("%s: unsupported file type (allowed: %s)", a.Path, strings.Join(loaderExts(), ", "))
				}
				return api.OnLoadResult{Contents: &src, Loader: loader}, nil
			})
		},
	}
}

func resolve(files map[string]string, a api.OnResolveArgs) api.OnResolveResult {
	fail := func(format string, args ...any) api.OnResolveResult {
		return api.OnResolveResult{Errors: []api.Message{{Text: fmt.Sprintf(format, args...)}}}
	}
	p := a.Path
	if a.Kind == api.ResolveEntryPoint {
		// The entry is always EntryPath in the snippet's namespace, whatever
		// esbuild made of it (it prefixes "./" when the process's working
		// directory happens to hold such a file).
		return api.OnResolveResult{Path: EntryPath, Namespace: snippetNS}
	}
	if strings.HasPrefix(p, "./") || strings.HasPrefix(p, "../") {
		if a.Namespace != snippetNS {
			return fail("relative import %q from outside the snippet", p)
		}
		joined := path.Join(path.Dir(a.Importer), p)
		if joined == ".." || strings.HasPrefix(joined, "../") {
			return fail("import %q leaves the snippet", p)
		}
		for _, suf := range resolveSuffixes {
			if _, ok := files[joined+suf]; ok {
				return api.OnResolveResult{Path: joined + suf, Namespace: snippetNS}
			}
		}
		return fail("import %q: no file %s in the snippet", p, joined)
	}
	for _, m := range AllowedModules {
		if p == m {
			return api.OnResolveResult{Path: p, External: true}
		}
	}
	return fail("import %q is not allowed: a snippet may import only its own files (./...) and %s", p, strings.Join(AllowedModules, ", "))
}

// sourceMapCommentRE matches the comments esbuild reads a source map from
// ("//# sourceMappingURL=...", also with "@" and in block comments).
var sourceMapCommentRE = regexp.MustCompile(`(//|/\*)[#@] sourceMappingURL=(\S*)`)

// externalSourceMap refuses a source map comment that is not an inline
// data: URL: esbuild would read a file:// URL from the host's disk. A string
// literal that merely looks like such a comment is refused too; a snippet
// has no reason to carry one.
func externalSourceMap(file, src string) *api.Message {
	// The regexp has no literal prefix to scan for; most files hold no
	// such comment at all.
	if !strings.Contains(src, "sourceMappingURL=") {
		return nil
	}
	for _, m := range sourceMapCommentRE.FindAllStringSubmatchIndex(src, -1) {
		url := src[m[4]:m[5]]
		if strings.HasPrefix(url, "data:") {
			continue
		}
		line := strings.Count(src[:m[0]], "\n") + 1
		col := m[0] - (strings.LastIndexByte(src[:m[0]], '\n') + 1)
		return &api.Message{
			Text:     "a sourceMappingURL that is not an inline data: URL is not allowed in a snippet: remove the comment",
			Location: &api.Location{File: file, Namespace: snippetNS, Line: line, Column: col},
		}
	}
	return nil
}

func loaderExts() []string {
	var exts []string
	for e := range loaders {
		exts = append(exts, e)
	}
	sort.Strings(exts)
	return exts
}
