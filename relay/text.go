package relay

import (
	"strings"
	"unicode/utf8"
)

// The text rules every part of roomrelay applies to strings it bounds or
// keeps from the network: one cut, one line cleaner. Each is written here
// once; other packages call these instead of slicing strings themselves.

// CutUTF8 cuts s to at most max bytes without splitting a rune: how both
// ends bound a room name (MaxRoomNameBytes) and other text they keep. In
// valid UTF-8 a rune starts within utf8.UTFMax-1 bytes before any index,
// so the cut walks back at most that far; in invalid UTF-8 it cuts at max.
func CutUTF8(s string, max int) string {
	if max < 0 {
		max = 0
	}
	if len(s) <= max {
		return s
	}
	for i := max; i >= 0 && i > max-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i]
		}
	}
	return s[:max] // not UTF-8 here: the byte cut is as good as any
}

// Clip is CutUTF8 that marks a cut with "…" (the mark is not counted in
// max): how errors and logs quote text they were given.
func Clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return CutUTF8(s, max) + "…"
}

// CleanLine keeps of s what shows as it is on one line under Printable's
// rule: invalid UTF-8 and every rune PrintableLine would mark (controls,
// newline and tab included; bidi controls; invisible characters) are
// dropped, and the rest is cut to at most max bytes with CutUTF8. It is for
// short text a party reports about itself (a device's OS, an app's name, a
// caller), which is kept and shown later; text that must be read as sent
// goes through Printable instead.
func CleanLine(s string, max int) string {
	if max < 0 {
		max = 0
	}
	if len(s) > 4*max { // cut first: the rest would be dropped anyway
		s = CutUTF8(s, 4*max)
	}
	s = strings.ToValidUTF8(s, "")
	s = strings.Map(func(r rune) rune {
		if HiddenRune(r) || r == '\n' || r == '\t' {
			return -1
		}
		return r
	}, s)
	return CutUTF8(s, max)
}
