package worker

import (
	"errors"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/dop251/goja"
	"github.com/dop251/goja/parser"
	"github.com/go-sourcemap/sourcemap"

	"github.com/roomrelay/roomrelay/sandbox"
)

// Limits of one smoke-run inside a worker.
type runLimits struct {
	Timeout time.Duration
	// HeapLimit is the heap size (bytes of live objects) at which the run is
	// interrupted with sandbox.PhaseMemory.
	HeapLimit uint64
	// MaxCallStack bounds JS call depth; 5000 is plenty for React.
	MaxCallStack int
	// Advance is how far the virtual clock runs after render and after
	// the clicks.
	Advance time.Duration
}

// run is the state of one smoke-run: one fresh goja runtime, used by one
// goroutine only and for one snippet only.
type run struct {
	vm      *goja.Runtime
	lib     *libraries
	lim     runLimits
	bundle  *Bundle
	modules map[string]goja.Value

	// react and renderer (the test renderer's exports) are loaded by
	// prepare before any snippet code runs; prepErr is prepare's failure.
	react, renderer goja.Value
	prepErr         error

	smap       *sourcemap.Consumer
	smapParsed bool

	console consoleSink

	rejected map[*goja.Promise]int // unhandled rejections, by order seen
	rejectN  int

	clock clock

	helpers *goja.Object // functions from the prelude
}

// newRun creates a fresh runtime and loads what every snippet needs (the
// prelude's globals, React, the test renderer). It runs no snippet code, so
// a worker can call it ahead of the request it will serve.
func newRun(lib *libraries, lim runLimits) *run {
	r := &run{
		vm:       goja.New(),
		lib:      lib,
		lim:      lim,
		modules:  map[string]goja.Value{},
		rejected: map[*goja.Promise]int{},
		clock:    newClock(),
	}
	r.vm.SetParserOptions(parser.WithSourceMapLoader(refuseSourceMap))
	r.vm.SetMaxCallStackSize(lim.MaxCallStack)
	r.prepErr = r.prepare()
	return r
}

func (r *run) prepare() error {
	if err := r.install(); err != nil {
		return err
	}
	var err error
	if r.react, err = r.require("react"); err != nil {
		return err
	}
	// Every snippet with JSX needs the JSX runtime: loading it here takes
	// it off the request's path.
	if _, err = r.require("react/jsx-runtime"); err != nil {
		return err
	}
	r.renderer, err = r.require("react-test-renderer")
	return err
}

// runBundle smoke-runs a built bundle in a fresh runtime. It returns the
// result and whether the run was stopped by a limit (the worker should then
// be recycled).
func runBundle(lib *libraries, b *Bundle, lim runLimits) (res *sandbox.Result, hitLimit bool) {
	return newRun(lib, lim).exec(b)
}

// exec smoke-runs b; it is the runtime's one and only snippet.
func (r *run) exec(b *Bundle) (res *sandbox.Result, hitLimit bool) {
	if r.bundle != nil {
		panic("sandbox: a runtime runs one snippet only")
	}
	r.bundle = b
	stop := r.guard()
	res = r.smoke()
	stop()
	res.Console = r.console.lines
	res.ConsoleDropped = r.console.dropped
	res.JSBytes = len(b.Code)
	res.CSSBytes = len(b.CSS)
	res.Warnings = b.Warnings
	return res, res.Phase == sandbox.PhaseTimeout || res.Phase == sandbox.PhaseMemory
}

