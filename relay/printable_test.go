package relay

import "testing"

func TestPrintable(t *testing.T) {
	for _, c := range []struct{ in, want, line string }{
		{"plain text", "plain text", "plain text"},
		{"a\x1b[2Jb", "a⟨U+001B⟩[2Jb", "a⟨U+001B⟩[2Jb"},
		{"two\nlines\tand tab", "two\nlines\tand tab", "two⟨U+000A⟩lines⟨U+0009⟩and tab"},
		{"\u202Eevil", "⟨U+202E⟩evil", "⟨U+202E⟩evil"},
		{"csi\x9b2J", "csi\uFFFD2J", "csi\uFFFD2J"}, // a raw 8-bit CSI byte (invalid UTF-8)
		{"c1\u009b2J", "c1⟨U+009B⟩2J", "c1⟨U+009B⟩2J"},
	} {
		if got := Printable(c.in); got != c.want {
			t.Errorf("Printable(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := PrintableLine(c.in); got != c.line {
			t.Errorf("PrintableLine(%q) = %q, want %q", c.in, got, c.line)
		}
	}
}
