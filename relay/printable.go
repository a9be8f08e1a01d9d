package relay

import (
	"fmt"
	"strings"
)

// Text that came over the network (a hub's HTTP reason phrase, close
// reason or error message; a device-reported name) may carry terminal
// escape sequences, carriage returns that overwrite a line, bidi controls
// that reorder it and invisible characters. Printable is the one rule
// every place that shows such text to a person or a model applies.

// RuneKind is why Printable marks a rune.
type RuneKind int

// Kinds of hidden runes.
const (
	RuneVisible   RuneKind = iota
	RuneControl            // C0/C1 controls but newline and tab
	RuneBidi               // reorders the text around it
	RuneInvisible          // draws nothing (zero-width, fillers, tags)
)

// KindOfRune classifies r; RuneVisible for a rune Printable leaves alone.
func KindOfRune(r rune) RuneKind {
	switch {
	case r == '\n' || r == '\t':
		return RuneVisible
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
		return RuneControl
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return RuneBidi
	case r == 0x00ad, r == 0x034f, r == 0x115f, r == 0x1160, r == 0x17b4, r == 0x17b5, r == 0x180e,
		r >= 0x200b && r <= 0x200d, r == 0x2028, r == 0x2029, r >= 0x2060 && r <= 0x2064,
		r >= 0x206a && r <= 0x206f, r == 0x3164, r == 0xfeff, r == 0xffa0, r >= 0xfff9 && r <= 0xfffb,
		r >= 0xe0000 && r <= 0xe007f, // tag characters
		r >= 0xe0100 && r <= 0xe01ef: // supplementary variation selectors (hide bytes after a letter)
		return RuneInvisible
	}
	return RuneVisible
}

// HiddenRune reports whether Printable marks r.
func HiddenRune(r rune) bool { return KindOfRune(r) != RuneVisible }

// Printable makes text safe to show without changing what can be read:
// control characters other than newline and tab, bidi controls and
// invisible characters are shown as visible ⟨U+XXXX⟩ markers (RuneMarker).
// Invalid UTF-8 reads as U+FFFD.
func Printable(s string) string {
	if !strings.ContainsFunc(s, HiddenRune) {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	var b strings.Builder
	for _, r := range s {
		if HiddenRune(r) {
			b.WriteString(RuneMarker(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// PrintableLine is Printable for text shown on one line: newline and tab
// are marked too, so the text cannot forge a line of its own.
func PrintableLine(s string) string {
	s = Printable(s)
	if !strings.ContainsAny(s, "\t\n") {
		return s
	}
	return strings.NewReplacer("\t", RuneMarker('\t'), "\n", RuneMarker('\n')).Replace(s)
}

// RuneMarker is how Printable shows a hidden rune.
func RuneMarker(r rune) string { return fmt.Sprintf("⟨U+%04X⟩", r) }
