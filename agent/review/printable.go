package review

import (
	"fmt"
	"strings"
)

// Printable makes text safe to show a reviewer without changing what can be
// read: control characters other than newline and tab (terminal escape
// sequences, carriage returns that overwrite a line) and Unicode bidi
// controls (which reorder how code reads, "Trojan Source") are shown as
// visible ⟨U+XXXX⟩ markers. The approval still binds to the stored bytes.
func Printable(s string) string {
	if !strings.ContainsFunc(s, hidden) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if hidden(r) {
			fmt.Fprintf(&b, "⟨U+%04X⟩", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func hidden(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return false
}

// LineCount counts lines as an editor shows them: a final newline does not
// start another line.
func LineCount(s string) int {
	n := strings.Count(s, "\n")
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}
