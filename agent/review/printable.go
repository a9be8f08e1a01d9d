package review

import (
	"fmt"
	"strings"

	"github.com/roomrelay/roomrelay/relay"
)

// Printable makes text safe to show a reviewer without changing what can be
// read: control characters other than newline and tab (terminal escape
// sequences, carriage returns that overwrite a line), Unicode bidi controls
// (which reorder how code reads, "Trojan Source") and invisible characters
// (zero-width joiners and spaces, fillers, tags: two identifiers that look
// the same) are shown as visible ⟨U+XXXX⟩ markers. The approval still binds
// to the stored bytes. The rule is relay.Printable's.
func Printable(s string) string { return relay.Printable(s) }

// Marker is how Printable shows a hidden rune.
func Marker(r rune) string { return relay.RuneMarker(r) }

// Kind is why Printable marks a rune.
type Kind = relay.RuneKind

// Kinds of hidden runes.
const (
	Visible   = relay.RuneVisible
	Control   = relay.RuneControl   // C0/C1 controls but newline and tab
	Bidi      = relay.RuneBidi      // reorders the text around it
	Invisible = relay.RuneInvisible // draws nothing (zero-width, fillers, tags)
)

// KindOf classifies r; Visible for a rune Printable leaves alone.
func KindOf(r rune) Kind { return relay.KindOfRune(r) }

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
