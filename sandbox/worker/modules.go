package worker

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/dop251/goja"
	"github.com/dop251/goja/parser"

	"github.com/roomrelay/roomrelay/sandbox"
)

// refuseSourceMap is the source map loader for every parse: goja would
// otherwise read file:// URLs named by a snippet's sourceMappingURL from the
// host. Inline data: maps do not reach the loader.
func refuseSourceMap(string) ([]byte, error) {
	return nil, errors.New("external source maps are not loaded in the sandbox")
}

// libraries are the programs compiled once per worker and shared by every
// runtime it creates (a *goja.Program is immutable and safe to share).
type libraries struct {
	modules map[string]*goja.Program // module id → function(exports, require, module)
	prelude *goja.Program
}

// moduleHead wraps a CommonJS module into a function; mapPosition
// subtracts its length from positions on the bundle's first line.
const moduleHead = "(function (exports, require, module) {"

func compileModule(name, src string) (*goja.Program, error) {
	ast, err := goja.Parse(name, moduleHead+src+"\n})", parser.WithSourceMapLoader(refuseSourceMap))
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", name, err)
	}
	p, err := goja.CompileAST(ast, false)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", name, err)
	}
	return p, nil
}

// compileLibraries compiles the pinned libraries with libPatches applied.
func compileLibraries(srcs map[string]string) (*libraries, error) {
	return compilePatched(srcs, libPatches)
}

// compilePatched compiles the libraries with the given patches applied
// (tests compare the pinned build, nil, with libPatches).
func compilePatched(srcs map[string]string, patches []libPatch) (*libraries, error) {
	l := &libraries{modules: map[string]*goja.Program{}}
	srcs = maps.Clone(srcs)
	if err := patchLibraries(srcs, patches); err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrRuntimeUnavailable, err)
	}
	for id, src := range srcs {
		p, err := compileModule(id, src)
		if err != nil {
			return nil, err
		}
		l.modules[id] = p
	}
	p, err := compileModule(SDKModule, sdkSource)
	if err != nil {
		return nil, err
	}
	l.modules[SDKModule] = p
	for _, id := range []string{"react", "react/jsx-runtime", "react-test-renderer", "scheduler", "scheduler/unstable_mock"} {
		if l.modules[id] == nil {
			return nil, fmt.Errorf("%w: module %s missing", sandbox.ErrRuntimeUnavailable, id)
		}
	}
	ast, err := goja.Parse("prelude.js", preludeSource, parser.WithSourceMapLoader(refuseSourceMap))
	if err != nil {
		return nil, fmt.Errorf("parse prelude: %w", err)
	}
	if l.prelude, err = goja.CompileAST(ast, true); err != nil {
		return nil, fmt.Errorf("compile prelude: %w", err)
	}
	return l, nil
}

// require loads a library module (any module id the libraries know).
func (r *run) require(id string) (goja.Value, error) {
	if v, ok := r.modules[id]; ok {
		return v, nil
	}
	p, ok := r.lib.modules[id]
	if !ok {
		return nil, fmt.Errorf("module %q is not available in the sandbox", id)
	}
	fn, err := r.vm.RunProgram(p)
	if err != nil {
		return nil, err
	}
	module := r.vm.NewObject()
	exports := r.vm.NewObject()
	_ = module.Set("exports", exports)
	r.modules[id] = exports // a cycle sees the partial exports, as in Node
	req := r.vm.ToValue(func(c goja.FunctionCall) goja.Value {
		v, err := r.require(c.Argument(0).String())
		if err != nil {
			r.throw(err)
		}
		return v
	})
	if _, err := r.call(fn, exports, req, module); err != nil {
		delete(r.modules, id)
		return nil, err
	}
	v := module.Get("exports")
	r.modules[id] = v
	return v, nil
}

// throw rethrows err inside the runtime: a JS exception as itself, anything
// else as an Error.
func (r *run) throw(err error) {
	var ex *goja.Exception
	if errors.As(err, &ex) {
		panic(ex.Value())
	}
	panic(r.vm.NewGoError(err))
}

// compile parses and compiles the bundle's code for goja once; a
// *goja.Program is immutable, so it may be compiled on the goroutine that
// built the bundle while the runtime that will run it is still being
// prepared on another.
func (b *Bundle) compile() (*goja.Program, error) {
	b.progOnce.Do(func() {
		ast, err := goja.Parse(bundleName, moduleHead+b.Code+"\n})", parser.WithSourceMapLoader(refuseSourceMap))
		if err != nil {
			b.progErr = err
			return
		}
		b.prog, b.progErr = goja.CompileAST(ast, false)
	})
	return b.prog, b.progErr
}

// loadSnippet runs the compiled bundle; its require sees only
// AllowedModules.
func (r *run) loadSnippet() (goja.Value, error) {
	prog, err := r.bundle.compile()
	if err != nil {
		return nil, err
	}
	fn, err := r.vm.RunProgram(prog)
	if err != nil {
		return nil, err
	}
	module := r.vm.NewObject()
	exports := r.vm.NewObject()
	_ = module.Set("exports", exports)
	req := r.vm.ToValue(func(c goja.FunctionCall) goja.Value {
		id := c.Argument(0).String()
		allowed := false
		for _, m := range AllowedModules {
			allowed = allowed || m == id
		}
		if !allowed {
			panic(r.vm.NewTypeError(fmt.Sprintf("module %q is not available in the sandbox (allowed: %s)", id, strings.Join(AllowedModules, ", "))))
		}
		v, err := r.require(id)
		if err != nil {
			r.throw(err)
		}
		return v
	})
	if _, err := r.call(fn, exports, req, module); err != nil {
		return nil, err
	}
	return module.Get("exports"), nil
}

func (r *run) defaultExport(exports goja.Value) (goja.Value, error) {
	obj, ok := exports.(*goja.Object)
	if !ok {
		return nil, fmt.Errorf("%s has no default export: add 'export default function App() { ... }'", EntryPath)
	}
	def := obj.Get("default")
	if def == nil || goja.IsUndefined(def) || goja.IsNull(def) {
		return nil, fmt.Errorf("%s has no default export: add 'export default function App() { ... }'", EntryPath)
	}
	if _, ok := goja.AssertFunction(def); ok {
		return def, nil
	}
	// memo() and forwardRef() components are objects with $$typeof.
	if o, ok := def.(*goja.Object); ok {
		if t := o.Get("$$typeof"); t != nil && !goja.IsUndefined(t) {
			return def, nil
		}
	}
	return nil, fmt.Errorf("the default export of %s is not a React component (got %s)", EntryPath, def.ExportType())
}
