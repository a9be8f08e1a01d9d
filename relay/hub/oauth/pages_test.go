package oauth

import (
	"testing"
	"time"
)

// TestHumanDuration: the lifetimes the consent page shows (it showed 20 s
// as "2", 10 m as "1" and 1h30m as "1h3": zero-unit suffixes were trimmed
// from the text, digits and all).
func TestHumanDuration(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{20 * time.Second, "20s"},
		{10 * time.Minute, "10m"},
		{90 * time.Minute, "1h30m"},
		{time.Hour, "1h"},
		{10 * time.Hour, "10h"},
		{90 * time.Second, "1m30s"},
		{time.Hour + 5*time.Second, "1h5s"},
		{30 * time.Minute, "30m"},
		{25 * time.Hour, "25h"},
		{24 * time.Hour, "24h"},
		{48 * time.Hour, "2 days"},
		{30 * 24 * time.Hour, "30 days"},
		{2160 * time.Hour, "90 days"},
		{1500 * time.Millisecond, "2s"},
		{0, "0s"},
	} {
		if got := human(c.d); got != c.want {
			t.Errorf("human(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}
