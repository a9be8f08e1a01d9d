package worker

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/dop251/goja"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/sandbox"
)

// How a failed step becomes the result's ErrorInfo: a message that runs no
// snippet code where it can avoid it, the snippet location (location.go)
// and a note for what the sandbox lacks.

type interruptReason string

const (
	interruptTimeout interruptReason = "timeout"
	interruptMemory  interruptReason = "memory"
)

// checkRejections fails with the first promise rejection nobody handled.
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
func (r *run) failure(res *sandbox.Result, phase sandbox.Phase, err error) {
	res.OK = false
	res.Phase = phase
	info := &sandbox.ErrorInfo{}
	res.Error = info
	var ie *goja.InterruptedError
	var so *goja.StackOverflowError
	var rej *rejectionError
	var ex *goja.Exception
	switch {
	case errors.As(err, &ie):
		switch ie.Value() {
		case interruptMemory:
			res.Phase = sandbox.PhaseMemory
			info.Message = "the snippet allocated more memory than the sandbox allows"
		default:
			res.Phase = sandbox.PhaseTimeout
			info.Message = "the snippet ran past the sandbox's time limit (an endless loop?)"
		}
		r.locateFrames(info, ie.Stack())
	case errors.As(err, &so):
		info.Message = "RangeError: Maximum call stack size exceeded (endless recursion?)"
		r.locateFrames(info, so.Stack())
	case errors.As(err, &rej):
		info.Message = "unhandled promise rejection: " + describe(rej.reason)
		if rej.count > 1 {
			info.Message += fmt.Sprintf(" (and %d more)", rej.count-1)
		}
		r.locateValue(info, rej.reason, nil)
	case errors.Is(err, errTimerStorm):
		res.Phase = sandbox.PhaseTimeout
		info.Message = err.Error()
	case errors.As(err, &ex):
		info.Message = describe(ex.Value())
		r.locateValue(info, ex.Value(), ex.Stack())
	default:
		info.Message = err.Error()
	}
	info.Note = environmentNote(info.Message)
}

// describe turns a thrown value into a message without running snippet
// code where it can avoid it: Errors give name and message, primitives
// their value.
func describe(v goja.Value) string {
	if v == nil {
		return "undefined"
	}
	if o, ok := v.(*goja.Object); ok {
		msg := o.Get("message")
		name := o.Get("name")
		if msg != nil && !goja.IsUndefined(msg) {
			s := relay.Clip(exportString(msg), 500)
			if n := exportString(name); n != "" {
				s = n + ": " + s
			}
			return s
		}
		return "a non-Error object was thrown"
	}
	return relay.Clip(v.String(), 500)
}

// exportString is v when it is a string, "" otherwise (without exporting
// an object).
func exportString(v goja.Value) string {
	if s, ok := v.(goja.String); ok {
		return s.String()
	}
	return ""
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
