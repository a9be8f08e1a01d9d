//go:build !agentonly

package sandbox

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"regexp"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dop251/goja"
	"github.com/dop251/goja/parser"
	"github.com/go-sourcemap/sourcemap"
)

// Limits of one smoke-run inside a worker.
type runLimits struct {
	Timeout time.Duration
	// HeapLimit is the heap size (bytes of live objects) at which the run is
	// interrupted with PhaseMemory.
	HeapLimit uint64
	// MaxCallStack bounds JS call depth; 5000 is plenty for React.
	MaxCallStack int
	// Advance is how far the virtual clock runs after render and after
	// the clicks.
	Advance time.Duration
}

const (
	maxConsoleLines    = 50
	maxConsoleLineLen  = 300
	maxTimerCallbacks  = 100_000
	maxStackFrames     = 12
	virtualEpochMillis = 1_704_099_600_000 // 2024-01-01T09:00:00Z, a fixed "now"
	bundleName         = "bundle.js"
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

func compileLibraries(srcs map[string]string) (*libraries, error) {
	l := &libraries{modules: map[string]*goja.Program{}}
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
			return nil, fmt.Errorf("%w: module %s missing", ErrRuntimeUnavailable, id)
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

// runBundle smoke-runs a built bundle in a fresh runtime. It returns the
// result and whether the run was stopped by a limit (the worker should then
// be recycled).
func runBundle(lib *libraries, b *Bundle, lim runLimits) (res *Result, hitLimit bool) {
	r := &run{
		vm:       goja.New(),
		lib:      lib,
		bundle:   b,
		modules:  map[string]goja.Value{},
		rejected: map[*goja.Promise]int{},
		now:      virtualEpochMillis,
		timers:   map[int64]*timer{},
	}
	r.vm.SetParserOptions(parser.WithSourceMapLoader(refuseSourceMap))
	r.vm.SetMaxCallStackSize(lim.MaxCallStack)
	stop := r.guard(lim)
	res = r.smoke(lim)
	stop()
	res.Console = r.console
	res.ConsoleDropped = r.consoleDropped
	res.JSBytes = len(b.Code)
	res.CSSBytes = len(b.CSS)
	res.Warnings = b.Warnings
	return res, res.Phase == PhaseTimeout || res.Phase == PhaseMemory
}

type interruptReason string

const (
	interruptTimeout interruptReason = "timeout"
	interruptMemory  interruptReason = "memory"
)

// guard interrupts the runtime when the wall-clock limit passes or the heap
// grows past the limit. The returned func stops the watcher and waits for it.
func (r *run) guard(lim runLimits) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		deadline := time.NewTimer(lim.Timeout)
		defer deadline.Stop()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			select {
			case <-done:
				return
			case <-deadline.C:
				r.vm.Interrupt(interruptTimeout)
				return
			case <-tick.C:
				if lim.HeapLimit == 0 {
					continue
				}
				metrics.Read(sample)
				if sample[0].Value.Kind() == metrics.KindUint64 && sample[0].Value.Uint64() > lim.HeapLimit {
					r.vm.Interrupt(interruptMemory)
					return
				}
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// run is the state of one smoke-run; it is used by one goroutine only.
type run struct {
	vm      *goja.Runtime
	lib     *libraries
	bundle  *Bundle
	modules map[string]goja.Value
	smap    *sourcemap.Consumer

	console        []string
	consoleDropped int

	rejected map[*goja.Promise]int // unhandled rejections, by order seen
	rejectN  int

	now       int64 // virtual clock, ms since the epoch
	timers    map[int64]*timer
	queue     timerHeap
	nextTimer int64
	seq       uint64
	inTimer   bool
	callbacks int

	helpers *goja.Object // functions from the prelude
}

type timer struct {
	id       int64
	due      int64
	seq      uint64
	fn       goja.Callable
	args     []goja.Value
	interval int64 // 0 for a one-shot timer
	index    int
}

type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *timerHeap) Push(x any)   { t := x.(*timer); t.index = len(*h); *h = append(*h, t) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	t.index = -1
	return t
}
func (h timerHeap) peek() *timer   { return h[0] }
func (h timerHeap) empty() bool    { return len(h) == 0 }
func (r *run) clearTimer(id int64) { r.removeTimer(r.timers[id]) }

func (r *run) removeTimer(t *timer) {
	if t == nil {
		return
	}
	delete(r.timers, t.id)
	if t.index >= 0 {
		heap.Remove(&r.queue, t.index)
	}
}

// smoke runs the phases in order and returns at the first failure.
func (r *run) smoke(lim runLimits) *Result {
	res := &Result{}
	fail := func(phase Phase, err error) *Result {
		r.failure(res, phase, err)
		return res
	}
	// Load: the environment, the libraries, then the snippet module.
	if err := r.install(); err != nil {
		return fail(PhaseLoad, err)
	}
	react, err := r.require("react")
	if err != nil {
		return fail(PhaseLoad, err)
	}
	tr, err := r.require("react-test-renderer")
	if err != nil {
		return fail(PhaseLoad, err)
	}
	exports, err := r.loadSnippet()
	if err != nil {
		return fail(PhaseLoad, err)
	}
	if err := r.checkRejections(); err != nil {
		return fail(PhaseLoad, err)
	}
	app, err := r.defaultExport(exports)
	if err != nil {
		return fail(PhaseLoad, err)
	}

	// Render synchronously (the test renderer's legacy root); act() is not
	// available in React's production builds, so effects are flushed by
	// running the scheduler's timers on the virtual clock.
	root, err := r.call(r.helpers.Get("render"), react, tr, app)
	if err != nil {
		return fail(PhaseRender, err)
	}
	if err := r.checkRejections(); err != nil {
		return fail(PhaseRender, err)
	}

	// Effects and timers.
	if err := r.advance(0); err != nil {
		return fail(PhaseEffects, err)
	}
	if err := r.advance(lim.Advance.Milliseconds()); err != nil {
		return fail(PhaseEffects, err)
	}
	if err := r.checkRejections(); err != nil {
		return fail(PhaseEffects, err)
	}
	tree, err := r.call(r.helpers.Get("toJSON"), root)
	if err != nil {
		return fail(PhaseEffects, err)
	}
	res.Render = summarize(r.vm, tree)

	// Events: every onClick once, with the timers run after each.
	handlers, err := r.call(r.helpers.Get("clickHandlers"), root)
	if err != nil {
		return fail(PhaseEvents, err)
	}
	hs, _ := handlers.(*goja.Object)
	n := 0
	if hs != nil {
		n = int(hs.Get("length").ToInteger())
	}
	for i := 0; i < n; i++ {
		if _, err := r.call(r.helpers.Get("click"), hs.Get(strconv.Itoa(i))); err != nil {
			return fail(PhaseEvents, err)
		}
		res.Clicks++
		if err := r.advance(0); err != nil {
			return fail(PhaseEvents, err)
		}
	}
	if err := r.advance(lim.Advance.Milliseconds()); err != nil {
		return fail(PhaseEvents, err)
	}
	if err := r.checkRejections(); err != nil {
		return fail(PhaseEvents, err)
	}
	// Unmounting runs effect cleanups.
	if _, err := r.call(r.helpers.Get("unmount"), root); err != nil {
		return fail(PhaseEffects, err)
	}
	if err := r.advance(0); err != nil {
		return fail(PhaseEffects, err)
	}
	if err := r.checkRejections(); err != nil {
		return fail(PhaseEffects, err)
	}
	res.OK = true
	res.Phase = PhaseDone
	return res
}

func (r *run) call(fn goja.Value, args ...goja.Value) (goja.Value, error) {
	f, ok := goja.AssertFunction(fn)
	if !ok {
		return nil, errors.New("sandbox: internal helper missing")
	}
	return f(goja.Undefined(), args...)
}

// install sets up the globals a snippet sees: console, timers on the virtual
// clock, queueMicrotask, a fetch that never settles, and a virtual Date.
func (r *run) install() error {
	vm := r.vm
	vm.SetPromiseRejectionTracker(func(p *goja.Promise, op goja.PromiseRejectionOperation) {
		if op == goja.PromiseRejectionReject {
			r.rejectN++
			r.rejected[p] = r.rejectN
		} else {
			delete(r.rejected, p)
		}
	})
	host := vm.NewObject()
	set := func(name string, fn func(goja.FunctionCall) goja.Value) {
		_ = host.Set(name, fn)
	}
	set("now", func(goja.FunctionCall) goja.Value { return vm.ToValue(r.now) })
	set("log", func(c goja.FunctionCall) goja.Value {
		r.log(c.Argument(0).String(), c.Arguments[1:])
		return goja.Undefined()
	})
	set("setTimer", func(c goja.FunctionCall) goja.Value {
		return vm.ToValue(r.setTimer(c.Argument(0), c.Argument(1), c.Argument(2).ToBoolean(), c.Arguments[3:]))
	})
	set("clearTimer", func(c goja.FunctionCall) goja.Value {
		if id := c.Argument(0).ToInteger(); id > 0 {
			r.clearTimer(id)
		}
		return goja.Undefined()
	})
	fn, err := vm.RunProgram(r.lib.prelude)
	if err != nil {
		return err
	}
	helpers, err := r.call(fn, host)
	if err != nil {
		return err
	}
	r.helpers = helpers.ToObject(vm)
	return nil
}

func (r *run) setTimer(fnv, delay goja.Value, repeat bool, args []goja.Value) int64 {
	fn, ok := goja.AssertFunction(fnv)
	if !ok {
		panic(r.vm.NewTypeError("setTimeout/setInterval: the callback must be a function (strings are not evaluated)"))
	}
	d := delay.ToFloat()
	if math.IsNaN(d) || d < 0 {
		d = 0
	}
	d = math.Min(d, math.MaxInt32)
	ms := int64(d)
	// Timers set from a timer callback wait at least 1 ms, so advancing the
	// clock always makes progress (browsers clamp nested timers too).
	if r.inTimer && ms < 1 || repeat && ms < 1 {
		ms = 1
	}
	r.nextTimer++
	r.seq++
	t := &timer{id: r.nextTimer, due: r.now + ms, seq: r.seq, fn: fn, args: append([]goja.Value(nil), args...)}
	if repeat {
		t.interval = ms
	}
	r.timers[t.id] = t
	heap.Push(&r.queue, t)
	return t.id
}

var errTimerStorm = errors.New("more than 100000 timer callbacks: the snippet schedules timers without end")

// advance runs every timer due within ms of virtual time, in order, jumping
// the clock from one to the next; Promise jobs run after each callback.
func (r *run) advance(ms int64) error {
	target := r.now + ms
	for !r.queue.empty() && r.queue.peek().due <= target {
		t := r.queue.peek()
		r.now = t.due
		if t.interval > 0 {
			r.seq++
			t.due += t.interval
			t.seq = r.seq
			heap.Fix(&r.queue, t.index)
		} else {
			r.removeTimer(t)
		}
		r.callbacks++
		if r.callbacks > maxTimerCallbacks {
			return errTimerStorm
		}
		r.inTimer = true
		_, err := t.fn(goja.Undefined(), t.args...)
		r.inTimer = false
		if err != nil {
			return err
		}
	}
	r.now = target
	return nil
}

func (r *run) log(level string, args []goja.Value) {
	if len(r.console) >= maxConsoleLines {
		r.consoleDropped++
		return
	}
	var b strings.Builder
	b.WriteString(level)
	b.WriteString(":")
	for _, a := range args {
		b.WriteByte(' ')
		b.WriteString(r.formatArg(a))
		if b.Len() > maxConsoleLineLen {
			break
		}
	}
	r.console = append(r.console, truncate(b.String(), maxConsoleLineLen))
}

// formatArg renders a console argument; the prelude already turned objects
// into strings (JSON where possible).
func (r *run) formatArg(v goja.Value) string {
	if v == nil {
		return "undefined"
	}
	if s, ok := v.Export().(string); ok {
		return truncate(s, maxConsoleLineLen)
	}
	if _, isObj := v.(*goja.Object); isObj {
		return "[object]"
	}
	return v.String()
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

// loadSnippet compiles and runs the bundle; its require sees only
// AllowedModules.
func (r *run) loadSnippet() (goja.Value, error) {
	sm, err := sourcemap.Parse(bundleName+".map", r.bundle.SourceMap)
	if err != nil {
		return nil, fmt.Errorf("source map: %w", err)
	}
	r.smap = sm
	ast, err := goja.Parse(bundleName, moduleHead+r.bundle.Code+"\n})", parser.WithSourceMapLoader(refuseSourceMap))
	if err != nil {
		return nil, err
	}
	prog, err := goja.CompileAST(ast, false)
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

func (r *run) checkRejections() error {
	if len(r.rejected) == 0 {
		return nil
	}
	var first *goja.Promise
	best := math.MaxInt
	for p, n := range r.rejected {
		if n < best {
			first, best = p, n
		}
	}
	return &rejectionError{reason: first.Result(), count: len(r.rejected)}
}

type rejectionError struct {
	reason goja.Value
	count  int
}

func (e *rejectionError) Error() string { return "unhandled promise rejection" }

// failure fills res from err.
func (r *run) failure(res *Result, phase Phase, err error) {
	res.OK = false
	res.Phase = phase
	info := &ErrorInfo{}
	res.Error = info
	var ie *goja.InterruptedError
	var so *goja.StackOverflowError
	var rej *rejectionError
	var ex *goja.Exception
	switch {
	case errors.As(err, &ie):
		switch ie.Value() {
		case interruptMemory:
			res.Phase = PhaseMemory
			info.Message = "the snippet allocated more memory than the sandbox allows"
		default:
			res.Phase = PhaseTimeout
			info.Message = "the snippet ran past the sandbox's time limit (an endless loop?)"
		}
		r.locateFrames(info, ie.Stack())
	case errors.As(err, &so):
		info.Message = "RangeError: Maximum call stack size exceeded (endless recursion?)"
		r.locateFrames(info, so.Stack())
	case errors.As(err, &rej):
		info.Message = "unhandled promise rejection: " + r.describe(rej.reason)
		if rej.count > 1 {
			info.Message += fmt.Sprintf(" (and %d more)", rej.count-1)
		}
		r.locateValue(info, rej.reason, nil)
	case errors.Is(err, errTimerStorm):
		res.Phase = PhaseTimeout
		info.Message = err.Error()
	case errors.As(err, &ex):
		info.Message = r.describe(ex.Value())
		r.locateValue(info, ex.Value(), ex.Stack())
	default:
		info.Message = err.Error()
	}
	info.Note = environmentNote(info.Message)
}

// describe turns a thrown value into a message without running snippet
// code where it can avoid it: Errors give name and message, primitives
// their value.
func (r *run) describe(v goja.Value) string {
	if v == nil {
		return "undefined"
	}
	if o, ok := v.(*goja.Object); ok {
		msg := o.Get("message")
		name := o.Get("name")
		if msg != nil && !goja.IsUndefined(msg) {
			s := truncate(exportString(msg), 500)
			if n := exportString(name); n != "" {
				s = n + ": " + s
			}
			return s
		}
		return "a non-Error object was thrown"
	}
	return truncate(v.String(), 500)
}

func exportString(v goja.Value) string {
	if v == nil {
		return ""
	}
	s, _ := v.Export().(string)
	return s
}

// frameRE matches a position in goja's stack text: "name (file:line:col(pc))"
// or "file:line:col(pc)".
var frameRE = regexp.MustCompile(`at (?:(\S+) \()?([^\s()]+):(\d+):(\d+)`)

// locateValue finds the snippet position of a thrown value: its own stack
// property first (React catches and rethrows, so the exception's stack is
// React's), then the exception's frames.
func (r *run) locateValue(info *ErrorInfo, v goja.Value, frames []goja.StackFrame) {
	if o, ok := v.(*goja.Object); ok {
		if st := exportString(o.Get("stack")); st != "" {
			var lines []string
			for _, m := range frameRE.FindAllStringSubmatch(st, maxStackFrames*4) {
				line, _ := strconv.Atoi(m[3])
				col, _ := strconv.Atoi(m[4])
				lines = append(lines, r.frameLine(info, m[1], m[2], line, col))
				if len(lines) == maxStackFrames {
					break
				}
			}
			if len(lines) > 0 {
				info.Stack = strings.Join(lines, "\n")
				return
			}
		}
	}
	r.locateFrames(info, frames)
}

func (r *run) locateFrames(info *ErrorInfo, frames []goja.StackFrame) {
	var lines []string
	for i := range frames {
		f := &frames[i]
		pos := f.Position()
		if pos.Filename == "" {
			continue
		}
		lines = append(lines, r.frameLine(info, f.FuncName(), pos.Filename, pos.Line, pos.Column))
		if len(lines) == maxStackFrames {
			break
		}
	}
	info.Stack = strings.Join(lines, "\n")
}

// frameLine maps one frame to the snippet's sources when it is in the
// bundle, sets info's location from the first snippet frame, and formats
// the frame.
func (r *run) frameLine(info *ErrorInfo, fn, file string, line, col int) string {
	if file == bundleName {
		if f, l, c, ok := r.mapPosition(line, col); ok {
			file, line, col = f, l, c
			if info.File == "" {
				info.File, info.Line, info.Column = f, l, c
			}
		}
	}
	if fn == "" {
		return fmt.Sprintf("at %s:%d:%d", file, line, col)
	}
	return fmt.Sprintf("at %s (%s:%d:%d)", fn, file, line, col)
}

// mapPosition maps a 1-based line and column in the bundle (as goja reports
// them, with the module wrapper on line 1) to a snippet file position.
func (r *run) mapPosition(line, col int) (file string, l, c int, ok bool) {
	if r.smap == nil {
		return "", 0, 0, false
	}
	if line == 1 {
		col -= len(moduleHead)
	}
	src, _, sl, sc, ok := r.smap.Source(line, col-1)
	if !ok || !strings.HasPrefix(src, snippetNS+":") {
		return "", 0, 0, false
	}
	return strings.TrimPrefix(src, snippetNS+":"), sl, sc + 1, true
}

// environmentNote explains errors caused by what goja or the sandbox lack.
func environmentNote(msg string) string {
	gaps := []struct{ name, note string }{
		{"window", "the sandbox has no DOM: render with React instead of touching window"},
		{"document", "the sandbox has no DOM: render with React instead of touching document"},
		{"localStorage", "the sandbox has no localStorage: use storage from " + SDKModule},
		{"sessionStorage", "the sandbox has no sessionStorage: use storage from " + SDKModule},
		{"navigator", "the sandbox has no navigator"},
		{"XMLHttpRequest", "the sandbox has no network"},
		{"WebSocket", "the sandbox has no network"},
		{"process", "a snippet has no process object"},
		{"require", "a snippet has no require: use import"},
		{"Intl", "the sandbox's JavaScript engine (goja) lacks Intl; this is a gap of the smoke-run, not necessarily a bug in the snippet"},
		{"structuredClone", "the sandbox's JavaScript engine (goja) lacks structuredClone; this is a gap of the smoke-run, not necessarily a bug in the snippet"},
		{"requestAnimationFrame", "the sandbox has no requestAnimationFrame; use setTimeout"},
		{"performance", "the sandbox has no performance clock"},
	}
	for _, g := range gaps {
		if strings.Contains(msg, "ReferenceError: "+g.name+" is not defined") {
			return g.note
		}
	}
	if strings.Contains(msg, "Object.groupBy") || strings.Contains(msg, "groupBy is not a function") {
		return "the sandbox's JavaScript engine (goja) lacks Object.groupBy; this is a gap of the smoke-run, not necessarily a bug in the snippet"
	}
	return ""
}

// summarize counts host elements and text in the test renderer's JSON tree,
// reading only plain data properties.
func summarize(vm *goja.Runtime, tree goja.Value) *RenderSummary {
	s := &RenderSummary{Elements: map[string]int{}}
	var walk func(v goja.Value, depth int)
	walk = func(v goja.Value, depth int) {
		if v == nil || goja.IsNull(v) || goja.IsUndefined(v) || depth > 200 {
			return
		}
		if str, ok := v.Export().(string); ok {
			s.TextLength += utf8.RuneCountInString(str)
			return
		}
		o, ok := v.(*goja.Object)
		if !ok {
			return
		}
		if o.ClassName() == "Array" {
			n := int(o.Get("length").ToInteger())
			for i := 0; i < n && i < 10_000; i++ {
				walk(o.Get(strconv.Itoa(i)), depth+1)
			}
			return
		}
		if t := exportString(o.Get("type")); t != "" {
			s.Elements[t]++
			s.ElementCount++
		}
		walk(o.Get("children"), depth+1)
	}
	walk(tree, 0)
	return s
}
