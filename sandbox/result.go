package sandbox

import (
	"fmt"
	"strings"
)

// Phase names the step a smoke-run reached or failed in.
type Phase string

// Phases. PhaseDone means every step passed.
const (
	PhaseBuild              Phase = "build"
	PhaseLoad               Phase = "load"
	PhaseRender             Phase = "render"
	PhaseEffects            Phase = "effects"
	PhaseEvents             Phase = "events"
	PhaseTimeout            Phase = "timeout"
	PhaseMemory             Phase = "memory"
	PhaseCrash              Phase = "crash"
	PhaseRuntimeUnavailable Phase = "runtime_unavailable"
	PhaseDone               Phase = "done"
)

// Result is the outcome of one smoke-run.
type Result struct {
	OK         bool    `json:"ok"`
	Phase      Phase   `json:"phase"`
	DurationMS float64 `json:"duration_ms"`
	// Render summarises the rendered tree after effects and timers ran.
	Render *RenderSummary `json:"render,omitempty"`
	// Clicks is how many onClick handlers were invoked.
	Clicks int `json:"clicks"`
	// Console holds the first console lines ("level: text"), each truncated.
	Console        []string   `json:"console,omitempty"`
	ConsoleDropped int        `json:"console_dropped,omitempty"`
	Error          *ErrorInfo `json:"error,omitempty"`
	// BuildErrors lists every build error when Phase is PhaseBuild.
	BuildErrors []Message `json:"build_errors,omitempty"`
	Warnings    []Message `json:"warnings,omitempty"`
	JSBytes     int       `json:"js_bytes,omitempty"`
	CSSBytes    int       `json:"css_bytes,omitempty"`
}

// RenderSummary describes the rendered tree without its content.
type RenderSummary struct {
	// Elements counts host elements by type, e.g. {"div": 3, "button": 2}.
	Elements map[string]int `json:"elements"`
	// ElementCount is the total of Elements.
	ElementCount int `json:"element_count"`
	// TextLength is the number of characters of text in the tree.
	TextLength int `json:"text_length"`
}

// ErrorInfo is a failure, located in the snippet's sources when possible.
type ErrorInfo struct {
	Message string `json:"message"`
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	// Stack is the JavaScript stack with bundle positions mapped to the
	// snippet's files, truncated.
	Stack string `json:"stack,omitempty"`
	// Note explains failures caused by what the sandbox lacks (no DOM, no
	// Intl, ...) rather than by a bug in the snippet.
	Note string `json:"note,omitempty"`
}

// Location is "file:line:column", or "" when unknown.
func (e *ErrorInfo) Location() string {
	if e == nil || e.File == "" {
		return ""
	}
	return fmt.Sprintf("%s:%d:%d", e.File, e.Line, e.Column)
}

// Summary is a one-line description of the result.
func (r *Result) Summary() string {
	if r.OK {
		s := fmt.Sprintf("ok in %.1f ms", r.DurationMS)
		if r.Render != nil {
			s += fmt.Sprintf(": %d elements, %d characters of text, %d clicks", r.Render.ElementCount, r.Render.TextLength, r.Clicks)
		}
		return s
	}
	var b strings.Builder
	fmt.Fprintf(&b, "failed in phase %s", r.Phase)
	if r.Error != nil {
		if loc := r.Error.Location(); loc != "" {
			fmt.Fprintf(&b, " at %s", loc)
		}
		fmt.Fprintf(&b, ": %s", r.Error.Message)
	}
	return b.String()
}

func failResult(phase Phase, format string, args ...any) *Result {
	return &Result{Phase: phase, Error: &ErrorInfo{Message: fmt.Sprintf(format, args...)}}
}
