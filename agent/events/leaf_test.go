package events

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLeaf: agent/events imports nothing of agent/*, directly or through
// another package, so everything that publishes or reads an event can
// import it.
func TestLeaf(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/roomrelay/roomrelay/agent") && dep != "github.com/roomrelay/roomrelay/agent/events" {
			t.Errorf("agent/events depends on %s", dep)
		}
	}
}
