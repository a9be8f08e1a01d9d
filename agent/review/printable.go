package review

import (
	"fmt"
	"strings"
)

// Printable makes text safe to show a reviewer without changing what can be
// read: control characters other than newline and tab (terminal escape
// sequences, carriage returns that overwrite a line), Unicode bidi controls
// (which reorder how code reads, "Trojan Source") and invisible characters
// (zero-width joiners and spaces, fillers, tags: two identifiers that look
// the same) are shown as visible ⟨U+XXXX⟩ markers. The approval still binds
// to the stored bytes.
func Printable(s string) string {
	if !strings.ContainsFunc(s, hidden) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if hidden(r) {
			b.WriteString(Marker(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Marker is how Printable shows a hidden rune.
func Marker(r rune) string { return fmt.Sprintf("⟨U+%04X⟩", r) }

// Kind is why Printable marks a rune.
type Kind int

// Kinds of hidden runes.
const (
	Visible   Kind = iota
	Control        // C0/C1 controls but newline and tab
	Bidi           // reorders the text around it
	Invisible      // draws nothing (zero-width, fillers, tags)
)

// KindOf classifies r; Visible for a rune Printable leaves alone.
func KindOf(r rune) Kind {
	switch {
	case r == '\n' || r == '\t':
		return Visible
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
		return Control
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return Bidi
	case r == 0x00ad, r == 0x034f, r == 0x115f, r == 0x1160, r == 0x17b4, r == 0x17b5, r == 0x180e,
		r >= 0x200b && r <= 0x200d, r == 0x2028, r == 0x2029, r >= 0x2060 && r <= 0x2064,
		r >= 0x206a && r <= 0x206f, r == 0x3164, r == 0xfeff, r == 0xffa0, r >= 0xfff9 && r <= 0xfffb,
		r >= 0xe0000 && r <= 0xe007f, // tag characters
		r >= 0xe0100 && r <= 0xe01ef: // supplementary variation selectors (hide bytes after a letter)
		return Invisible
	}
	return Visible
}

func hidden(r rune) bool { return KindOf(r) != Visible }

// Hidden counts what Printable marks in one text, for a warning that
// names it before the reader meets it.
type Hidden struct {
	Control, Bidi, Invisible int
	// Runes are the distinct hidden runes in order of first appearance,
	// at most maxHiddenRunes of them; More says there were others.
	Runes []rune
	More  bool
}

const maxHiddenRunes = 6

// ScanHidden counts the hidden runes of s.
func ScanHidden(s string) Hidden {
	var h Hidden
	if !strings.ContainsFunc(s, hidden) {
		return h
	}
	seen := map[rune]bool{}
	for _, r := range s {
		switch KindOf(r) {
		case Visible:
			continue
		case Control:
			h.Control++
		case Bidi:
			h.Bidi++
		case Invisible:
			h.Invisible++
		}
		if !seen[r] {
			seen[r] = true
			if len(h.Runes) < maxHiddenRunes {
				h.Runes = append(h.Runes, r)
			} else {
				h.More = true
			}
		}
	}
	return h
}

// Any reports whether anything was found.
func (h Hidden) Any() bool { return h.Control+h.Bidi+h.Invisible > 0 }

// String is e.g. "2 bidi controls, 1 invisible character (U+202E, U+2066, U+200B)".
func (h Hidden) String() string {
	var parts []string
	add := func(n int, one, many string) {
		switch {
		case n == 1:
			parts = append(parts, "1 "+one)
		case n > 1:
			parts = append(parts, fmt.Sprintf("%d %s", n, many))
		}
	}
	add(h.Bidi, "bidi control", "bidi controls")
	add(h.Invisible, "invisible character", "invisible characters")
	add(h.Control, "control character", "control characters")
	codes := make([]string, len(h.Runes))
	for i, r := range h.Runes {
		codes[i] = fmt.Sprintf("U+%04X", r)
	}
	if h.More {
		codes = append(codes, "…")
	}
	return strings.Join(parts, ", ") + " (" + strings.Join(codes, ", ") + ")"
}

// HiddenWarning is the banner's text, shared by the page and the CLI.
const HiddenWarning = "Hidden characters: some files hold characters that are invisible or reorder how the text reads, so the code may not do what it appears to do (\"Trojan Source\"). They are shown as ⟨U+XXXX⟩ markers; read those lines with care."

// LineCount counts lines as an editor shows them: a final newline does not
// start another line.
func LineCount(s string) int {
	n := strings.Count(s, "\n")
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}
