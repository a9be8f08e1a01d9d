package examples

import (
	"testing"

	"github.com/roomrelay/roomrelay/relay"
)

func TestStandupTimerPassesTheRules(t *testing.T) {
	files := StandupTimer()
	if _, ok := files["src/App.tsx"]; !ok || len(files) != 2 {
		t.Fatalf("files: %v", len(files))
	}
	if err := relay.ValidateSnippet(files); err != nil {
		t.Fatal(err)
	}
}