// guard interrupts the runtime when the wall-clock limit passes or the heap
// grows past the limit. The returned func stops the watcher and waits for it.
func (r *run) guard() func() {
	lim := r.lim
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
				if heapObjects(sample) <= lim.HeapLimit {
					continue
				}
				// Past the limit counting garbage, which the worker's GC
				// leaves longer than by default: only what survives a
				// collection counts. (Waiting for the GC's own next cycle
				// instead lets garbage grow the process to its data cap.)
				runtime.GC()
				if heapObjects(sample) > lim.HeapLimit {
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

// heapObjects is the heap's size in objects, live or not yet freed.
func heapObjects(sample []metrics.Sample) uint64 {
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// step is one step of a smoke-run and the phase its failure is reported in.
type step struct {
	phase sandbox.Phase
	do    func() error
}

// smoke runs the steps in order and stops at the first failure.
func (r *run) smoke() *sandbox.Result {
	res := &sandbox.Result{}
	for _, s := range r.steps(res) {
		if err := s.do(); err != nil {
			r.failure(res, s.phase, err)
			return res
		}
	}
	res.OK = true
	res.Phase = sandbox.PhaseDone
	return res
}

// steps are the smoke-run: load the snippet, render it, run effects and
// timers, click every onClick once, unmount. Each step records in res what
// it learns.
func (r *run) steps(res *sandbox.Result) []step {
	var exports, app, root goja.Value
	var handlers []goja.Value
	var err error
	advance := func(ms int64) func() error {
		return func() error { return r.clock.advance(ms) }
	}
	settle := r.lim.Advance.Milliseconds()
	return []step{
		// Load: the environment and the libraries (prepared ahead), then
		// the snippet module.
		{sandbox.PhaseLoad, func() error { return r.prepErr }},
		{sandbox.PhaseLoad, func() (err error) { exports, err = r.loadSnippet(); return err }},
		{sandbox.PhaseLoad, r.checkRejections},
		{sandbox.PhaseLoad, func() (err error) { app, err = r.defaultExport(exports); return err }},

		// Render synchronously (the test renderer's legacy root); act() is
		// not available in React's production builds, so effects are
		// flushed by running the scheduler's timers on the virtual clock.
		{sandbox.PhaseRender, func() (err error) { root, err = r.helper("render", r.react, r.renderer, app); return err }},
		{sandbox.PhaseRender, r.checkRejections},

		// Effects and timers, then the summary of what they rendered.
		{sandbox.PhaseEffects, advance(0)},
		{sandbox.PhaseEffects, advance(settle)},
		{sandbox.PhaseEffects, r.checkRejections},
		{sandbox.PhaseEffects, func() error {
			res.Render, handlers, err = r.summary(root)
			return err
		}},

		// Events: every onClick in that tree once, with the timers run
		// after each.
		{sandbox.PhaseEvents, func() error { return r.clickAll(handlers, res) }},
		{sandbox.PhaseEvents, advance(settle)},
		{sandbox.PhaseEvents, r.checkRejections},

		// Unmounting runs effect cleanups.
		{sandbox.PhaseEffects, func() error { _, err := r.helper("unmount", root); return err }},
		{sandbox.PhaseEffects, advance(0)},
		{sandbox.PhaseEffects, r.checkRejections},
	}
}

// summary summarizes what root rendered: from the test renderer's host
// tree when the prelude finds it, else from toJSON's copy of it.
func (r *run) summary(root goja.Value) (*sandbox.RenderSummary, []goja.Value, error) {
	host, err := r.helper("hostChildren", root)
	if err != nil {
		return nil, nil, err
	}
	var s *sandbox.RenderSummary
	var h []goja.Value
	if _, ok := host.(*goja.Object); ok {
		err = r.protect(func() { s, h = summarizeHost(host) })
		return s, h, err
	}
	tree, err := r.helper("toJSON", root)
	if err != nil {
		return nil, nil, err
	}
	err = r.protect(func() { s, h = summarize(tree) })
	return s, h, err
}

// protect runs Go code that reads the runtime's objects (a read may run a
// getter the snippet defined, on Object.prototype for one) and returns what
// that JavaScript threw, or its interruption by a limit, as the error, so
// the run fails in its phase instead of killing the worker.
func (r *run) protect(f func()) (err error) {
	defer func() {
		if x := recover(); x != nil {
			ie, ok := x.(*goja.InterruptedError)
			if !ok {
				panic(x)
			}
			err = ie
		}
	}()
	if ex := r.vm.Try(f); ex != nil {
		return ex
	}
	return nil
}

// clickAll invokes the host elements' onClick handlers once each, in tree
// order, running the timers due right after each.
func (r *run) clickAll(handlers []goja.Value, res *sandbox.Result) error {
	for _, h := range handlers {
		if _, err := r.helper("click", r.renderer, h); err != nil {
			return err
		}
		res.Clicks++
		if err := r.clock.advance(0); err != nil {
			return err
		}
	}
	return nil
}

// helper calls one of the prelude's harness functions.
func (r *run) helper(name string, args ...goja.Value) (goja.Value, error) {
	return r.call(r.helpers.Get(name), args...)
}

func (r *run) call(fn goja.Value, args ...goja.Value) (goja.Value, error) {
	f, ok := goja.AssertFunction(fn)
	if !ok {
		return nil, errors.New("sandbox: internal helper missing")
	}
	return f(goja.Undefined(), args...)
}
