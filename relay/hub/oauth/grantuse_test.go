package oauth

import (
	"testing"
	"time"
)

// TestGrantLastUsedMovesOnUse: `hub oauth grants` LAST USED moved only at
// the code exchange and refreshes; now every use of an access token moves
// it, written at most once a minute per grant.
func TestGrantLastUsedMovesOnUse(t *testing.T) {
	ta := startAS(t, nil)
	_, tok := ta.fullFlow("read")
	access := tok["access_token"].(string)
	lastUsed := func() time.Time {
		t.Helper()
		gs, err := ta.as.Grants(t.Context(), "p1")
		if err != nil || len(gs) != 1 {
			t.Fatalf("grants: %v %+v", err, gs)
		}
		return gs[0].LastUsed
	}
	issued := lastUsed()

	ta.clock.advance(10 * time.Minute)
	before := ta.clock.now()
	if s := ta.mcpStatus(access); s == 401 {
		t.Fatalf("MCP with the access token: %d", s)
	}
	used := lastUsed()
	if used.Before(before) {
		t.Fatalf("LAST USED %v after a use at %v (issued %v): did not move", used, before, issued)
	}

	ta.clock.advance(30 * time.Second) // within the minute: no write
	if s := ta.mcpStatus(access); s == 401 {
		t.Fatalf("MCP with the access token: %d", s)
	}
	if got := lastUsed(); !got.Equal(used) {
		t.Errorf("LAST USED rewritten %v after %v: more than once a minute", got.Sub(used), time.Duration(0))
	}

	ta.clock.advance(31 * time.Second)
	if s := ta.mcpStatus(access); s == 401 {
		t.Fatalf("MCP with the access token: %d", s)
	}
	if got := lastUsed(); !got.After(used.Add(time.Minute)) {
		t.Errorf("LAST USED %v a minute after %v: did not move", got, used)
	}
}
