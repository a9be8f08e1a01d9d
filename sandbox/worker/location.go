package worker

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/dop251/goja"
	"github.com/go-sourcemap/sourcemap"

	"github.com/roomrelay/roomrelay/sandbox"
)

// Error locations: goja reports positions in the bundle; the bundle's
// source map turns them into snippet file:line:column. The map is made and
// parsed only when a failure needs it, so a passing run never pays for it.

const (
	maxStackFrames = 12
	bundleName     = "bundle.js"
)

// frameRE matches a position in goja's stack text: "name (file:line:col(pc))"
// or "file:line:col(pc)".
var frameRE = regexp.MustCompile(`at (?:(\S+) \()?([^\s()]+):(\d+):(\d+)`)

// locateValue finds the snippet position of a thrown value: its own stack
// property first (React catches and rethrows, so the exception's stack is
// React's), then the exception's frames.
func (r *run) locateValue(info *sandbox.ErrorInfo, v goja.Value, frames []goja.StackFrame) {
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

func (r *run) locateFrames(info *sandbox.ErrorInfo, frames []goja.StackFrame) {
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
func (r *run) frameLine(info *sandbox.ErrorInfo, fn, file string, line, col int) string {
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

// sourceMap makes and parses the bundle's source map on first use; without
// one, positions stay in the bundle.
func (r *run) sourceMap() *sourcemap.Consumer {
	if !r.smapParsed && r.bundle != nil {
		r.smapParsed = true
		if m, err := r.bundle.SourceMap(); err == nil {
			r.smap, _ = sourcemap.Parse(bundleName+".map", m)
		}
	}
	return r.smap
}

// mapPosition maps a 1-based line and column in the bundle (as goja reports
// them, with the module wrapper on line 1) to a snippet file position.
func (r *run) mapPosition(line, col int) (file string, l, c int, ok bool) {
	sm := r.sourceMap()
	if sm == nil {
		return "", 0, 0, false
	}
	if line == 1 {
		col -= len(moduleHead)
	}
	src, _, sl, sc, ok := sm.Source(line, col-1)
	if !ok || !strings.HasPrefix(src, snippetNS+":") {
		return "", 0, 0, false
	}
	return strings.TrimPrefix(src, snippetNS+":"), sl, sc + 1, true
}
