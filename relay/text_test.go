package relay

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCutUTF8(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"abc", 5, "abc"},
		{"abc", 2, "ab"},
		{"abc", 0, ""},
		{"abc", -1, ""},
		{"aé", 2, "a"},                          // é is 2 bytes: not split
		{"a€b", 3, "a"},                         // € is 3 bytes
		{"a€b", 4, "a€"},                        //
		{"😀x", 3, ""},                           // 4-byte rune
		{"\x80\x80\x80\x80\x80", 2, "\x80\x80"}, // invalid input: a byte cut
	} {
		if got := CutUTF8(c.in, c.max); got != c.want {
			t.Errorf("CutUTF8(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
	}
	if got := Clip("héllo", 2); got != "h…" {
		t.Errorf("Clip = %q", got)
	}
	if got := Clip("héllo", 10); got != "héllo" {
		t.Errorf("Clip of a short string = %q", got)
	}
}

func TestCleanLine(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"linux\x1b[31m", "linux[31m"},
		{"a\nb\tc\rd", "abcd"},
		{"evil\u202egnp.exe", "evilgnp.exe"}, // bidi override (dispatch.go's old cleaner kept it)
		{"a\u2066b\u2069", "ab"},
		{"zero\u200bwidth", "zerowidth"},
		{"bad\xffutf8", "badutf8"},
		{"ünïcödé ok", "ünïcödé ok"},
	} {
		if got := CleanLine(c.in, 100); got != c.want {
			t.Errorf("CleanLine(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := CleanLine(strings.Repeat("é", 100), 5); got != "éé" {
		t.Errorf("CleanLine cut = %q", got)
	}
}

// FuzzCutUTF8 checks the cut's promises for any input: a prefix of at most
// max bytes, valid UTF-8 when the input is, and as long as it can be (the
// next rune would not fit); Clip and CleanLine keep them too.
func FuzzCutUTF8(f *testing.F) {
	f.Add("héllo wörld", 3)
	f.Add("😀😀😀", 5)
	f.Add("\xe2\x82", 1)
	f.Add("a\u202eb\nc", 2)
	f.Fuzz(func(t *testing.T, s string, max int) {
		max %= len(s) + 4
		if max < 0 {
			max = -max
		}
		got := CutUTF8(s, max)
		if !strings.HasPrefix(s, got) || len(got) > max {
			t.Fatalf("CutUTF8(%q, %d) = %q: not a prefix of at most %d bytes", s, max, got, max)
		}
		if utf8.ValidString(s) {
			if !utf8.ValidString(got) {
				t.Fatalf("CutUTF8(%q, %d) = %q: split a rune", s, max, got)
			}
			if len(got) < len(s) {
				_, size := utf8.DecodeRuneInString(s[len(got):])
				if len(got)+size <= max {
					t.Fatalf("CutUTF8(%q, %d) = %q: the next rune fits", s, max, got)
				}
			}
			if c := Clip(s, max); !utf8.ValidString(c) || (len(s) <= max && c != s) {
				t.Fatalf("Clip(%q, %d) = %q", s, max, c)
			}
		}
		c := CleanLine(s, max)
		if !utf8.ValidString(c) || len(c) > max || strings.ContainsFunc(c, func(r rune) bool { return HiddenRune(r) || r == '\n' || r == '\t' }) {
			t.Fatalf("CleanLine(%q, %d) = %q", s, max, c)
		}
	})
}
