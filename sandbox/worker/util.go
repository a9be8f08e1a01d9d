package worker

import (
	"time"
	"unicode/utf8"
)

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
