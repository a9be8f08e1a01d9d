package worker

import (
	"strings"

	"github.com/dop251/goja"

	"github.com/roomrelay/roomrelay/relay"
)

// The console a snippet writes to: the first lines are kept for the
// result, each cut to a bounded length; the rest are only counted.

const (
	maxConsoleLines   = 50
	maxConsoleLineLen = 300
)

type consoleSink struct {
	lines   []string
	dropped int
}

func (c *consoleSink) log(level string, args []goja.Value) {
	if len(c.lines) >= maxConsoleLines {
		c.dropped++
		return
	}
	var b strings.Builder
	b.WriteString(level)
	b.WriteString(":")
	for _, a := range args {
		b.WriteByte(' ')
		b.WriteString(formatArg(a))
		if b.Len() > maxConsoleLineLen {
			break
		}
	}
	c.lines = append(c.lines, relay.Clip(b.String(), maxConsoleLineLen))
}

// formatArg renders a console argument; the prelude already turned objects
// into strings (JSON where possible).
func formatArg(v goja.Value) string {
	if v == nil {
		return "undefined"
	}
	if s, ok := v.(goja.String); ok {
		return relay.Clip(s.String(), maxConsoleLineLen)
	}
	if _, isObj := v.(*goja.Object); isObj {
		return "[object]"
	}
	return v.String()
}
