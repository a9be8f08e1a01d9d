package sandbox

import (
	"errors"
	"strings"

	"github.com/roomrelay/roomrelay/relay"
)

// deadWorkerResult explains a run whose worker had to be killed or died.
func (p *Pool) deadWorkerResult(w *worker, err error) *Result {
	tail := w.stderr.String()
	p.mu.Lock()
	if errors.Is(err, errKilled) {
		p.stats.Killed++
	} else {
		p.stats.Died++
	}
	p.mu.Unlock()
	p.log.Warn("sandbox worker lost", "pid", w.pid, "err", err, "stderr", relay.Clip(tail, 2000))
	fault := ""
	if w.capped {
		fault = runtimeFault(tail)
	}
	switch {
	case w.mc.Exceeded():
		return failResult(PhaseMemory, "the snippet exhausted the sandbox's memory limit (%d MiB): the worker's memory footprint reached it and the worker was stopped", p.cfg.MemoryLimitBytes>>20)
	// At the RLIMIT_DATA cap the Go runtime fails to map memory, or
	// glibc fails to map a new thread's stack.
	case strings.Contains(tail, "out of memory") || strings.Contains(tail, "cannot allocate memory") ||
		strings.Contains(tail, "pthread_create failed"):
		return failResult(PhaseMemory, "the snippet exhausted the sandbox's memory limit (%d MiB); the worker was stopped", p.cfg.MemoryLimitBytes>>20)
	case fault != "":
		return failResult(PhaseMemory, "the snippet exhausted the sandbox's memory limit (%d MiB); the worker's Go runtime faulted in %s when it could not map more memory, and was stopped", p.cfg.MemoryLimitBytes>>20, fault)
	case errors.Is(err, errKilled):
		return failResult(PhaseTimeout, "the snippet ran past the %s limit inside a built-in that cannot be interrupted (a huge array fill, string repeat or backtracking regex?); the worker was killed", p.cfg.Timeout)
	case strings.Contains(tail, "stack overflow") || strings.Contains(tail, "stack exceeds"):
		return failResult(PhaseCrash, "the sandbox worker overflowed its stack")
	default:
		msg := "the sandbox worker died"
		if w.waitErr != nil {
			msg += ": " + w.waitErr.Error()
		}
		if line := reasonLine(tail); line != "" {
			msg += " (" + relay.Clip(line, 200) + ")"
		}
		return failResult(PhaseCrash, "%s", msg)
	}
}

// reasonLine is the line of a dead worker's stderr that says why: the
// first "fatal error" or "panic" line, else the first line.
func reasonLine(s string) string {
	first := ""
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "fatal error") || strings.HasPrefix(l, "panic") {
			return l
		}
		if first == "" {
			first = l
		}
	}
	return first
}

// runtimeFault returns the Go runtime function a worker faulted in, or ""
// when its stderr shows no fault inside the runtime.
//
// At the RLIMIT_DATA cap the Go runtime usually says "out of memory", but
// not always: Go 1.26's garbage collector does not check the mapping it
// makes for a new span queue (runtime.newSpanSPMC) and dereferences nil
// when the mapping fails. The worker then dies with exit status 2 and
//
//	SIGSEGV: segmentation violation
//	PC=0x439cbd m=0 sigcode=1 addr=0x0
//
//	goroutine 0 gp=0x17547c0 m=0 mp=0x17559a0 [idle]:
//	runtime.(*spanQueue).tryDrain(...)
//
// (a fault on a goroutine's own stack reads "fatal error: unexpected
// signal during runtime execution" and a "runtime stack:"). A fault in any
// other code is a panic ("panic: runtime error: ..."), which this does not
// match. The worker runs no cgo and no unsafe code of its own, so under the
// cap a fault inside the runtime is the cap reached.
func runtimeFault(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	first := lines[0]
	if !isSignalLine(first) && !strings.HasPrefix(first, "fatal error: unexpected signal during runtime execution") {
		return ""
	}
	inStack := false
	for _, l := range lines[1:] {
		switch {
		case strings.HasPrefix(l, "goroutine ") || l == "runtime stack:":
			inStack = true
		case !inStack || l == "" || strings.HasPrefix(l, "\t"):
		default:
			fn := l
			if i := strings.LastIndexByte(fn, '('); i > 0 {
				fn = fn[:i]
			}
			switch fn {
			case "runtime.throw", "runtime.fatalthrow", "runtime.sigpanic", "runtime.panicmem":
				continue // the report's own frames
			}
			if strings.HasPrefix(fn, "runtime.") {
				return fn
			}
			return ""
		}
	}
	return ""
}

// isSignalLine matches the runtime's "SIGSEGV: segmentation violation".
func isSignalLine(l string) bool {
	name, _, ok := strings.Cut(l, ": ")
	if !ok || len(name) < 4 || !strings.HasPrefix(name, "SIG") {
		return false
	}
	for _, c := range name[3:] {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}
